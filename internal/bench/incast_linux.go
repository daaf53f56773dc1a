package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/internal/incast"
	"github.com/uroce/uroce/stack"
)

// Incast runs, for each flow count and each of DCQCN on and off, that
// many RC WRITE (or READ) flows from their own sender namespaces into one receiver
// through the bed's ECN-marking bottleneck, and reports per-flow goodput,
// fairness, the bottleneck's drops and marks, CNPs and retransmissions.
func Incast(ctx context.Context, o IncastOptions) (*IncastReport, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := canRun("bench incast"); err != nil {
		return nil, err
	}
	rep := &IncastReport{Options: o}
	for _, n := range o.Flows {
		for _, on := range o.Modes {
			r, err := incastRun(ctx, &o, n, on)
			if err != nil {
				return nil, fmt.Errorf("bench incast: %d flows, dcqcn %v: %w", n, on, err)
			}
			rep.Runs = append(rep.Runs, *r)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return rep, nil
}

// incastFlow is one sender's device, QP and counts.
type incastFlow struct {
	dev    *stack.Device
	qp     *stack.QP // the sender's
	peer   *stack.QP // the receiver's
	cq     *stack.CQ
	post   *stack.QP // where the WRs are posted: qp, or peer for READs
	pcq    *stack.CQ // and where they complete
	op     string
	wr     stack.SendWR
	done   atomic.Uint64 // WRs completed
	hold   atomic.Bool   // post nothing new for now (the join phase)
	failed error
}

func incastRun(ctx context.Context, o *IncastOptions, n int, dcqcnOn bool) (_ *IncastRun, err error) {
	bed, err := incast.New(incast.Config{Senders: n, Bottleneck: o.Bottleneck, MTU: o.MTU, Marking: o.Marking})
	if err != nil {
		return nil, err
	}
	defer bed.Close()
	cfg := stack.Config{XDPMode: o.XDPMode, Queues: 1, Interface: incast.HostDev, LinkSpeed: o.LineRate,
		DCQCN: o.DCQCN, NoDCQCN: !dcqcnOn, SendWindow: o.SendWindow, XDPRingSize: o.RingSize}
	rh := bed.Receiver()
	recv, err := openIn(ctx, rh.NS, cfg)
	if err != nil {
		return nil, err
	}
	defer recv.Close()
	pdR, err := recv.AllocPD()
	if err != nil {
		return nil, err
	}
	cqR, err := recv.CreateCQ(16)
	if err != nil {
		return nil, err
	}
	srcAccess, peerWR := stack.AccessLocalWrite, 1
	if o.Read {
		srcAccess, peerWR = stack.AccessLocalWrite|stack.AccessRemoteRead, 256
	}
	dst := make([]byte, o.Size*n)
	mrR, err := pdR.RegisterMR(dst, stack.AccessLocalWrite|stack.AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	src := make([]byte, o.Size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	flows := make([]*incastFlow, n)
	for i := range flows {
		h := bed.Sender(i + 1)
		d, err := openIn(ctx, h.NS, cfg)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		f := &incastFlow{dev: d, op: o.op()}
		flows[i] = f
		pd, err := d.AllocPD()
		if err != nil {
			return nil, err
		}
		if f.cq, err = d.CreateCQ(1024); err != nil {
			return nil, err
		}
		mr, err := pd.RegisterMR(src, srcAccess)
		if err != nil {
			return nil, err
		}
		if f.qp, err = pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: f.cq, RecvCQ: f.cq, MaxSendWR: 256, MaxRecvWR: 1}); err != nil {
			return nil, err
		}
		f.post, f.pcq = f.qp, f.cq
		pcq := cqR
		if o.Read {
			if pcq, err = recv.CreateCQ(1024); err != nil {
				return nil, err
			}
			f.pcq = pcq
		}
		if f.peer, err = pdR.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: pcq, RecvCQ: pcq, MaxSendWR: peerWR, MaxRecvWR: 1}); err != nil {
			return nil, err
		}
		sa, ra := h.Addr.Addr(), rh.Addr.Addr()
		if err := connect(d, f.qp, f.peer, sa, ra); err != nil {
			return nil, err
		}
		if err := connect(recv, f.peer, f.qp, ra, sa); err != nil {
			return nil, err
		}
		f.wr = stack.SendWR{Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{mr.SGE(0, uint32(o.Size))},
			Remote: stack.RemoteAddr{Addr: mrR.Addr() + uint64(i*o.Size), RKey: mrR.RKey()}}
		if o.Read {
			f.post = f.peer
			f.wr = stack.SendWR{Op: stack.OpRead, Flags: stack.SendSignaled, SG: []stack.SGE{mrR.SGE(uint64(i*o.Size), uint32(o.Size))},
				Remote: stack.RemoteAddr{Addr: mr.Addr(), RKey: mr.RKey()}}
		}
	}

	// Every flow posts Window WRITEs and one more for each that completes,
	// until stop; then it waits for the rest.
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.failed = f.drive(ctx, o.Window, &stop)
		}()
	}
	// The flows' counters are read at the two ends of the measured
	// time; the queue's, which take a tc command each, just outside
	// them, and timed on their own (a command's end is close to when the
	// kernel answered it).
	sleep(ctx, o.Duration/5) // to a steady state
	q0, err := bed.QueueStats()
	tq0 := time.Now()
	if err != nil {
		stop.Store(true)
		wg.Wait()
		return nil, err
	}
	d0 := make([]uint64, n)
	c0 := make([]stack.Counters, n)
	p0 := make([]stack.QPCounters, n)
	for i, f := range flows {
		d0[i], c0[i], p0[i] = f.done.Load(), f.dev.Counters(), f.peer.Counters()
	}
	r0 := recv.Counters()
	start := time.Now()
	sleep(ctx, o.Duration)
	d1 := make([]uint64, n)
	c1 := make([]stack.Counters, n)
	p1 := make([]stack.QPCounters, n)
	for i, f := range flows {
		d1[i], c1[i], p1[i] = f.done.Load(), f.dev.Counters(), f.peer.Counters()
	}
	r1 := recv.Counters()
	el := time.Since(start)
	q1, qerr := bed.QueueStats()
	qt := time.Since(tq0)
	run := &IncastRun{Flows: n, DCQCN: dcqcnOn}
	run.Report = incast.Report{Title: fmt.Sprintf("%d flows, DCQCN %s", n, onOff(dcqcnOn)), Bottleneck: o.Bottleneck,
		Marking: bed.Config().Marking.Kind, Duration: el, QueueTime: qt}
	for i, f := range flows {
		c := c1[i]
		run.Report.Flows = append(run.Report.Flows, incast.Flow{Name: fmt.Sprintf("s%d", i+1), Bytes: (d1[i] - d0[i]) * uint64(o.Size),
			Packets: c.SentPkts - c0[i].SentPkts, CE: p1[i].NPECNMarked - p0[i].NPECNMarked})
		req1, req0 := c.QP, c0[i].QP // the requester's counters
		if o.Read {
			req1, req0 = p1[i], p0[i]
		}
		run.Retransmitted += req1.RetransmittedPkts - req0.RetransmittedPkts
		run.Probes += req1.LossProbes - req0.LossProbes
		run.Timeouts += req1.LocalAckTimeoutErr - req0.LocalAckTimeoutErr
		run.CNPHandled += c.QP.RPCNPHandled - c0[i].QP.RPCNPHandled
		if st := f.qp.Status(); st.RateLimited {
			run.Rates = append(run.Rates, st.Rate)
		} else {
			run.Rates = append(run.Rates, 0)
		}
	}
	run.Marked = r1.QP.NPECNMarked - r0.QP.NPECNMarked
	run.CNPs = r1.QP.NPCNPSent - r0.QP.NPCNPSent
	run.RxDropped = r1.XSKRxDropped + r1.XSKRxRingFull - r0.XSKRxDropped - r0.XSKRxRingFull
	if n > 1 && o.Join {
		run.Join = join(ctx, flows[n-1], float64(q1.Delta(q0).Bytes)*8/qt.Seconds()/float64(n), o)
	}
	stop.Store(true)
	wg.Wait()
	if qerr != nil {
		return nil, qerr
	}
	run.Report.Queue = q1.Delta(q0)
	for _, f := range flows {
		if f.failed != nil {
			return nil, f.failed
		}
	}
	return run, nil
}

