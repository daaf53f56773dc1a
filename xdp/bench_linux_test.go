package xdp

import (
	"fmt"
	"testing"
	"time"

	"github.com/uroce/uroce/bpf"
)

// BenchmarkVethRaw blasts raw RoCEv2-addressed frames from an AF_XDP
// socket on one end of a veth pair (MTU 9000, copy mode, need_wakeup,
// multi-buffer) to a socket on the other end, from one goroutine, and
// reports the received rate, with the XDP program attached in native and in
// generic mode. One op is one frame received. It is the ceiling for
// anything uroce runs over this link.
func BenchmarkVethRaw(b *testing.B) {
	for _, mode := range []bpf.Mode{bpf.Native, bpf.Generic} {
		b.Run(mode.String(), func(b *testing.B) { benchVethRaw(b, mode) })
	}
}

func benchVethRaw(b *testing.B, mode bpf.Mode) {
	a, z := newVeth(b, 9000, 1, mode)
	cfg := Config{NeedWakeup: true, MultiBuffer: true}
	tx, rx := a.open(b, cfg), z.open(b, cfg)
	for _, size := range []int{64, 1500, 4170} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			frames := make([][]byte, 64)
			for i := range frames {
				frames[i] = roceFrame(a, z, size, uint32(i))
			}
			batch := make([][]byte, 256)
			const window = 1024 // frames in flight at most
			sent, recv := 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			last, progress := start, 0
			for i := 0; recv < b.N; i++ {
				if room := min(b.N-sent, window-(sent-recv), len(frames)); room > 0 {
					sent += tx.Transmit(frames[:room])
				}
				tx.Complete()
				recv += rx.Receive(batch)
				rx.Release()
				if i%1024 == 0 {
					now := time.Now()
					if recv != progress {
						last, progress = now, recv
					} else if now.Sub(last) > time.Second {
						break // frames lost: stop and report them
					}
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(recv)/elapsed.Seconds()/1e6, "Mpps")
			b.ReportMetric(float64(recv)*float64(size)*8/elapsed.Seconds()/1e9, "Gbit/s")
			if lost := sent - recv; lost > 0 {
				b.ReportMetric(float64(lost), "lost")
				b.Errorf("%d of %d frames lost", lost, sent)
			}
			for tx.Pending() > 0 && time.Since(start) < elapsed+time.Second {
				tx.Complete()
			}
		})
	}
}
