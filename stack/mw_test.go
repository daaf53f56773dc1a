package stack

import (
	"bytes"
	"errors"
	"testing"
)

// mwEnv is a pair of devices whose B side has a region that windows
// may be bound to; each access runs on a fresh connection, since a
// refused one moves both QPs to ERR.
type mwEnv struct {
	s    *simPair
	A, B *side
	mr   *MR // B.buf, with AccessMWBind
}

func newMWEnv(t *testing.T) *mwEnv {
	t.Helper()
	s := newSimPair(t, 4096, nil)
	e := &mwEnv{s: s, A: newSide(t, s.a, 1<<16, 64), B: newSide(t, s.b, 1<<16, 64)}
	mr, err := e.B.pd.RegisterMR(e.B.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	e.mr = mr
	return e
}

// pair returns a fresh connected pair of RC QPs, a on A and b on B.
func (e *mwEnv) pair(t *testing.T) (a, b *QP) {
	t.Helper()
	a, b = e.A.qp(t, RC), e.B.qp(t, RC)
	connect(t, a, b, 1, 0, 0, AccessRemoteWrite|AccessRemoteRead)
	return a, b
}

// access runs one WRITE or READ of n bytes from A at addr with rkey, on
// a fresh connection, and returns its completion status.
func (e *mwEnv) access(t *testing.T, op Opcode, rkey uint32, addr uint64, n uint32) WCStatus {
	t.Helper()
	qa, _ := e.pair(t)
	return e.accessOn(t, qa, op, rkey, addr, n)
}

// accessOn is access on qa's connection.
func (e *mwEnv) accessOn(t *testing.T, qa *QP, op Opcode, rkey uint32, addr uint64, n uint32) WCStatus {
	t.Helper()
	if err := qa.PostSend(&SendWR{ID: 77, Op: op, Flags: SendSignaled, SG: []SGE{e.A.mr.SGE(0, n)},
		Remote: RemoteAddr{addr, rkey}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, e.s, e.A.cq, 1)[0]
	if wc.ID != 77 {
		t.Fatalf("access completion %+v", wc)
	}
	return wc.Status
}

// local posts an OpBindMW or OpLocalInv on a fresh QP of B and returns
// its completion, which comes when the engine reaches it in the send
// queue.
func (e *mwEnv) local(t *testing.T, wr SendWR) WC {
	t.Helper()
	_, qb := e.pair(t)
	return e.localOn(t, qb, wr)
}

// localOn is local on qb.
func (e *mwEnv) localOn(t *testing.T, qb *QP, wr SendWR) WC {
	t.Helper()
	wr.ID, wr.Flags = 5, SendSignaled
	if err := qb.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	wcs := pollN(t, e.s, e.B.cq, 1)
	if n := len(wcs); n != 1 || wcs[0].ID != 5 || wcs[0].QPN != qb.QPN() {
		t.Fatalf("%d completions of %s: %+v", n, wr.Op, wcs[:n])
	}
	return wcs[0]
}

func (e *mwEnv) bind2(t *testing.T, qb *QP, mw *MW, rkey uint32, off, n uint64, access Access) WC {
	t.Helper()
	return e.localOn(t, qb, SendWR{Op: OpBindMW, BindMW: MWBindWR{MW: mw, RKey: rkey,
		MWBind: MWBind{MR: e.mr, Addr: e.mr.Addr() + off, Length: n, Access: access}}})
}

// fresh2 binds the type 2 window mw, invalidating it first if bound,
// on a fresh connection, with the next key; the window is reached
// through qa's requests.
func (e *mwEnv) fresh2(t *testing.T, mw *MW, off, n uint64, access Access) (qa, qb *QP, key uint32) {
	t.Helper()
	qa, qb = e.pair(t)
	key = mw.RKey()
	if mw.Bound() {
		if wc := e.localOn(t, qb, SendWR{Op: OpLocalInv, InvRKey: key}); wc.Status != WCSuccess {
			t.Fatalf("local invalidate: %+v", wc)
		}
	}
	key = IncRKey(key)
	if wc := e.bind2(t, qb, mw, key, off, n, access); wc.Status != WCSuccess || wc.Opcode != WCBindMW {
		t.Fatalf("bind: %+v", wc)
	}
	if mw.RKey() != key || !mw.Bound() {
		t.Fatalf("bound window: key %#x, want %#x", mw.RKey(), key)
	}
	return qa, qb, key
}

// sendInv sends a SEND_WITH_INV naming inv from A to a receive posted
// on B, on a fresh connection, and returns both completions.
func (e *mwEnv) sendInv(t *testing.T, inv uint32) (snd, rcv WC) {
	t.Helper()
	qa, qb := e.pair(t)
	return e.sendInvOn(t, qa, qb, inv)
}

// sendInvOn is sendInv on the connection of qa and qb.
func (e *mwEnv) sendInvOn(t *testing.T, qa, qb *QP, inv uint32) (snd, rcv WC) {
	t.Helper()
	if err := qb.PostRecv(&RecvWR{ID: 60, SG: []SGE{e.B.mr.SGE(60000, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&SendWR{ID: 61, Op: OpSendWithInv, Flags: SendSignaled, InvRKey: inv,
		SG: []SGE{e.A.mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	return pollN(t, e.s, e.A.cq, 1)[0], pollN(t, e.s, e.B.cq, 1)[0]
}

func TestMWType2(t *testing.T) {
	e := newMWEnv(t)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key0 := mw.RKey()
	if key0>>8 == 0 || key0>>8 == e.mr.RKey()>>8 || mw.Bound() || mw.Type() != MWType2 {
		t.Fatalf("new window: key %#x (region %#x), bound %v", key0, e.mr.RKey(), mw.Bound())
	}
	if st := e.access(t, OpWrite, key0, e.mr.Addr(), 8); st != WCRemAccessErr {
		t.Fatalf("write through an unbound window: %s", st)
	}
	if key1 := IncRKey(key0); key1>>8 != key0>>8 || key1 == key0 || IncRKey(0x123ff) != 0x12300 {
		t.Fatalf("IncRKey(%#x) = %#x", key0, key1)
	}
	const off, n = 4096, 8192
	rw := AccessRemoteWrite | AccessRemoteRead
	qa, _, key := e.fresh2(t, mw, off, n, rw)

	// Within the window, through the QP that bound it.
	fill(e.A.buf[:1000], 3)
	if st := e.accessOn(t, qa, OpWrite, key, e.mr.Addr()+off+100, 1000); st != WCSuccess {
		t.Fatalf("write in the window: %s", st)
	}
	if !bytes.Equal(e.B.buf[off+100:off+1100], e.A.buf[:1000]) {
		t.Fatal("written data differs")
	}
	if st := e.accessOn(t, qa, OpRead, key, e.mr.Addr()+off+n-64, 64); st != WCSuccess {
		t.Fatalf("read at the window's end: %s", st)
	}
	// Another QP of the PD does not reach a type 2 window.
	if st := e.access(t, OpRead, key, e.mr.Addr()+off, 8); st != WCRemAccessErr {
		t.Fatalf("read through another qp: %s", st)
	}
	// Outside the window, though inside the region.
	for _, c := range []struct {
		op   Opcode
		addr uint64
		n    uint32
	}{
		{OpWrite, off + n - 50, 100},
		{OpWrite, off - 1, 2},
		{OpRead, off + n, 1},
		{OpRead, 0, 8},
	} {
		qa, _, key := e.fresh2(t, mw, off, n, rw)
		if st := e.accessOn(t, qa, c.op, key, e.mr.Addr()+c.addr, c.n); st != WCRemAccessErr {
			t.Fatalf("%s of %d bytes at %d, outside the window: %s", c.op, c.n, c.addr, st)
		}
	}
	// Rebound with a new key: the old key is refused.
	old := mw.RKey()
	qa, _, key = e.fresh2(t, mw, off, n, rw)
	if key == old {
		t.Fatal("rebind kept the key")
	}
	if st := e.accessOn(t, qa, OpWrite, old, e.mr.Addr()+off, 8); st != WCRemAccessErr {
		t.Fatalf("write with the window's old key: %s", st)
	}

	// A bound type 2 window is not bound again; the region stays.
	_, qb := e.pair(t)
	if wc := e.bind2(t, qb, mw, IncRKey(key), off, n, AccessRemoteRead); wc.Status != WCMWBindErr || wc.Opcode != WCBindMW {
		t.Fatalf("second bind: %+v", wc)
	}
	if mw.RKey() != key || !mw.Bound() {
		t.Fatal("refused bind changed the window")
	}
	if err := e.mr.Deregister(); !errors.Is(err, ErrBusy) {
		t.Fatalf("deregister with a window bound: %v", err)
	}

	// LOCAL_INV, then the key is refused on the QP that bound it.
	qa, qb, key = e.fresh2(t, mw, off, n, rw)
	if wc := e.localOn(t, qb, SendWR{Op: OpLocalInv, InvRKey: key}); wc.Status != WCSuccess || wc.Opcode != WCLocalInv {
		t.Fatalf("local invalidate: %+v", wc)
	}
	if mw.Bound() {
		t.Fatal("invalidated window still bound")
	}
	if st := e.accessOn(t, qa, OpRead, key, e.mr.Addr()+off, 8); st != WCRemAccessErr {
		t.Fatalf("read through an invalidated key: %s", st)
	}
	if wc := e.local(t, SendWR{Op: OpLocalInv, InvRKey: key}); wc.Status != WCLocQPOpErr || wc.Opcode != WCLocalInv {
		t.Fatalf("second local invalidate: %+v", wc)
	}

	// A read-only window.
	qa, _, key = e.fresh2(t, mw, 0, 4096, AccessRemoteRead)
	if st := e.accessOn(t, qa, OpRead, key, e.mr.Addr(), 8); st != WCSuccess {
		t.Fatalf("read through a read-only window: %s", st)
	}
	if st := e.accessOn(t, qa, OpWrite, key, e.mr.Addr(), 8); st != WCRemAccessErr {
		t.Fatalf("write through a read-only window: %s", st)
	}

	// Dealloc of a bound window: the key reaches nothing, the region
	// may go.
	qa, _, key = e.fresh2(t, mw, 0, 4096, AccessRemoteRead)
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mw.Dealloc(); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("second dealloc: %v", err)
	}
	if st := e.accessOn(t, qa, OpRead, key, e.mr.Addr(), 8); st != WCRemAccessErr {
		t.Fatalf("read through a deallocated window: %s", st)
	}
	if err := e.mr.Deregister(); err != nil {
		t.Fatalf("deregister after dealloc: %v", err)
	}
}

func TestMWBindChecks(t *testing.T) {
	e := newMWEnv(t)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key := IncRKey(mw.RKey())
	noBind := e.B.mr // registered without AccessMWBind
	roMR, err := e.B.pd.RegisterMR(e.B.buf, AccessRemoteRead|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		rkey uint32
		b    MWBind
	}{
		{"another index", key ^ 0x100, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8, Access: AccessRemoteRead}},
		{"no mw bind access", key, MWBind{MR: noBind, Addr: noBind.Addr(), Length: 8, Access: AccessRemoteRead}},
		{"past the region", key, MWBind{MR: e.mr, Addr: e.mr.Addr() + 1<<16 - 4, Length: 8, Access: AccessRemoteRead}},
		{"before the region", key, MWBind{MR: e.mr, Addr: e.mr.Addr() - 1, Length: 8, Access: AccessRemoteRead}},
		{"local write right", key, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8, Access: AccessLocalWrite}},
		{"remote write without local write", key, MWBind{MR: roMR, Addr: roMR.Addr(), Length: 8, Access: AccessRemoteWrite}},
		{"no region", key, MWBind{Length: 8, Access: AccessRemoteRead}},
	} {
		wc := e.local(t, SendWR{Op: OpBindMW, BindMW: MWBindWR{MW: mw, RKey: c.rkey, MWBind: c.b}})
		if wc.Status != WCMWBindErr {
			t.Errorf("%s: %+v", c.name, wc)
		}
	}
	if mw.Bound() || mw.RKey() == key {
		t.Fatal("a refused bind changed the window")
	}
	// A type 1 window is bound by QP.BindMW only, and a type 2 window
	// not by it.
	mw1, err := e.B.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if wc := e.local(t, SendWR{Op: OpBindMW, BindMW: MWBindWR{MW: mw1, RKey: IncRKey(mw1.RKey()),
		MWBind: MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8, Access: AccessRemoteRead}}}); wc.Status != WCMWBindErr {
		t.Fatalf("type 1 window bound by a work request: %+v", wc)
	}
	_, qb := e.pair(t)
	if err := qb.BindMW(mw, 1, 0, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8}); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("BindMW of a type 2 window: %v", err)
	}
	// A window of another PD.
	pd2, err := e.s.b.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mw2, err := pd2.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.BindMW(mw2, 1, 0, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8}); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("BindMW of another pd's window: %v", err)
	}
	if _, err := e.B.pd.AllocMW(3); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("AllocMW(3): %v", err)
	}
	if err := e.B.pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Fatalf("dealloc pd with windows: %v", err)
	}
	for _, w := range []*MW{mw, mw1, mw2} {
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMWType1(t *testing.T) {
	e := newMWEnv(t)
	mw, err := e.B.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	key0 := mw.RKey()
	_, qb := e.pair(t)
	bind := func(id uint64, off, n uint64, access Access) {
		t.Helper()
		if err := qb.BindMW(mw, id, SendSignaled, MWBind{MR: e.mr, Addr: e.mr.Addr() + off, Length: n, Access: access}); err != nil {
			t.Fatal(err)
		}
		wcs := pollN(t, e.s, e.B.cq, 1)
		if k := len(wcs); k != 1 || wcs[0] != (WC{ID: id, Status: WCSuccess, Opcode: WCBindMW, QPN: qb.QPN()}) {
			t.Fatalf("bind completion: %+v", wcs[:k])
		}
	}
	bind(1, 0, 4096, AccessRemoteWrite)
	key1 := mw.RKey()
	if key1 != IncRKey(key0) {
		t.Fatalf("key after a type 1 bind %#x, want %#x", key1, IncRKey(key0))
	}
	if st := e.access(t, OpWrite, key1, e.mr.Addr()+4000, 96); st != WCSuccess {
		t.Fatalf("write in the window: %s", st)
	}
	if st := e.access(t, OpWrite, key1, e.mr.Addr()+4000, 97); st != WCRemAccessErr {
		t.Fatalf("write past the window: %s", st)
	}
	// A type 1 window is bound again while bound; the old key goes.
	bind(2, 8192, 4096, AccessRemoteWrite|AccessRemoteRead)
	key2 := mw.RKey()
	if key2 != IncRKey(key1) {
		t.Fatalf("key after the second bind %#x", key2)
	}
	if st := e.access(t, OpRead, key1, e.mr.Addr()+8192, 8); st != WCRemAccessErr {
		t.Fatalf("read with the old key: %s", st)
	}
	if st := e.access(t, OpRead, key2, e.mr.Addr()+8192, 8); st != WCSuccess {
		t.Fatalf("read with the new key: %s", st)
	}
	// Neither LOCAL_INV nor SEND_WITH_INV invalidates a type 1 window.
	if wc := e.local(t, SendWR{Op: OpLocalInv, InvRKey: key2}); wc.Status != WCLocQPOpErr {
		t.Fatalf("local invalidate of a type 1 window: %+v", wc)
	}
	snd, rcv := e.sendInv(t, key2)
	if snd.Status != WCRemInvReqErr || rcv.Status != WCRemInvReqErr {
		t.Fatalf("send with invalidate of a type 1 window: %+v / %+v", snd, rcv)
	}
	if !mw.Bound() || e.access(t, OpRead, key2, e.mr.Addr()+8192, 8) != WCSuccess {
		t.Fatal("the type 1 window was invalidated")
	}
	if err := e.mr.Deregister(); !errors.Is(err, ErrBusy) {
		t.Fatalf("deregister with a window bound: %v", err)
	}
	// A bind of zero length unbinds.
	bind(3, 0, 0, 0)
	if mw.Bound() || e.access(t, OpRead, mw.RKey(), e.mr.Addr(), 8) != WCRemAccessErr {
		t.Fatal("window still reachable after a zero-length bind")
	}
	if err := e.mr.Deregister(); err != nil {
		t.Fatalf("deregister after unbinding: %v", err)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

func TestSendWithInvalidate(t *testing.T) {
	e := newMWEnv(t)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	qa, qb, key := e.fresh2(t, mw, 0, 4096, AccessRemoteWrite)
	// A region with a window bound is not invalidated.
	if snd, rcv := e.sendInv(t, e.mr.RKey()); snd.Status != WCRemInvReqErr || rcv.Status != WCRemInvReqErr || !e.mr.Valid() {
		t.Fatalf("invalidate of a region with a window: %+v / %+v", snd, rcv)
	}
	// The window, on the QP that bound it.
	qa, qb, key = e.fresh2(t, mw, 0, 4096, AccessRemoteWrite)
	snd, rcv := e.sendInvOn(t, qa, qb, key)
	if snd.Status != WCSuccess || snd.Opcode != WCSend {
		t.Fatalf("send with invalidate: %+v", snd)
	}
	if rcv.Status != WCSuccess || rcv.Opcode != WCRecv || rcv.Flags&WCWithInv == 0 || rcv.InvRKey != key || rcv.ByteLen != 16 {
		t.Fatalf("receive of send with invalidate: %+v", rcv)
	}
	if mw.Bound() || e.accessOn(t, qa, OpWrite, key, e.mr.Addr(), 8) != WCRemAccessErr {
		t.Fatal("window reachable after send with invalidate")
	}
	// Twice: the key is no longer valid.
	if snd, rcv := e.sendInv(t, key); snd.Status != WCRemInvReqErr || rcv.Status != WCRemInvReqErr {
		t.Fatalf("second invalidate: %+v / %+v", snd, rcv)
	}
	// The region, now without windows.
	snd, rcv = e.sendInv(t, e.mr.RKey())
	if snd.Status != WCSuccess || rcv.Flags&WCWithInv == 0 || rcv.InvRKey != e.mr.RKey() || e.mr.Valid() {
		t.Fatalf("invalidate of a region: %+v / %+v", snd, rcv)
	}
	if st := e.access(t, OpRead, e.mr.RKey(), e.mr.Addr(), 8); st != WCRemAccessErr {
		t.Fatalf("read through an invalidated region: %s", st)
	}
	// A window of another PD of the responder.
	pd2, err := e.s.b.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr2, err := pd2.RegisterMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	if snd, rcv := e.sendInv(t, mr2.RKey()); snd.Status != WCRemInvReqErr || rcv.Status != WCRemInvReqErr || !mr2.Valid() {
		t.Fatalf("invalidate of another pd's region: %+v / %+v", snd, rcv)
	}
	// LOCAL_INV of a region, by its L_Key.
	mr3, err := e.B.pd.RegisterMR(make([]byte, 4096), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if wc := e.local(t, SendWR{Op: OpLocalInv, InvRKey: mr3.LKey()}); wc.Status != WCSuccess || mr3.Valid() {
		t.Fatalf("local invalidate of a region: %+v", wc)
	}
}

// TestMWNoAllocs checks that WRITE and READ through a window's R_Key,
// and the lookups behind them, allocate nothing.
func TestMWNoAllocs(t *testing.T) {
	e := newMWEnv(t)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	qa, qb, key := e.fresh2(t, mw, 0, 1<<15, AccessRemoteWrite|AccessRemoteRead)
	mem := &qb.mem
	if n := testing.AllocsPerRun(1000, func() {
		mem.Remote(key, e.mr.Addr()+100, 4096, AccessRemoteWrite)
		mem.Check(key, e.mr.Addr(), 1<<15, AccessRemoteRead, true)
		mem.Remote(key, e.mr.Addr()+1<<15, 1, AccessRemoteRead) // refused
	}); n != 0 {
		t.Fatalf("%v allocations per window lookup", n)
	}
	wrs := []SendWR{
		{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{e.A.mr.SGE(0, 16384)}, Remote: RemoteAddr{e.mr.Addr(), key}},
		{ID: 2, Op: OpRead, Flags: SendSignaled, SG: []SGE{e.A.mr.SGE(16384, 16384)}, Remote: RemoteAddr{e.mr.Addr() + 16384, key}},
	}
	wcs := make([]WC, 16)
	round := func() {
		qa.PostSendBatch(wrs)
		got := 0
		for got < len(wrs) {
			e.s.a.Step()
			e.s.b.Step()
			e.s.clock.Advance(1000)
			for k := e.A.cq.Poll(wcs); k > 0; k = e.A.cq.Poll(wcs) {
				for _, wc := range wcs[:k] {
					if wc.Status != WCSuccess {
						t.Fatalf("completion %+v", wc)
					}
				}
				got += k
			}
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per round through a window", n)
	}
}

// TestMWLocalRetired: OpBindMW and OpLocalInv retire when carried out
// (QPInit.SendRetired counts them), and a QP that signals all
// completes them unsignaled; QP.BindMW too.
func TestMWLocalRetired(t *testing.T) {
	e := newMWEnv(t)
	var retired uint64
	qb, err := e.B.pd.CreateQP(QPInit{Type: RC, SendCQ: e.B.cq, RecvCQ: e.B.cq, MaxSendWR: 4, MaxRecvWR: 4,
		SignalAll: true, SendRetired: func(n uint64) { retired = n }})
	if err != nil {
		t.Fatal(err)
	}
	qa := e.A.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteRead)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key := IncRKey(mw.RKey())
	for i, wr := range []SendWR{
		{ID: 1, Op: OpBindMW, BindMW: MWBindWR{MW: mw, RKey: key, MWBind: MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8,
			Access: AccessRemoteRead}}},
		{ID: 2, Op: OpLocalInv, InvRKey: key},
	} {
		if err := qb.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		wcs := pollN(t, e.s, e.B.cq, 1)
		if n := len(wcs); n != 1 || wcs[0].ID != wr.ID || wcs[0].Status != WCSuccess {
			t.Fatalf("unsignaled %s on a qp that signals all: %+v", wr.Op, wcs[:n])
		}
		if retired != uint64(i+1) {
			t.Fatalf("%s: %d retired, want %d", wr.Op, retired, i+1)
		}
	}
	mw1, err := e.B.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.BindMW(mw1, 3, 0, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 8, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	// A type 1 bind is no request of the send ring's: not counted.
	wcs := pollN(t, e.s, e.B.cq, 1)
	if n := len(wcs); n != 1 || wcs[0].ID != 3 || wcs[0].Opcode != WCBindMW || retired != 2 {
		t.Fatalf("QP.BindMW on a qp that signals all: %+v, %d retired", wcs[:n], retired)
	}
}

// TestLocalOpsInSendQueueOrder: a LOCAL_INV of a region posted after a
// WRITE from it takes effect after the WRITE went out (the WRITE
// succeeds), and a type 2 bind posted after a SEND is carried out in its
// turn; completions come in the order posted.
func TestLocalOpsInSendQueueOrder(t *testing.T) {
	e := newMWEnv(t)
	_, qb := e.pair(t)
	src, err := e.B.pd.RegisterMR(make([]byte, 32768), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 9)
	mw, err := e.B.pd.AllocMW(MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key := IncRKey(mw.RKey())
	wrs := []SendWR{
		{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{src.SGE(0, 32768)}, Remote: RemoteAddr{e.A.mr.Addr(), e.A.mr.RKey()}},
		{ID: 2, Op: OpLocalInv, Flags: SendSignaled, InvRKey: src.LKey()},
		{ID: 3, Op: OpBindMW, Flags: SendSignaled, BindMW: MWBindWR{MW: mw, RKey: key,
			MWBind: MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 64, Access: AccessRemoteRead}}},
	}
	if n, err := qb.PostSendBatch(wrs); n != 3 || err != nil {
		t.Fatalf("post: %d, %v", n, err)
	}
	if !src.Valid() || mw.Bound() {
		// A Manual device has not stepped: nothing was carried out.
		t.Fatalf("carried out when posted: region valid %v, window bound %v", src.Valid(), mw.Bound())
	}
	wcs := pollN(t, e.s, e.B.cq, 3)
	for i, want := range []WC{{ID: 1, Opcode: WCRDMAWrite, ByteLen: 32768}, {ID: 2, Opcode: WCLocalInv}, {ID: 3, Opcode: WCBindMW}} {
		if wcs[i].ID != want.ID || wcs[i].Status != WCSuccess || wcs[i].Opcode != want.Opcode {
			t.Fatalf("completion %d: %+v, want %+v", i, wcs[i], want)
		}
	}
	if !bytes.Equal(e.A.buf[:32768], src.Bytes()) || src.Valid() || !mw.Bound() || mw.RKey() != key {
		t.Fatalf("after: data equal %v, region valid %v, window bound %v key %#x", bytes.Equal(e.A.buf[:32768], src.Bytes()),
			src.Valid(), mw.Bound(), mw.RKey())
	}
}

// TestType1BindInSendQueue: QP.BindMW, as ibv_bind_mw, gives the window
// its new R_Key at once (RKey) and is carried out in its turn on the
// send queue; a binding the region refuses completes with WCMWBindErr
// and moves the QP to ERR.
func TestType1BindInSendQueue(t *testing.T) {
	e := newMWEnv(t)
	_, qb := e.pair(t)
	mw, err := e.B.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	key0 := mw.RKey()
	if err := qb.BindMW(mw, 7, SendSignaled, MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 64, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if mw.RKey() != IncRKey(key0) || mw.Bound() {
		t.Fatalf("after posting: key %#x (want %#x), bound %v (want not yet)", mw.RKey(), IncRKey(key0), mw.Bound())
	}
	if wc := pollN(t, e.s, e.B.cq, 1)[0]; wc.ID != 7 || wc.Status != WCSuccess || wc.Opcode != WCBindMW || !mw.Bound() {
		t.Fatalf("bind: %+v, bound %v", wc, mw.Bound())
	}
	plain, err := e.B.pd.RegisterMR(make([]byte, 4096), AccessLocalWrite) // no MW bind access
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.BindMW(mw, 8, 0, MWBind{MR: plain, Addr: plain.Addr(), Length: 64, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, e.s, e.B.cq, 1)[0]; wc.ID != 8 || wc.Status != WCMWBindErr || qb.State() != StateErr {
		t.Fatalf("refused bind: %+v, qp %s", wc, qb.State())
	}
}

// TestType1BindsAtOnce: two binds of one type 1 window posted at the same
// time on two QPs take two keys (the second bind runs while the first is
// between taking its key and posting); the window ends with the later
// one, and both binds complete. Before, both took the same key.
func TestType1BindsAtOnce(t *testing.T) {
	e := newMWEnv(t)
	_, q1 := e.pair(t)
	_, q2 := e.pair(t)
	mw, err := e.B.pd.AllocMW(MWType1)
	if err != nil {
		t.Fatal(err)
	}
	key0 := mw.RKey()
	bind := MWBind{MR: e.mr, Addr: e.mr.Addr(), Length: 64, Access: AccessRemoteRead}
	var inner error
	bindPosting = func() {
		bindPosting = nil
		inner = q2.BindMW(mw, 2, SendSignaled, bind)
	}
	defer func() { bindPosting = nil }()
	if err := q1.BindMW(mw, 1, SendSignaled, bind); err != nil || inner != nil {
		t.Fatalf("binds: %v, %v", err, inner)
	}
	if want := IncRKey(IncRKey(key0)); mw.RKey() != want {
		t.Errorf("window key %#x after two binds, want %#x (two keys taken)", mw.RKey(), want)
	}
	ids := map[uint64]WCStatus{}
	for _, wc := range pollN(t, e.s, e.B.cq, 2) {
		ids[wc.ID] = wc.Status
	}
	if ids[1] != WCSuccess || ids[2] != WCSuccess {
		t.Errorf("bind completions %v", ids)
	}
	// A post that fails (the send queue full: the simulation runs only
	// when polled) gives its key back.
	want, posted := mw.RKey(), 0
	for ; posted < 1000; posted++ {
		if err := q1.BindMW(mw, 10, 0, bind); err != nil {
			break
		}
		want = IncRKey(want)
	}
	if posted == 1000 {
		t.Fatal("the send queue never filled")
	}
	if mw.RKey() != want {
		t.Errorf("after %d binds and a refused one the key is %#x, want %#x", posted, mw.RKey(), want)
	}
}
