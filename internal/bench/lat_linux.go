package bench

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/stack"
)

// Lat measures the latency of small RC RDMA WRITEs between two devices on
// a veth pair the way ib_write_lat does: the two sides ping-pong WRITEs,
// each waiting for the peer's count in the last byte of its own memory;
// a sample is half a round trip. It runs once per polling mode asked for.
func Lat(ctx context.Context, o LatOptions) (*LatReport, error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("bench lat: %w", err)
	}
	pair, err := newPair("bench lat", o.MTU)
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	r := &LatReport{LatOptions: o}
	for _, busy := range o.Modes {
		res, err := latRun(ctx, pair, &o, busy)
		if err != nil {
			return r, fmt.Errorf("bench lat: %w", err)
		}
		r.Results = append(r.Results, res)
	}
	if !o.NoKernel {
		for _, network := range []string{"udp", "tcp"} {
			samples, err := pingPong(ctx, pair, network, o.Size, o.Warmup, o.Iters)
			if err != nil {
				return r, fmt.Errorf("bench lat: %w", err)
			}
			res := summarizeLat(samples)
			res.Kernel = strings.ToUpper(network)
			r.Results = append(r.Results, res)
		}
	}
	return r, nil
}

// latSide is one side of the ping-pong.
type latSide struct {
	dev  *stack.Device
	q    *stack.QP
	cq   *stack.CQ
	buf  []byte
	mr   *stack.MR
	word *uint32 // the aligned word holding the last byte of the message
	wr   stack.SendWR
	wcs  [8]stack.WC
}

func latRun(ctx context.Context, pair *netns.Pair, o *LatOptions, busy bool) (LatResult, error) {
	res := LatResult{BusyPoll: busy}
	cfg := stack.Config{XDPMode: o.XDPMode, Queues: 1, BusyPoll: busy, SocketBusyPoll: o.SocketBusyPoll}
	sides := [2]*latSide{{}, {}}
	for i, end := range []struct {
		ns  *netns.Namespace
		dev string
	}{{pair.A, pair.DevA}, {pair.B, pair.DevB}} {
		c := cfg
		c.Interface = end.dev
		d, err := openIn(ctx, end.ns, c)
		if err != nil {
			return res, err
		}
		defer d.Close()
		s := sides[i]
		s.dev = d
		pd, err := d.AllocPD()
		if err != nil {
			return res, err
		}
		if s.cq, err = d.CreateCQ(64); err != nil {
			return res, err
		}
		// The message goes from the first half and lands in the second.
		half := (o.Size + 4095) &^ 4095
		s.buf = make([]byte, 2*half)
		if s.mr, err = pd.RegisterMR(s.buf, stack.AccessLocalWrite|stack.AccessRemoteWrite); err != nil {
			return res, err
		}
		if s.q, err = pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 16, MaxRecvWR: 1}); err != nil {
			return res, err
		}
		last := half + o.Size - 1
		s.word = (*uint32)(unsafe.Pointer(&s.buf[last&^3]))
	}
	ips := [2]netip.Addr{addrA, addrB}
	for i, s := range sides {
		peer := sides[1-i]
		if err := connect(s.dev, s.q, peer.q, ips[i], ips[1-i]); err != nil {
			return res, err
		}
		s.wr = stack.SendWR{Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{s.mr.SGE(0, uint32(o.Size))},
			Remote: stack.RemoteAddr{Addr: peer.mr.Addr() + uint64(len(peer.buf)/2), RKey: peer.mr.RKey()}}
	}
	n := o.Warmup + o.Iters
	shift := uint((o.Size-1)&3) * 8 // the halves are page-aligned
	// B answers each of A's writes with its own.
	errc := make(chan error, 1)
	go func() {
		b := sides[1]
		for i := 1; i <= n; i++ {
			if err := b.await(ctx, shift, byte(i)); err != nil {
				errc <- err
				return
			}
			if err := b.write(ctx, i); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	a := sides[0]
	samples := make([]time.Duration, 0, o.Iters)
	for i := 1; i <= n; i++ {
		t0 := time.Now()
		if err := a.write(ctx, i); err != nil {
			return res, err
		}
		if err := a.await(ctx, shift, byte(i)); err != nil {
			return res, err
		}
		if i > o.Warmup {
			samples = append(samples, time.Since(t0)/2)
		}
	}
	if err := <-errc; err != nil {
		return res, err
	}
	slices.Sort(samples)
	busyPoll := res.BusyPoll
	res = summarizeLat(samples)
	res.BusyPoll = busyPoll
	return res, nil
}

// summarizeLat gives the figures of sorted samples.
func summarizeLat(samples []time.Duration) LatResult {
	var res LatResult
	k := len(samples)
	res.Iters = k
	res.Min, res.Median, res.Max = samples[0], samples[k/2], samples[k-1]
	res.P99 = samples[min(k-1, k*99/100)]
	res.P999 = samples[min(k-1, k*999/1000)]
	return res
}

// write writes message i (its last byte i) to the peer and waits for its
// completion.
func (s *latSide) write(ctx context.Context, i int) error {
	s.buf[s.wr.SG[0].Length-1] = byte(i)
	s.wr.ID = uint64(i)
	if err := s.q.PostSend(&s.wr); err != nil {
		return err
	}
	for spins := 0; ; spins++ {
		if s.cq.Poll(s.wcs[:1]) == 1 {
			if s.wcs[0].Status != stack.WCSuccess {
				return fmt.Errorf("write %d: %v", i, s.wcs[0].Status)
			}
			return nil
		}
		if spins > 1000 {
			if err := s.cq.Wait(ctx); err != nil {
				return err
			}
		} else {
			runtime.Gosched()
		}
	}
}

// await waits until the last byte of the message reads want: the engine
// writes it when the peer's WRITE lands.
func (s *latSide) await(ctx context.Context, shift uint, want byte) error {
	for spins := 0; ; spins++ {
		if byte(atomic.LoadUint32(s.word)>>shift) == want {
			return nil
		}
		runtime.Gosched()
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.q.State() == stack.StateErr {
				return fmt.Errorf("qp %#x is in the error state", s.q.QPN())
			}
		}
	}
}
