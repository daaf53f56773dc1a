package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// Link measures the raw AF_XDP frame rate of a veth pair and the RC WRITE
// goodput of uroce over the same kind of pair (see the package comment).
func Link(ctx context.Context, o LinkOptions) (*LinkReport, error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("bench link: %w", err)
	}
	pair, err := newPair("bench link", o.MTU)
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	r := &LinkReport{LinkOptions: o}
	for i := 0; i < o.Rounds; i++ {
		var raw, rc LinkRound
		if err := rawPhase(ctx, pair, &o, r, &raw); err != nil {
			return r, fmt.Errorf("bench link: raw frames: %w", err)
		}
		if err := roce(ctx, pair, &o, &rc); err != nil {
			return r, fmt.Errorf("bench link: rc write: %w", err)
		}
		var rd, small LinkRound
		if !o.NoExtra {
			if err := roceOp(ctx, pair, &o, stack.OpRead, o.Size, o.Window, &rd); err != nil {
				return r, fmt.Errorf("bench link: rc read: %w", err)
			}
			if err := roceOp(ctx, pair, &o, stack.OpWrite, 64, 256, &small); err != nil {
				return r, fmt.Errorf("bench link: rc write 64 B: %w", err)
			}
		}
		round := LinkRound{RawSentPerSec: raw.RawSentPerSec, RawFramesPerSec: raw.RawFramesPerSec,
			ReadGoodput: rd.RoCEGoodput, Write64Rate: float64(small.RoCEMessages) / o.Duration.Seconds(),
			RawRxDropped: raw.RawRxDropped, RoCEMessages: rc.RoCEMessages, RoCEGoodput: rc.RoCEGoodput,
			RoCEPacketsPerSec: rc.RoCEPacketsPerSec, RoCERetransmitted: rc.RoCERetransmitted, RoCECPUPerGB: rc.RoCECPUPerGB}
		if !o.NoTCP {
			cpu0 := cpuBusy()
			gp, bytes, err := tcpStream(ctx, pair, o.Duration)
			if err != nil {
				return r, fmt.Errorf("bench link: %w", err)
			}
			// The stream's setup is a few packets; its CPU is the run's.
			round.TCPGoodput, round.TCPCPUPerGB = gp, cpuPerGB(cpuBusy()-cpu0, bytes)
			if !o.NoExtra {
				if round.UDP64Rate, err = udpRate(ctx, pair, 64, o.Duration); err != nil {
					return r, fmt.Errorf("bench link: %w", err)
				}
			}
		}
		r.Rounds = append(r.Rounds, round)
	}
	r.summarize()
	return r, nil
}

// xdpStatser is the AF_XDP link of an interface device.
type xdpStatser interface {
	XDPStats() (xdp.Stats, error)
}

// rawPhase blasts frames from A's link to B's and counts what arrives.
func rawPhase(ctx context.Context, pair *netns.Pair, o *LinkOptions, r *LinkReport, m *LinkRound) error {
	var la, lb stack.Link
	capture := func(dst *stack.Link) func(int, stack.Link) stack.Link {
		return func(q int, l stack.Link) stack.Link {
			if q == 0 {
				*dst = l
			}
			return l
		}
	}
	a, err := openIn(ctx, pair.A, stack.Config{Interface: pair.DevA, XDPMode: o.XDPMode, Queues: 1, Manual: true, WrapLink: capture(&la)})
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := openIn(ctx, pair.B, stack.Config{Interface: pair.DevB, XDPMode: o.XDPMode, Queues: 1, Manual: true, WrapLink: capture(&lb)})
	if err != nil {
		return err
	}
	defer b.Close()
	r.PathMTU = a.Query().ActiveMTU
	if o.Frame == 0 {
		o.Frame = r.PathMTU.Bytes() + 74
		r.Frame = o.Frame
	}
	frames, payload, err := buildFrames(a, b, o.Frame)
	if err != nil {
		return err
	}
	r.FramePayload = payload

	var stop atomic.Bool
	var sent, got atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // sender
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			// At most Window frames in flight: the receiver is not
			// overrun, as a transport's window would not let it be.
			room := uint64(o.RawWindow) - (sent.Load() - got.Load())
			if int64(room) <= 0 {
				runtime.Gosched()
				continue
			}
			n := la.Transmit(frames[:min(uint64(len(frames)), room)])
			sent.Add(uint64(n))
			if n == 0 {
				la.Poll(50 * time.Microsecond)
			}
		}
	}()
	rx := make([][]byte, 64)
	go func() { // receiver
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			n := lb.Receive(rx)
			if n == 0 {
				lb.Poll(time.Millisecond)
				continue
			}
			got.Add(uint64(n))
			lb.Release()
		}
	}()
	// Warm up, then measure.
	sleep(ctx, o.Duration/10)
	s0, g0, t0 := sent.Load(), got.Load(), time.Now()
	sleep(ctx, o.Duration)
	s1, g1, t1 := sent.Load(), got.Load(), time.Now()
	stop.Store(true)
	lb.Wake()
	la.Wake()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := t1.Sub(t0).Seconds()
	m.RawSentPerSec = float64(s1-s0) / secs
	m.RawFramesPerSec = float64(g1-g0) / secs
	if x, ok := lb.(xdpStatser); ok {
		if st, err := x.XDPStats(); err == nil {
			m.RawRxDropped = st.RxDropped + st.RxRingFull
		}
	}
	if m.RawFramesPerSec == 0 {
		return errors.New("no frame arrived")
	}
	return nil
}

