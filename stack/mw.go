package stack

import (
	"fmt"
	"sync/atomic"

	"github.com/uroce/uroce/qp"
)

// MWType is a memory window's type (ibv_mw_type, IBTA 10.6.7.2).
type MWType uint8

// Memory window types. A type 1 window is bound with QP.BindMW, is
// reached through any QP of its PD, and cannot be invalidated; a type 2
// window is bound with an OpBindMW work request, only while unbound, is
// reached only through the QP that bound it, and is unbound by
// OpLocalInv or a peer's SEND_WITH_INV naming its R_Key.
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// MW is a memory window (ibv_mw): a range of a region, with remote
// rights of its own, that a peer reaches through the window's R_Key.
// Binding a window to a region keeps the region registered: it cannot
// be deregistered while windows are bound to it.
type MW struct {
	pd  *PD
	typ MWType
	// key is the window's R_Key (guarded by the device's mrTable lock):
	// its upper 24 bits are fixed at allocation, the low 8 bits are the
	// consumer key each bind may change.
	key uint32
	// next is the R_Key a type 1 window has once the binds posted so
	// far (QP.BindMW) are carried out: what RKey returns, as
	// ibv_bind_mw sets mw->rkey when it posts (guarded by the mrTable
	// lock).
	next uint32
	dead bool // deallocated (guarded by the mrTable lock)
	// bound is the window's binding, nil while unbound. Engines read
	// it per access; binds replace it under the mrTable lock.
	bound atomic.Pointer[mwBinding]
}

// mwBinding is what a bound window grants: the bytes [va, va+n) of mr
// with access, through rkey; for a type 2 window, only to requests that
// come on qp, the QP that bound it (IBTA 10.6.7.2: a type 2 window is
// associated with a QP, as rdma_rxe's type 2B windows are).
type mwBinding struct {
	mr     *MR
	va, n  uint64
	access Access
	rkey   uint32
	qp     *QP // type 2 only
}

// MWBind is a window's binding (ibv_mw_bind_info): Length bytes at
// virtual address Addr of MR, with Access (remote rights only). A type 1
// bind of zero length unbinds the window.
type MWBind struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

// MWBindWR is the part of an OpBindMW work request that names the
// window and its new R_Key (ibv_send_wr's bind_mw): RKey keeps the
// window's index and sets its consumer key, as IncRKey does.
type MWBindWR struct {
	MW   *MW
	RKey uint32
	MWBind
}

// IncRKey returns rkey with its consumer key (low 8 bits) incremented
// (ibv_inc_rkey).
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// AllocMW allocates an unbound memory window of type t (ibv_alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if t != MWType1 && t != MWType2 {
		return nil, fmt.Errorf("alloc mw: type %d: %w", t, ErrInvalidArg)
	}
	if err := pd.use("alloc mw"); err != nil {
		return nil, err
	}
	mw := &MW{pd: pd, typ: t}
	tb := &pd.dev.mrs
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.m)+len(tb.mw) >= tb.max {
		pd.uses.drop()
		return nil, fmt.Errorf("alloc mw: %d regions and windows: %w", tb.max, ErrNoResources)
	}
	key, err := tb.newKey()
	if err != nil {
		pd.uses.drop()
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	if tb.mw == nil {
		tb.mw = make(map[uint32]*MW)
	}
	tb.mw[key>>8] = mw
	mw.key, mw.next = key, key
	return mw, nil
}

// Dealloc frees the window (ibv_dealloc_mw), unbinding it first: its
// R_Key reaches nothing any more.
func (mw *MW) Dealloc() error {
	tb := &mw.pd.dev.mrs
	tb.mu.Lock()
	if mw.dead {
		tb.mu.Unlock()
		return fmt.Errorf("dealloc mw: %w", ErrDestroyed)
	}
	mw.dead = true
	delete(tb.mw, mw.key>>8)
	mw.unbindLocked()
	tb.mu.Unlock()
	mw.pd.uses.drop()
	return nil
}

