package client

import (
	"fmt"
	"sync/atomic"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

var (
	_ verbs.PD = (*PD)(nil)
	_ verbs.MW = (*MW)(nil)
	_ verbs.QP = (*QP)(nil)
)

// MW is a memory window (verbs.MW) of the daemon's device.
type MW struct {
	d    *Device
	pd   *PD
	h    uint32
	typ  stack.MWType
	rkey atomic.Uint32 // as of the last bind posted
}

// AllocMW implements verbs.PD.
func (pd *PD) AllocMW(t stack.MWType) (verbs.MW, error) {
	var r proto.AllocMWResp
	if _, err := pd.d.call(proto.OpAllocMW, &proto.AllocMW{PD: pd.h, Type: uint32(t)}, -1, &r); err != nil {
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	mw := &MW{d: pd.d, pd: pd, h: r.MW, typ: t}
	mw.rkey.Store(r.RKey)
	return mw, nil
}

// RKey implements verbs.MW: the daemon's R_Key after a type 1 bind, the
// one a type 2 bind posted from here gave.
func (mw *MW) RKey() uint32 { return mw.rkey.Load() }

// Type implements verbs.MW.
func (mw *MW) Type() stack.MWType { return mw.typ }

// Dealloc implements verbs.MW.
func (mw *MW) Dealloc() error {
	if err := mw.d.destroy(proto.OpDeallocMW, mw.h); err != nil {
		return fmt.Errorf("dealloc mw: %w", err)
	}
	return nil
}

// BindMW implements verbs.QP: the daemon binds the window at once. A
// binding the stack refuses (the region's rights or bounds) completes
// with WCMWBindErr and moves the QP to ERR, as on rdma_rxe.
func (q *QP) BindMW(mw verbs.MW, id uint64, flags stack.SendFlags, b verbs.MWBind) error {
	w, ok := mw.(*MW)
	if !ok || w == nil || w.d != q.d {
		return fmt.Errorf("bind mw: qp %#x: a window of another device: %w", q.qpn, stack.ErrInvalidArg)
	}
	mrh, err := q.mrHandle(b.MR)
	if err != nil {
		return fmt.Errorf("bind mw: qp %#x: %w", q.qpn, err)
	}
	req := proto.BindMW{QP: q.h, MW: w.h, MR: mrh, Flags: uint32(flags), ID: id, Addr: b.Addr, Length: b.Length,
		Access: uint32(b.Access)}
	var r proto.BindMWResp
	if _, err := q.d.call(proto.OpBindMW, &req, -1, &r); err != nil {
		return fmt.Errorf("bind mw: qp %#x: %w", q.qpn, err)
	}
	w.rkey.Store(r.RKey)
	return nil
}

// mrHandle returns the handle of a region of the QP's device (0 for
// none).
func (q *QP) mrHandle(m verbs.MR) (uint32, error) {
	if m == nil {
		return 0, nil
	}
	mr, ok := m.(*MR)
	if !ok || mr == nil || mr.d != q.d {
		return 0, fmt.Errorf("a region of another device: %w", stack.ErrInvalidArg)
	}
	return mr.h, nil
}

// putBindMW fills the slot of an OpBindMW request (proto.SendSlot).
func (q *QP) putBindMW(s *proto.SendSlot, wr *verbs.SendWR) error {
	w, ok := wr.BindMW.MW.(*MW)
	if !ok || w == nil || w.d != q.d {
		return fmt.Errorf("bind mw: a window of another device: %w", stack.ErrInvalidWR)
	}
	mrh, err := q.mrHandle(wr.BindMW.MR)
	if err != nil {
		return fmt.Errorf("bind mw: %w", err)
	}
	s.RemoteAddr, s.RKey, s.AH, s.CompareAdd = wr.BindMW.Addr, wr.BindMW.RKey, w.h, wr.BindMW.Length
	s.RemoteQPN, s.RemoteQKey, s.NumSGE, s.Imm, s.Swap = mrh, uint32(wr.BindMW.Access), 0, 0, 0
	w.rkey.Store(wr.BindMW.RKey)
	return nil
}