// buildFrames returns a batch of RC RDMA WRITE First frames of length n
// from a to b, addressed to a QP that does not exist, and their payload
// length.
func buildFrames(a, b *stack.Device, n int) ([][]byte, int, error) {
	h := bth.Headers{}
	h.DstMAC, h.SrcMAC = b.MAC(), a.MAC()
	h.SrcIP, h.DstIP = addrA, addrB
	h.SrcPort = 49152
	h.BTH = bth.BTHFields{Opcode: bth.OpWriteFirst, PKey: 0xffff, DestQP: 0xfffff0}
	h.RKey, h.DMALen = 1, 1<<20
	payload := n - h.FrameLen(0)
	if payload < 0 || payload%4 != 0 || n > 65535 {
		return nil, 0, fmt.Errorf("frame size %d: want at least %d, with a payload a multiple of 4 bytes", n, h.FrameLen(0))
	}
	frames := make([][]byte, 64)
	data := make([]byte, payload)
	for i := range frames {
		h.BTH.PSN = bth.PSN(i)
		buf := make([]byte, n)
		m, err := bth.Encode(buf, &h, data)
		if err != nil {
			return nil, 0, err
		}
		frames[i] = buf[:m]
	}
	return frames, payload, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// roce runs RC WRITEs from A to B for the duration.
func roce(ctx context.Context, pair *netns.Pair, o *LinkOptions, r *LinkRound) error {
	return roceOp(ctx, pair, o, stack.OpWrite, o.Size, o.Window, r)
}

// roceOp runs op (RDMA WRITE or READ) of size bytes, window of them in
// flight, from A to B for o.Duration and puts the figures in r's RoCE
// fields.
func roceOp(ctx context.Context, pair *netns.Pair, o *LinkOptions, op stack.Opcode, size, window int, r *LinkRound) error {
	cfg := stack.Config{XDPMode: o.XDPMode, Queues: 1, BusyPoll: o.BusyPoll, SocketBusyPoll: o.SocketBusyPoll,
		Batch: o.Batch, XDPRingSize: o.RingSize, SendWindow: o.SendWindow}
	ca, cb := cfg, cfg
	ca.Interface, cb.Interface = pair.DevA, pair.DevB
	a, err := openIn(ctx, pair.A, ca)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := openIn(ctx, pair.B, cb)
	if err != nil {
		return err
	}
	defer b.Close()
	pdA, err := a.AllocPD()
	if err != nil {
		return err
	}
	pdB, err := b.AllocPD()
	if err != nil {
		return err
	}
	cqA, err := a.CreateCQ(4096)
	if err != nil {
		return err
	}
	cqB, err := b.CreateCQ(16)
	if err != nil {
		return err
	}
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, size)
	mrA, err := pdA.RegisterMR(src, stack.AccessLocalWrite)
	access := stack.AccessLocalWrite | stack.AccessRemoteWrite
	if op == stack.OpRead {
		access = stack.AccessLocalWrite | stack.AccessRemoteRead
	}
	if err != nil {
		return err
	}
	mrB, err := pdB.RegisterMR(dst, access)
	if err != nil {
		return err
	}
	qa, err := pdA.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cqA, RecvCQ: cqA, MaxSendWR: 1024, MaxRecvWR: 1})
	if err != nil {
		return err
	}
	qb, err := pdB.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cqB, RecvCQ: cqB, MaxSendWR: 1, MaxRecvWR: 1})
	if err != nil {
		return err
	}
	if err := connect(a, qa, qb, addrA, addrB); err != nil {
		return err
	}
	if err := connect(b, qb, qa, addrB, addrA); err != nil {
		return err
	}
	wr := stack.SendWR{Op: op, Flags: stack.SendSignaled, SG: []stack.SGE{mrA.SGE(0, uint32(size))},
		Remote: stack.RemoteAddr{Addr: mrB.Addr(), RKey: mrB.RKey()}}
	wcs := make([]stack.WC, 64)
	var posted, done uint64
	var failed error
	run := func(d time.Duration) (uint64, time.Duration) {
		start, d0 := time.Now(), done
		for time.Since(start) < d && failed == nil && ctx.Err() == nil {
			for posted-done < uint64(window) {
				wr.ID = posted
				if err := qa.PostSend(&wr); err != nil {
					failed = err
					break
				}
				posted++
			}
			n := cqA.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Status != stack.WCSuccess {
					failed = fmt.Errorf("write %d: %v", wc.ID, wc.Status)
				}
				done++
			}
			if n == 0 {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := cqA.Wait(wctx); err != nil && ctx.Err() == nil {
					failed = fmt.Errorf("no completion for 10 s: %w", err)
				}
				cancel()
			}
		}
		return done - d0, time.Since(start)
	}
	run(o.Duration / 10) // warm up
	c0, cpu0 := a.Counters(), cpuBusy()
	n, el := run(o.Duration)
	c1, cpu1 := a.Counters(), cpuBusy()
	// Let the rest finish before the QPs go.
	for done < posted && failed == nil && ctx.Err() == nil {
		if k := cqA.Poll(wcs); k > 0 {
			done += uint64(k)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := cqA.Wait(wctx); err != nil && ctx.Err() == nil {
			failed = err
		}
		cancel()
	}
	if failed != nil {
		return failed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := el.Seconds()
	r.RoCEMessages = n
	r.RoCEGoodput = float64(n) * float64(size) * 8 / secs
	r.RoCEPacketsPerSec = float64(c1.SentPkts-c0.SentPkts) / secs
	r.RoCERetransmitted = c1.QP.RetransmittedPkts - c0.QP.RetransmittedPkts
	r.RoCECPUPerGB = cpuPerGB(cpu1-cpu0, n*uint64(size))
	return nil
}
