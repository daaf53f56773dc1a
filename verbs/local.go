package verbs

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/uroce/uroce/stack"
)

// Local returns the verbs of an in-process stack device: thin adapters
// over d's objects, which add no allocation per work request or
// completion. Closing the returned Device closes d. Objects of another
// implementation (a CQ, SRQ or AH of the daemon's client) are refused
// with an error wrapping stack.ErrInvalidArg.
func Local(d *stack.Device) Device { return &localDevice{d: d} }

// StackDevice returns the stack device under a Device of Local, or false
// for a Device of another implementation. Tests and the demo use it for
// what only the stack has (Step, MAC, the clock).
func StackDevice(d Device) (*stack.Device, bool) {
	l, ok := d.(*localDevice)
	if !ok || l == nil {
		return nil, false
	}
	return l.d, true
}

// StackQP returns the stack QP under a QP of Local, or false.
func StackQP(q QP) (*stack.QP, bool) {
	l, ok := q.(*localQP)
	if !ok || l == nil {
		return nil, false
	}
	return l.q, true
}

// StackPD returns the stack PD under a PD of Local, or false.
func StackPD(pd PD) (*stack.PD, bool) {
	l, ok := pd.(*localPD)
	if !ok || l == nil {
		return nil, false
	}
	return l.pd, true
}

// StackMR returns the stack region under an MR of Local, or false.
func StackMR(mr MR) (*stack.MR, bool) {
	l, ok := mr.(*localMR)
	if !ok || l == nil {
		return nil, false
	}
	return l.mr, true
}

// StackCQ returns the stack CQ under a CQ of Local, or false.
func StackCQ(c CQ) (*stack.CQ, bool) {
	l, ok := c.(*localCQ)
	if !ok || l == nil {
		return nil, false
	}
	return l.c, true
}

// StackSRQ returns the stack SRQ under an SRQ of Local, or false.
func StackSRQ(s SRQ) (*stack.SRQ, bool) {
	l, ok := s.(*localSRQ)
	if !ok || l == nil {
		return nil, false
	}
	return l.s, true
}

// StackAH returns the stack address handle under an AH of Local, or
// false.
func StackAH(ah AH) (*stack.AH, bool) {
	l, ok := ah.(*localAH)
	if !ok || l == nil {
		return nil, false
	}
	return l.ah, true
}

var (
	_ Device = (*localDevice)(nil)
	_ PD     = (*localPD)(nil)
	_ MR     = (*localMR)(nil)
	_ CQ     = (*localCQ)(nil)
	_ SRQ    = (*localSRQ)(nil)
	_ AH     = (*localAH)(nil)
	_ QP     = (*localQP)(nil)
	_ MW     = (*localMW)(nil)
)

type localDevice struct {
	d      *stack.Device
	closed atomic.Bool
}

func (l *localDevice) Query() DeviceAttr             { return l.d.Query() }
func (l *localDevice) GIDs() []netip.Addr            { return l.d.GIDs() }
func (l *localDevice) GID(i int) (netip.Addr, error) { return l.d.GID(i) }
func (l *localDevice) Counters() Counters            { return l.d.Counters() }
func (l *localDevice) Close() error                  { l.closed.Store(true); return l.d.Close() }

// AllocBuffer returns plain memory: the stack reaches any of it alike.
func (l *localDevice) AllocBuffer(n int) ([]byte, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("alloc buffer: %w", stack.ErrClosed)
	}
	if n < 1 {
		return nil, fmt.Errorf("alloc buffer: %d bytes: %w", n, stack.ErrInvalidArg)
	}
	return make([]byte, n), nil
}

// FreeBuffer leaves the buffer to the garbage collector.
func (l *localDevice) FreeBuffer(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("free buffer: empty buffer: %w", stack.ErrInvalidArg)
	}
	return nil
}

func (l *localDevice) AllocPD() (PD, error) {
	pd, err := l.d.AllocPD()
	if err != nil {
		return nil, err
	}
	return &localPD{pd: pd}, nil
}

func (l *localDevice) CreateCQ(n int) (CQ, error) {
	c, err := l.d.CreateCQ(n)
	if err != nil {
		return nil, err
	}
	return &localCQ{c: c}, nil
}

type localPD struct{ pd *stack.PD }

func (l *localPD) Dealloc() error { return l.pd.Dealloc() }

func (l *localPD) RegisterMR(buf []byte, access Access) (MR, error) {
	mr, err := l.pd.RegisterMR(buf, access)
	if err != nil {
		return nil, err
	}
	return &localMR{mr: mr}, nil
}

func (l *localPD) CreateSRQ(init SRQInit) (SRQ, error) {
	s, err := l.pd.CreateSRQ(init)
	if err != nil {
		return nil, err
	}
	return &localSRQ{s: s}, nil
}

func (l *localPD) CreateAH(attr AHAttr) (AH, error) {
	ah, err := l.pd.CreateAH(attr)
	if err != nil {
		return nil, err
	}
	return &localAH{ah: ah}, nil
}

