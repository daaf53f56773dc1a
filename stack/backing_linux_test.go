package stack

import (
	"os"
	"runtime"
	"testing"
	"unsafe"
)

// BenchmarkRCWrite64KBacked compares RC WRITE goodput into a plain
// region (BenchmarkRCWrite64K's settings) with WRITEs into a region
// backed by /proc/self/mem over a Go buffer, as the daemon registers a
// client's own memory: a pread and a pwrite per packet on the
// responder.
func BenchmarkRCWrite64KBacked(b *testing.B) {
	for _, backed := range []bool{false, true} {
		name := "plain"
		if backed {
			name = "procmem"
		}
		b.Run(name, func(b *testing.B) {
			c := newBenchConn(b, nil, false, 14)
			if backed {
				f, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
				if err != nil {
					b.Skip(err)
				}
				defer f.Close()
				buf := make([]byte, 8<<20)
				addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
				mr, err := c.mrb.PD().RegisterMRBacked(f, addr, len(buf), addr, c.mrb.Access())
				if err != nil {
					b.Fatal(err)
				}
				c.mrb = mr
				defer runtime.KeepAlive(buf)
			}
			b.ReportAllocs()
			c.run(b, OpWrite, 64<<10, 8, 8)
		})
	}
}

// TestBackedProcSelfMem runs a WRITE and a READ through a region backed
// by /proc/self/mem on running engines, and checks the bytes land in
// the Go buffer behind it.
func TestBackedProcSelfMem(t *testing.T) {
	f, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	fp := newFencePair(t)
	qa, _ := fp.qps(t)
	local, lbuf := fp.mr(t, fp.pa, 0)
	buf := make([]byte, 1<<20)
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	remote, err := fp.pb.RegisterMRBacked(f, addr, len(buf), addr, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fill(lbuf[:len(buf)], 11)
	if err := qa.PostSend(&SendWR{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{local.SGE(0, uint32(len(buf)))},
		Remote: RemoteAddr{remote.Addr(), remote.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, fp.ca); wc.Status != WCSuccess {
		t.Fatalf("write: %v", wc.Status)
	}
	for i := range buf {
		if buf[i] != lbuf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, buf[i], lbuf[i])
		}
	}
	if err := qa.PostSend(&SendWR{ID: 2, Op: OpRead, Flags: SendSignaled, SG: []SGE{local.SGE(2<<20, 1<<20)},
		Remote: RemoteAddr{remote.Addr(), remote.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, fp.ca); wc.Status != WCSuccess {
		t.Fatalf("read: %v", wc.Status)
	}
	for i := range buf {
		if lbuf[2<<20+i] != buf[i] {
			t.Fatalf("read byte %d: %#x, want %#x", i, lbuf[2<<20+i], buf[i])
		}
	}
	if err := remote.Deregister(); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(buf)
}