// drive keeps window WRs in flight until stop, then completes them.
func (f *incastFlow) drive(ctx context.Context, window int, stop *atomic.Bool) error {
	wcs := make([]stack.WC, 64)
	var posted, done uint64
	for ctx.Err() == nil && (!stop.Load() || done < posted) {
		for !stop.Load() && !f.hold.Load() && posted-done < uint64(window) {
			f.wr.ID = posted
			if err := f.post.PostSend(&f.wr); err != nil {
				return err
			}
			posted++
		}
		k := f.pcq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != stack.WCSuccess {
				return fmt.Errorf("%s %d: %v", f.op, wc.ID, wc.Status)
			}
			done++
			f.done.Add(1)
		}
		if k == 0 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			f.pcq.Wait(wctx)
			cancel()
		}
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// join measures how long flow f, stopped while the others go on, takes
// after it starts again to reach 90 % of its fair share (share, bit/s)
// over a 10 ms window; -1 when it does not within a second.
func join(ctx context.Context, f *incastFlow, share float64, o *IncastOptions) time.Duration {
	f.hold.Store(true)
	sleep(ctx, o.Duration/5) // its WRITEs drain, the others take its share
	const win = 10 * time.Millisecond
	type sample struct {
		at   time.Time
		done uint64
	}
	start := time.Now()
	hist := []sample{{start, f.done.Load()}}
	f.hold.Store(false)
	for time.Since(start) < time.Second && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
		s := sample{time.Now(), f.done.Load()}
		hist = append(hist, s)
		for _, h := range hist {
			if s.at.Sub(h.at) > win {
				continue
			}
			if d := s.at.Sub(h.at); d >= win/2 {
				if float64(s.done-h.done)*float64(o.Size)*8/d.Seconds() >= 0.9*share {
					return s.at.Sub(start)
				}
			}
			break
		}
	}
	return -1
}