func (l *localPD) AllocMW(t MWType) (MW, error) {
	mw, err := l.pd.AllocMW(t)
	if err != nil {
		return nil, err
	}
	return &localMW{mw: mw}, nil
}

// CreateQP creates the QP on the stack CQs and SRQ under init's. A nil
// CQ is left for the stack to refuse.
func (l *localPD) CreateQP(init QPInit) (QP, error) {
	send, ok := localCQOf(init.SendCQ)
	if !ok {
		return nil, fmt.Errorf("create qp: send cq %T is not a local one: %w", init.SendCQ, stack.ErrInvalidArg)
	}
	recv, ok := localCQOf(init.RecvCQ)
	if !ok {
		return nil, fmt.Errorf("create qp: recv cq %T is not a local one: %w", init.RecvCQ, stack.ErrInvalidArg)
	}
	srq, ok := localSRQOf(init.SRQ)
	if !ok {
		return nil, fmt.Errorf("create qp: srq %T is not a local one: %w", init.SRQ, stack.ErrInvalidArg)
	}
	q, err := l.pd.CreateQP(stack.QPInit{
		Type: init.Type, SendCQ: send, RecvCQ: recv, SRQ: srq,
		MaxSendWR: init.MaxSendWR, MaxRecvWR: init.MaxRecvWR,
		MaxSendSGE: init.MaxSendSGE, MaxRecvSGE: init.MaxRecvSGE,
		MaxInline: init.MaxInline, SignalAll: init.SignalAll, InfiniteRetry7: init.InfiniteRetry7,
	})
	if err != nil {
		return nil, err
	}
	return &localQP{q: q}, nil
}

// localCQOf returns the stack CQ of c: nil for none, false for a CQ of
// another implementation.
func localCQOf(c CQ) (*stack.CQ, bool) {
	if c == nil {
		return nil, true
	}
	l, ok := c.(*localCQ)
	if !ok {
		return nil, false
	}
	if l == nil {
		return nil, true
	}
	return l.c, true
}

// localSRQOf is localCQOf for SRQs.
func localSRQOf(s SRQ) (*stack.SRQ, bool) {
	if s == nil {
		return nil, true
	}
	l, ok := s.(*localSRQ)
	if !ok {
		return nil, false
	}
	if l == nil {
		return nil, true
	}
	return l.s, true
}

type localMR struct{ mr *stack.MR }

func (l *localMR) LKey() uint32                      { return l.mr.LKey() }
func (l *localMR) RKey() uint32                      { return l.mr.RKey() }
func (l *localMR) Addr() uint64                      { return l.mr.Addr() }
func (l *localMR) Len() int                          { return l.mr.Len() }
func (l *localMR) Bytes() []byte                     { return l.mr.Bytes() }
func (l *localMR) SGE(off uint64, length uint32) SGE { return l.mr.SGE(off, length) }
func (l *localMR) Deregister() error                 { return l.mr.Deregister() }

type localMW struct{ mw *stack.MW }

func (l *localMW) RKey() uint32   { return l.mw.RKey() }
func (l *localMW) Type() MWType   { return l.mw.Type() }
func (l *localMW) Dealloc() error { return l.mw.Dealloc() }

// StackMW returns the stack window under an MW of Local, or false.
func StackMW(mw MW) (*stack.MW, bool) {
	l, ok := mw.(*localMW)
	if !ok || l == nil {
		return nil, false
	}
	return l.mw, true
}

// stackBind converts a binding; false for a region of another
// implementation.
func stackBind(b *MWBind) (stack.MWBind, bool) {
	s := stack.MWBind{Addr: b.Addr, Length: b.Length, Access: b.Access}
	if b.MR == nil {
		return s, true
	}
	mr, ok := b.MR.(*localMR)
	if !ok {
		return s, false
	}
	if mr != nil {
		s.MR = mr.mr
	}
	return s, true
}

type localCQ struct{ c *stack.CQ }

func (l *localCQ) Poll(wcs []WC) int              { return l.c.Poll(wcs) }
func (l *localCQ) Wait(ctx context.Context) error { return l.c.Wait(ctx) }
func (l *localCQ) Resize(n int) error             { return l.c.Resize(n) }
func (l *localCQ) Destroy() error                 { return l.c.Destroy() }

type localSRQ struct{ s *stack.SRQ }

func (l *localSRQ) PostRecv(wr *RecvWR) error { return l.s.PostRecv(wr) }
func (l *localSRQ) Resize(n int) error        { return l.s.Resize(n) }
func (l *localSRQ) Destroy() error            { return l.s.Destroy() }

type localAH struct{ ah *stack.AH }

func (l *localAH) Attr() AHAttr   { return l.ah.Attr() }
func (l *localAH) Destroy() error { return l.ah.Destroy() }

type localQP struct {
	q *stack.QP

	// batchMu guards batch, PostSendBatch's conversions: it grows to
	// the largest batch posted and is reused, cleared after each post
	// so that it keeps no caller memory alive.
	batchMu sync.Mutex
	batch   []stack.SendWR
}

