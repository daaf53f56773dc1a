package daemon_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// access posts one signaled READ or WRITE of n bytes at A's offset off
// to addr through rkey, and returns its completion.
func access(t *testing.T, A *end, q verbs.QP, op stack.Opcode, id uint64, off uint64, n uint32, addr uint64, rkey uint32) stack.WC {
	t.Helper()
	if err := q.PostSend(&verbs.SendWR{ID: id, Op: op, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(off, n)},
		Remote: stack.RemoteAddr{Addr: addr, RKey: rkey}}); err != nil {
		t.Fatal(err)
	}
	wc := waitN(t, A.cq, 1)[0]
	if wc.ID != id {
		t.Fatalf("completion %+v, want id %d", wc, id)
	}
	return wc
}

// TestDaemonMW: memory windows through the daemon. B binds windows over
// a region peers have no rights to; A reads and writes through their
// R_Keys: a type 1 window through any QP of B's PD, a type 2 window only
// through the QP that bound it, and not after LOCAL_INV. Bind errors
// are the verbs' (EINVAL, or a completion with WCMWBindErr); another
// session cannot name B's windows.
func TestDaemonMW(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<20), newEnd(t, open(t, p.sb), 1<<20)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	qa2, qb2 := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)
	connect(t, qa2, qb2, ga, gb)
	region, err := B.pd.RegisterMR(B.buf[1<<19:], stack.AccessLocalWrite|stack.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	base := region.Addr()
	if wc := access(t, A, qa2, stack.OpRead, 1, 0, 8, base, region.RKey()); wc.Status != stack.WCRemAccessErr {
		t.Fatalf("read of a region without remote rights: %+v", wc)
	}
	qa2.ToReset()
	qb2.ToReset()
	connect(t, qa2, qb2, ga, gb)

	// Type 1: bound with ibv_bind_mw, a new consumer key, reached
	// through both of B's QPs.
	mw1, err := B.pd.AllocMW(stack.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	key0 := mw1.RKey()
	if err := qb.BindMW(mw1, 10, stack.SendSignaled, verbs.MWBind{MR: region, Addr: base + 4096, Length: 4096,
		Access: stack.AccessRemoteRead | stack.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, B.cq, 1)[0]; wc.ID != 10 || wc.Status != stack.WCSuccess || wc.Opcode != stack.WCBindMW {
		t.Fatalf("bind completion %+v", wc)
	}
	key1 := mw1.RKey()
	if key1 != stack.IncRKey(key0) {
		t.Fatalf("r_key %#x after the bind, want %#x", key1, stack.IncRKey(key0))
	}
	fill(A.buf[:256], 3)
	if wc := access(t, A, qa, stack.OpWrite, 11, 0, 256, base+4096+100, key1); wc.Status != stack.WCSuccess {
		t.Fatalf("write through a type 1 window: %+v", wc)
	}
	if !bytes.Equal(B.buf[1<<19+4096+100:][:256], A.buf[:256]) {
		t.Fatal("data written through the window differs")
	}
	if wc := access(t, A, qa2, stack.OpRead, 12, 1000, 256, base+4096+100, key1); wc.Status != stack.WCSuccess {
		t.Fatalf("read through a type 1 window on another qp of its pd: %+v", wc)
	}
	if !bytes.Equal(A.buf[1000:1256], A.buf[:256]) {
		t.Fatal("data read through the window differs")
	}

	// Type 2: bound with a work request on qb, answers qb only.
	mw2, err := B.pd.AllocMW(stack.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	key2 := stack.IncRKey(mw2.RKey())
	if err := qb.PostSend(&verbs.SendWR{ID: 20, Op: stack.OpBindMW, Flags: stack.SendSignaled, BindMW: verbs.MWBindWR{MW: mw2,
		RKey: key2, MWBind: verbs.MWBind{MR: region, Addr: base + 65536, Length: 8192, Access: stack.AccessRemoteWrite | stack.AccessRemoteRead}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, B.cq, 1)[0]; wc.ID != 20 || wc.Status != stack.WCSuccess || wc.Opcode != stack.WCBindMW {
		t.Fatalf("type 2 bind completion %+v", wc)
	}
	if mw2.RKey() != key2 {
		t.Fatalf("type 2 window's r_key %#x, want %#x", mw2.RKey(), key2)
	}
	fill(A.buf[2000:2512], 5)
	if wc := access(t, A, qa, stack.OpWrite, 21, 2000, 512, base+65536+8192-512, key2); wc.Status != stack.WCSuccess {
		t.Fatalf("write through a type 2 window: %+v", wc)
	}
	if wc := access(t, A, qa, stack.OpRead, 22, 3000, 512, base+65536+8192-512, key2); wc.Status != stack.WCSuccess ||
		!bytes.Equal(A.buf[3000:3512], A.buf[2000:2512]) {
		t.Fatalf("read through a type 2 window: %+v", wc)
	}

	// Binds and invalidations retire in send-queue order, as other
	// requests do: many more than the send queue holds go through, every
	// 16th signaled (a completion shows the room the ones before it
	// left, as for any unsignaled request).
	mw4, err := B.pd.AllocMW(stack.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	k := mw4.RKey()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 200; i++ {
		wr := verbs.SendWR{ID: 40, Op: stack.OpLocalInv, InvRKey: k}
		if i%2 == 0 {
			k = stack.IncRKey(k)
			wr = verbs.SendWR{ID: 40, Op: stack.OpBindMW, BindMW: verbs.MWBindWR{MW: mw4, RKey: k,
				MWBind: verbs.MWBind{MR: region, Addr: base, Length: 64, Access: stack.AccessRemoteRead}}}
		}
		wr.InvRKey = k
		if i%16 == 15 {
			wr.Flags = stack.SendSignaled
		}
		for {
			err := qb.PostSend(&wr)
			if err == nil {
				break
			}
			if !errors.Is(err, stack.ErrQueueFull) || time.Now().After(deadline) {
				t.Fatalf("request %d of 200 binds and invalidations: %v", i, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := qb.PostSend(&verbs.SendWR{ID: 41, Op: stack.OpBindMW, Flags: stack.SendSignaled, BindMW: verbs.MWBindWR{MW: mw4,
		RKey: stack.IncRKey(k), MWBind: verbs.MWBind{MR: region, Addr: base, Length: 64, Access: stack.AccessRemoteRead}}}); err != nil {
		t.Fatal(err)
	}
	wcs := waitN(t, B.cq, 200/16+1)
	for i, wc := range wcs {
		if want := uint64(40); i == len(wcs)-1 {
			want = 41
			if wc.ID != want || wc.Status != stack.WCSuccess {
				t.Fatalf("bind after 200 others: %+v", wc)
			}
		} else if wc.ID != want || wc.Status != stack.WCSuccess {
			t.Fatalf("completion %d of the binds and invalidations: %+v", i, wc)
		}
	}
	if err := mw4.Dealloc(); err != nil {
		t.Fatal(err)
	}

	// What the daemon refuses: a type 2 window given to ibv_bind_mw, a
	// window of another PD, the region deregistered or the PD
	// deallocated while windows use them.
	if err := qb.BindMW(mw2, 30, 0, verbs.MWBind{MR: region, Addr: base, Length: 8}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ibv_bind_mw of a type 2 window: %v", err)
	}
	pd2, err := B.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pd2.AllocMW(stack.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.BindMW(other, 31, 0, verbs.MWBind{}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bind of a window of another pd: %v", err)
	}
	if err := pd2.Dealloc(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("dealloc of a pd with a window: %v", err)
	}
	if err := other.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := region.Deregister(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("deregister of a region with windows bound: %v", err)
	}

	// Another session names handles of its own only: none of its
	// requests reaches B's windows.
	r := dialRaw(t, p.sb)
	r.hello()
	for h := uint32(1); h < 32; h++ {
		if e, _, _ := r.call(proto.OpBindMW, &proto.BindMW{QP: h, MW: h, MR: h, Length: 8}); e != syscall.EINVAL {
			t.Errorf("bind mw of handle %d in another session: %v", h, e)
		}
		if e, _, _ := r.call(proto.OpDeallocMW, &proto.Handle{Handle: h}); e != syscall.EINVAL {
			t.Errorf("dealloc mw of handle %d in another session: %v", h, e)
		}
	}
	// In its send ring, a BIND_MW naming a handle that is not a window
	// of its own completes with an error.
	rq := newRawQP(t, r)
	rq.toRTS(t, 0x999, ga.As16())
	rq.post(proto.SendSlot{ID: 9, Opcode: proto.WRBindMW, Flags: proto.SendSignaled, AH: rq.qp, RKey: key2,
		CompareAdd: 8, RemoteQPN: rq.pd, RemoteQKey: uint32(stack.AccessRemoteRead)})
	if w := rq.wc(t); w.ID != 9 || w.Status != uint32(stack.WCMWBindErr) || w.Opcode != uint32(stack.WCBindMW) {
		t.Errorf("a BIND_MW slot naming no window of the session: %+v", w)
	}
	if wc := access(t, A, qa, stack.OpRead, 23, 3000, 8, base+65536, key2); wc.Status != stack.WCSuccess {
		t.Fatalf("the window after another session's requests: %+v", wc)
	}

	// A type 2 window answers the QP that bound it only: qa2 is
	// refused (and goes to ERR).
	if wc := access(t, A, qa2, stack.OpRead, 24, 3000, 8, base+65536, key2); wc.Status != stack.WCRemAccessErr {
		t.Fatalf("read through a type 2 window from another qp: %+v", wc)
	}

	// LOCAL_INV unbinds the type 2 window: a remote access error next.
	if err := qb.PostSend(&verbs.SendWR{ID: 25, Op: stack.OpLocalInv, Flags: stack.SendSignaled, InvRKey: key2}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, B.cq, 1)[0]; wc.ID != 25 || wc.Status != stack.WCSuccess || wc.Opcode != stack.WCLocalInv {
		t.Fatalf("local invalidate completion %+v", wc)
	}
	if wc := access(t, A, qa, stack.OpWrite, 26, 2000, 8, base+65536, key2); wc.Status != stack.WCRemAccessErr {
		t.Fatalf("write through an invalidated window: %+v", wc)
	}

	// A bind the region does not allow (no MW bind access) completes
	// with WCMWBindErr and moves the QP to ERR, as on rdma_rxe (the
	// remote access errors above left qb and qb2 in ERR: a QP of its
	// own).
	qa3, qb3 := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa3, qb3, ga, gb)
	if err := qb3.BindMW(mw1, 32, 0, verbs.MWBind{MR: B.mr, Addr: B.mr.Addr(), Length: 8, Access: stack.AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, B.cq, 1)[0]; wc.ID != 32 || wc.Status != stack.WCMWBindErr {
		t.Fatalf("bind to a region without mw bind access: %+v", wc)
	}
	if st := qb3.State(); st != stack.StateErr {
		t.Errorf("qp in %v after a failed bind", st)
	}
	for _, w := range []verbs.MW{mw1, mw2} {
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
	if err := region.Deregister(); err != nil {
		t.Fatalf("deregister once the windows are gone: %v", err)
	}
}

// TestMWLimitsAndCleanup: windows count against a client's limit of
// regions, and a client's windows go with it, bound or not, and the
// region one is bound to too: the device's keys they held are free
// again.
func TestMWLimitsAndCleanup(t *testing.T) {
	p := newPairLimits(t, stack.Limits{MaxMR: 16})
	s, err := daemon.Listen(daemon.Config{Device: p.b, Socket: filepath.Join(t.TempDir(), "s"),
		Limits: daemon.Limits{QPs: 2, CQs: 2, MRs: 4, PDs: 2, SRQs: 1, AHs: 1, Channels: 2, MRBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown()

	A := newEnd(t, open(t, p.sa), 4096)
	dev := open(t, s)
	B := &end{dev: dev}
	B.pd, _ = dev.AllocPD()
	B.cq, _ = dev.CreateCQ(16)
	B.buf, _ = dev.AllocBuffer(4096)
	if B.mr, err = B.pd.RegisterMR(B.buf, stack.AccessLocalWrite|stack.AccessMWBind); err != nil {
		t.Fatal(err)
	}
	if _, err := B.pd.AllocMW(3); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a window of type 3: %v", err)
	}
	var mws []verbs.MW
	for i := 0; i < 3; i++ {
		mw, err := B.pd.AllocMW(stack.MWType(1 + i%2))
		if err != nil {
			t.Fatal(err)
		}
		mws = append(mws, mw)
	}
	if _, err := B.pd.AllocMW(stack.MWType2); !errors.Is(err, stack.ErrNoResources) {
		t.Errorf("a fifth region or window past a limit of 4: %v", err)
	}
	if _, err := B.pd.RegisterMR(B.buf, stack.AccessLocalWrite); !errors.Is(err, stack.ErrNoResources) {
		t.Errorf("a region past a limit of 4 regions and windows: %v", err)
	}
	if st := s.Stats(0); len(st.Sessions) != 1 || st.Sessions[0].Objects["mw"] != 3 {
		t.Errorf("sessions %+v", st.Sessions)
	}
	// The type 1 window bound: it holds the region.
	ga, _ := A.dev.GID(1)
	gb, _ := dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)
	if err := qb.BindMW(mws[0], 1, stack.SendSignaled, verbs.MWBind{MR: B.mr, Addr: B.mr.Addr(), Length: 64,
		Access: stack.AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, B.cq, 1)[0]; wc.Status != stack.WCSuccess {
		t.Fatalf("bind: %+v", wc)
	}

	// Clients take the device's keys (16, some the daemon's own); when
	// one goes, the keys of its region and windows are free for others.
	var pds []verbs.PD
	n := 0
	for n < 16 {
		if n%4 == 0 {
			pd, _ := open(t, s).AllocPD()
			pds = append(pds, pd)
		}
		if _, err := pds[len(pds)-1].AllocMW(stack.MWType1); errors.Is(err, stack.ErrNoResources) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n+4 > 16 || n < 4 {
		t.Fatalf("%d windows of 16 keys, 4 taken", n)
	}
	dev.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Stats(0).Sessions) != len(pds) {
		if time.Now().After(deadline) {
			t.Fatal("the session stays")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pd, _ := open(t, s).AllocPD()
	for i := 0; i < 4; i++ {
		if _, err := pd.AllocMW(stack.MWType2); err != nil {
			t.Fatalf("window %d after the other client left: %v", i, err)
		}
	}
	if _, err := pd.AllocMW(stack.MWType2); !errors.Is(err, stack.ErrNoResources) {
		t.Fatalf("a window past the device's keys: %v", err)
	}
}