// RKey returns the window's R_Key: for a type 1 window, the one its
// last posted bind gives it (QP.BindMW); for a type 2 window, the one
// of its binding.
func (mw *MW) RKey() uint32 {
	tb := &mw.pd.dev.mrs
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	if mw.typ == MWType1 {
		return mw.next
	}
	return mw.key
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Bound reports whether the window is bound to a region.
func (mw *MW) Bound() bool { return mw.bound.Load() != nil }

// unbindLocked drops the window's binding; the caller holds the
// mrTable lock.
func (mw *MW) unbindLocked() {
	if b := mw.bound.Swap(nil); b != nil {
		b.mr.windows--
	}
}

// bind binds the window for q with the R_Key rkey, with the checks of
// IBTA 10.6.7.1 (as rdma_rxe makes them): the window, the region and
// the QP in one PD, a window index kept, a type 2 window unbound, a
// region granting AccessMWBind that holds the window, remote write or
// atomic rights only over a region with local write.
func (mw *MW) bind(q *QP, rkey uint32, b MWBind) error {
	tb := &mw.pd.dev.mrs
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch {
	case mw.dead:
		return ErrDestroyed
	case mw.pd != q.pd:
		return fmt.Errorf("window of another pd: %w", ErrInvalidArg)
	case rkey>>8 != mw.key>>8:
		return fmt.Errorf("r_key %#x changes the window index of %#x: %w", rkey, mw.key, ErrInvalidArg)
	case mw.typ == MWType2 && mw.bound.Load() != nil:
		return fmt.Errorf("type 2 window already bound: %w", ErrInvalidArg)
	case b.Access&^accessRemote != 0:
		return fmt.Errorf("window access %#x: %w", uint32(b.Access), ErrInvalidArg)
	}
	if b.Length == 0 && mw.typ == MWType1 {
		mw.unbindLocked()
		mw.key = rkey
		return nil
	}
	mr := b.MR
	switch {
	case mr == nil || tb.m[mr.lkey>>8] != mr || !mr.valid.Load():
		return fmt.Errorf("no valid region: %w", ErrInvalidArg)
	case mr.pd != mw.pd:
		return fmt.Errorf("region of another pd: %w", ErrInvalidArg)
	case mr.access&AccessMWBind == 0:
		return fmt.Errorf("region without mw bind access: %w", ErrInvalidArg)
	case b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.access&AccessLocalWrite == 0:
		return fmt.Errorf("remote write or atomic window over a region without local write: %w", ErrInvalidArg)
	case b.Length > uint64(mr.n) || !within(mr.va, uint64(mr.n), b.Addr, 0) || b.Addr-mr.va > uint64(mr.n)-b.Length:
		return fmt.Errorf("window %#x+%d outside the region: %w", b.Addr, b.Length, ErrInvalidArg)
	}
	nb := &mwBinding{mr: mr, va: b.Addr, n: b.Length, access: b.Access, rkey: rkey}
	if mw.typ == MWType2 {
		nb.qp = q
	}
	mw.unbindLocked()
	mr.windows++
	mw.bound.Store(nb)
	mw.key = rkey
	return nil
}

// BindMW binds the type 1 window mw (ibv_bind_mw) with a new consumer
// key: IncRKey of its R_Key, which RKey returns from now on. A bind of
// zero length unbinds it. As ibv_bind_mw, it is a request on the send
// queue: carried out when the requester reaches it, after the requests
// posted before it; with SendSignaled (or a QP that signals all) it
// completes on the send CQ with WCBindMW and id, and a binding the
// region refuses completes with WCMWBindErr and moves the QP to ERR.
func (q *QP) BindMW(mw *MW, id uint64, flags SendFlags, b MWBind) error {
	if mw.typ != MWType1 {
		return fmt.Errorf("bind mw: type %d window: %w", mw.typ, ErrInvalidArg)
	}
	q.lock()
	defer q.unlock()
	if err := q.check("bind mw"); err != nil {
		return err
	}
	if st := q.q.State(); st != StateRTS {
		return fmt.Errorf("bind mw: qp %#x in %s: %w", q.qpn, st, ErrInvalidState)
	}
	tb := &mw.pd.dev.mrs
	tb.mu.Lock()
	switch {
	case mw.dead:
		tb.mu.Unlock()
		return fmt.Errorf("bind mw: %w", ErrDestroyed)
	case mw.pd != q.pd:
		tb.mu.Unlock()
		return fmt.Errorf("bind mw: qp %#x: window of another pd: %w", q.qpn, ErrInvalidArg)
	}
	// The new key is taken under the table's lock, so that binds of
	// one window posted at once on two QPs get two keys; a post that
	// fails gives it back unless another bind took a later one.
	old := mw.next
	key := IncRKey(old)
	mw.next = key
	tb.mu.Unlock()
	if bindPosting != nil {
		bindPosting()
	}
	s := &qp.SendWR{ID: id, Opcode: OpBindMW, Flags: flags & SendSignaled, RKey: key,
		Bind: qp.LocalBind{Addr: b.Addr, Length: b.Length, Access: b.Access, Type1: true}}
	if b.MR != nil {
		s.Bind.MR = b.MR.lkey
	}
	if err := q.q.PostSend(q.dev.clock.Now(), s); err != nil {
		tb.mu.Lock()
		if mw.next == key {
			mw.next = old
		}
		tb.mu.Unlock()
		return fmt.Errorf("bind mw: %w", err)
	}
	q.kick()
	return nil
}

// bindPosting, when set (by tests), runs in BindMW between taking the
// window's new key and posting the bind.
var bindPosting func()

// qpLocal carries out a QP's OpBindMW and OpLocalInv work requests
// (qp.LocalOps) when the QP's requester reaches them in the send queue,
// in an engine with the QP's lock held. A failure completes with
// WCMWBindErr (bind) or WCLocQPOpErr (invalidation), as rdma_rxe's, and
// moves the QP to ERR.
type qpLocal QP

// Execute implements qp.LocalOps.
func (l *qpLocal) Execute(wr *qp.SendWR) WCStatus {
	q := (*QP)(l)
	switch wr.Opcode {
	case OpBindMW:
		tb := &q.pd.dev.mrs
		tb.mu.RLock()
		mw := tb.mw[wr.RKey>>8]
		var mr *MR
		if wr.Bind.MR != 0 {
			if mr = tb.m[wr.Bind.MR>>8]; mr != nil && mr.lkey != wr.Bind.MR {
				mr = nil
			}
		}
		tb.mu.RUnlock()
		want := MWType2
		if wr.Bind.Type1 {
			want = MWType1
		}
		if wr.RKey == 0 || mw == nil || mw.typ != want || (wr.Bind.MR != 0 && mr == nil) {
			return WCMWBindErr
		}
		b := MWBind{MR: mr, Addr: wr.Bind.Addr, Length: wr.Bind.Length, Access: wr.Bind.Access}
		if mw.bind(q, wr.RKey, b) != nil {
			return WCMWBindErr
		}
	case OpLocalInv:
		if !q.pd.invalidate(wr.InvRKey, true) {
			return WCLocQPOpErr
		}
	}
	return WCSuccess
}

// localBindKey returns the R_Key an OpBindMW gives its window: b's, or 0
// (which Execute refuses) when it names no window or changes the
// window's index.
func localBindKey(b MWBindWR) uint32 {
	if b.MW == nil || b.RKey>>8 != b.MW.RKey()>>8 {
		return 0
	}
	return b.RKey
}

// completeLocal puts a completion of a local operation on the send CQ;
// the caller, a verbs goroutine, holds the QP's lock.
func (q *QP) completeLocal(wc *WC) {
	c := q.sendCQ
	c.push(wc)
	if c.sink != nil {
		c.sink.Publish()
	}
}