func (l *localQP) QPN() uint32                              { return l.q.QPN() }
func (l *localQP) Type() QPType                             { return l.q.Type() }
func (l *localQP) State() QPState                           { return l.q.State() }
func (l *localQP) Modify(attr *QPAttr, mask AttrMask) error { return l.q.Modify(attr, mask) }
func (l *localQP) ToInit(a InitAttr) error                  { return l.q.ToInit(a) }
func (l *localQP) ToRTR(a RTRAttr) error                    { return l.q.ToRTR(a) }
func (l *localQP) ToRTS(a RTSAttr) error                    { return l.q.ToRTS(a) }
func (l *localQP) ToErr() error                             { return l.q.ToErr() }
func (l *localQP) ToReset() error                           { return l.q.ToReset() }
func (l *localQP) Destroy() error                           { return l.q.Destroy() }
func (l *localQP) PostRecv(wr *RecvWR) error                { return l.q.PostRecv(wr) }
func (l *localQP) PostRecvBatch(wrs []RecvWR) (int, error)  { return l.q.PostRecvBatch(wrs) }

func (l *localQP) AttachMcast(gid netip.Addr) error { return l.q.AttachMcast(gid) }
func (l *localQP) DetachMcast(gid netip.Addr) error { return l.q.DetachMcast(gid) }

// BindMW binds the stack window under mw.
func (l *localQP) BindMW(mw MW, id uint64, flags SendFlags, b MWBind) error {
	w, ok := StackMW(mw)
	if !ok {
		return fmt.Errorf("bind mw: qp %#x: window %T is not a local one: %w", l.q.QPN(), mw, stack.ErrInvalidArg)
	}
	sb, ok := stackBind(&b)
	if !ok {
		return fmt.Errorf("bind mw: qp %#x: region %T is not a local one: %w", l.q.QPN(), b.MR, stack.ErrInvalidArg)
	}
	return l.q.BindMW(w, id, flags, sb)
}

// PostSend converts wr on the stack (the stack copies what it keeps) and
// posts it.
func (l *localQP) PostSend(wr *SendWR) error {
	var s stack.SendWR
	if !toStackWR(&s, wr) {
		return fmt.Errorf("post send: qp %#x: %w", l.q.QPN(), foreign(wr))
	}
	return l.q.PostSend(&s)
}

// PostSendBatch converts wrs into the QP's batch buffer and posts them
// under one lock of the stack QP. A request with a foreign address
// handle fails after those before it were posted.
func (l *localQP) PostSendBatch(wrs []SendWR) (int, error) {
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	if cap(l.batch) < len(wrs) {
		l.batch = make([]stack.SendWR, len(wrs))
	}
	b := l.batch[:len(wrs)]
	k := 0
	for k < len(wrs) && toStackWR(&b[k], &wrs[k]) {
		k++
	}
	n, err := l.q.PostSendBatch(b[:k])
	clear(b[:k])
	if err != nil || k == len(wrs) {
		return n, err
	}
	return n, fmt.Errorf("post send: qp %#x: wr %d: %w", l.q.QPN(), k, foreign(&wrs[k]))
}

// toStackWR fills s from wr, or reports false when wr's address handle,
// window or region is not a local one.
func toStackWR(s *stack.SendWR, wr *SendWR) bool {
	*s = stack.SendWR{
		ID: wr.ID, Op: wr.Op, Flags: wr.Flags, SG: wr.SG, Imm: wr.Imm, InvRKey: wr.InvRKey,
		Remote: wr.Remote, CompareAdd: wr.CompareAdd, Swap: wr.Swap, Inline: wr.Inline,
		FlushType: wr.FlushType, FlushLevel: wr.FlushLevel, FlushLen: wr.FlushLen,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey,
	}
	if wr.Op == stack.OpBindMW {
		b, ok := stackBind(&wr.BindMW.MWBind)
		if !ok {
			return false
		}
		s.BindMW = stack.MWBindWR{RKey: wr.BindMW.RKey, MWBind: b}
		if wr.BindMW.MW != nil {
			if s.BindMW.MW, ok = StackMW(wr.BindMW.MW); !ok {
				return false
			}
		}
	}
	if wr.AH == nil {
		return true
	}
	ah, ok := wr.AH.(*localAH)
	if !ok {
		return false
	}
	if ah != nil {
		s.AH = ah.ah
	}
	return true
}

// foreign says which object of wr is not a local one.
func foreign(wr *SendWR) error {
	if wr.Op == stack.OpBindMW {
		if _, ok := wr.BindMW.MW.(*localMW); !ok && wr.BindMW.MW != nil {
			return fmt.Errorf("window %T is not a local one: %w", wr.BindMW.MW, stack.ErrInvalidArg)
		}
		if _, ok := stackBind(&wr.BindMW.MWBind); !ok {
			return fmt.Errorf("region %T is not a local one: %w", wr.BindMW.MR, stack.ErrInvalidArg)
		}
	}
	return fmt.Errorf("address handle %T is not a local one: %w", wr.AH, stack.ErrInvalidArg)
}
