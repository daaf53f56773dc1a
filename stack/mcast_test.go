package stack

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
)

// fakeFilter records a device's multicast filter.
type fakeFilter struct {
	mu  sync.Mutex
	set map[[6]byte]bool
	log []string
}

func (f *fakeFilter) AddMulticast(mac [6]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set = make(map[[6]byte]bool)
	}
	f.set[mac] = true
	f.log = append(f.log, "add")
	return nil
}

func (f *fakeFilter) DelMulticast(mac [6]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.set, mac)
	f.log = append(f.log, "del")
	return nil
}

func TestMulticastMAC(t *testing.T) {
	for _, c := range []struct {
		ip  string
		mac [6]byte
	}{
		{"239.1.2.3", [6]byte{1, 0, 0x5e, 1, 2, 3}},
		{"::ffff:224.129.2.3", [6]byte{1, 0, 0x5e, 1, 2, 3}}, // the 24th bit is lost
		{"ff0e::1:8899:aabb", [6]byte{0x33, 0x33, 0x88, 0x99, 0xaa, 0xbb}},
	} {
		if got := MulticastMAC(netip.MustParseAddr(c.ip)); got != c.mac {
			t.Errorf("%s: %x, want %x", c.ip, got, c.mac)
		}
	}
}

// TestUDMulticast sends datagrams to IPv4 and IPv6 groups: every QP
// attached with the datagram's Q_Key gets it, others do not; detaching
// and destroying stop delivery; the filter follows the groups.
func TestUDMulticast(t *testing.T) {
	f := &fakeFilter{}
	s := newSimPairCfg(t, 1500, nil, Config{MulticastFilter: f})
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	ua := A.qp(t, UD)
	udReady(t, ua, 0x11, 5)
	bs := make([]*QP, 4)
	for i := range bs {
		bs[i] = B.qp(t, UD)
		qkey := uint32(0x11)
		if i == 2 {
			qkey = 0x22
		}
		udReady(t, bs[i], qkey, 1)
		for k := 0; k < 4; k++ {
			if err := bs[i].PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{B.mr.SGE(uint64(i*8000+k*2000), 2000)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	g4 := netip.MustParseAddr("::ffff:239.1.2.3")
	g6 := netip.MustParseAddr("ff0e::1:8899:aabb")
	for i := 0; i < 3; i++ {
		if err := bs[i].AttachMcast(g4); err != nil {
			t.Fatal(err)
		}
	}
	if err := bs[0].AttachMcast(g4); err != nil {
		t.Errorf("attach twice: %v", err)
	}
	if err := bs[0].AttachMcast(g6); err != nil {
		t.Fatal(err)
	}
	if got := bs[0].McastGroups(); !slices.Equal(got, []netip.Addr{g4, g6}) {
		t.Errorf("groups of qp 0: %v", got)
	}
	if len(f.set) != 2 || !f.set[[6]byte{1, 0, 0x5e, 1, 2, 3}] || !f.set[[6]byte{0x33, 0x33, 0x88, 0x99, 0xaa, 0xbb}] {
		t.Errorf("filter: %v", f.set)
	}

	ah4, err := A.pd.CreateAH(AHAttr{DGID: g4, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ah4.Attr().DMAC != [6]byte{1, 0, 0x5e, 1, 2, 3} {
		t.Errorf("ah to %v: dmac %x", g4, ah4.Attr().DMAC)
	}
	ah6, err := A.pd.CreateAH(AHAttr{DGID: g6, SGIDIndex: 2})
	if err != nil {
		t.Fatal(err)
	}
	fill(A.buf[:1000], 9)
	send := func(id uint64, ah *AH) {
		t.Helper()
		if err := ua.PostSend(&SendWR{ID: id, Op: OpSendWithImm, Imm: uint32(id), Flags: SendSignaled,
			SG: []SGE{A.mr.SGE(0, 1000)}, AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 0x11}); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, s, A.cq, 1); wc[0].Status != WCSuccess {
			t.Fatalf("send %d: %+v", id, wc[0])
		}
	}
	// received drains B's CQ after the sends: which QP got which.
	received := func() map[uint32][]uint32 {
		s.run(t, func() bool { return !s.a.Step() && !s.b.Step() })
		got := map[uint32][]uint32{}
		wcs := make([]WC, 16)
		for n := B.cq.Poll(wcs); n > 0; n = B.cq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				if wc.Status != WCSuccess || wc.SrcQP != ua.QPN() || wc.ByteLen != 1040 {
					t.Errorf("receive: %+v", wc)
				}
				got[wc.QPN] = append(got[wc.QPN], wc.Imm)
			}
		}
		return got
	}
	send(1, ah4)
	send(2, ah6)
	got := received()
	want := map[uint32][]uint32{bs[0].QPN(): {1, 2}, bs[1].QPN(): {1}}
	if len(got) != len(want) || !slices.Equal(got[bs[0].QPN()], want[bs[0].QPN()]) || !slices.Equal(got[bs[1].QPN()], want[bs[1].QPN()]) {
		t.Fatalf("received %v, want %v", got, want)
	}
	// The GRH slot of QP 1's datagram: the IPv4 header, sent to the group.
	if !bytes.Equal(B.buf[8000+20+16:8000+20+20], g4.Unmap().AsSlice()) || !bytes.Equal(B.buf[8000+40:8000+1040], A.buf[:1000]) {
		t.Error("qp 1's datagram: wrong GRH destination or payload")
	}
	if c := bs[2].Counters(); c.QKeyViolation != 1 {
		t.Errorf("qp with another q_key: %d q_key violations, want 1", c.QKeyViolation)
	}

	if err := bs[1].DetachMcast(g4); err != nil {
		t.Fatal(err)
	}
	if err := bs[1].DetachMcast(g4); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("detach twice: %v", err)
	}
	send(3, ah4)
	if got := received(); len(got) != 1 || !slices.Equal(got[bs[0].QPN()], []uint32{3}) {
		t.Errorf("after detach: %v", got)
	}
	if err := bs[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if len(f.set) != 1 {
		t.Errorf("filter after the last of the IPv6 group went: %v", f.set)
	}
	if err := bs[2].Destroy(); err != nil {
		t.Fatal(err)
	}
	if len(f.set) != 0 {
		t.Errorf("filter with no group: %v", f.set)
	}
	before := s.b.Counters().RcvNotOurs
	send(4, ah4)
	if got := received(); len(got) != 0 {
		t.Errorf("a group nobody is in delivered %v", got)
	}
	if n := s.b.Counters().RcvNotOurs - before; n != 1 {
		t.Errorf("datagram to no group: rcv_not_ours +%d, want +1", n)
	}
}

func TestMulticastErrors(t *testing.T) {
	f := &fakeFilter{}
	s := newSimPairCfg(t, 1500, nil, Config{MulticastFilter: f, Limits: Limits{MaxMcastGrp: 2, MaxMcastQPAttach: 2, MaxTotalMcastQPAttach: 3}})
	B := newSide(t, s.b, 1<<12, 64)
	rc := B.qp(t, RC)
	g := netip.MustParseAddr("239.0.0.1")
	if err := rc.AttachMcast(g); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("rc qp: %v", err)
	}
	u := []*QP{B.qp(t, UD), B.qp(t, UD), B.qp(t, UD)}
	for _, bad := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8::1", "::"} {
		if err := u[0].AttachMcast(netip.MustParseAddr(bad)); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("attach to %s: %v", bad, err)
		}
	}
	if err := u[0].AttachMcast(netip.Addr{}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("attach to no address: %v", err)
	}
	if err := u[0].DetachMcast(g); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("detach from no group: %v", err)
	}
	for _, q := range u[:2] {
		if err := q.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := u[2].AttachMcast(g); !errors.Is(err, ErrNoResources) {
		t.Errorf("third qp in a group of 2: %v", err)
	}
	if err := u[2].AttachMcast(netip.MustParseAddr("239.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if err := u[2].AttachMcast(netip.MustParseAddr("239.0.0.3")); !errors.Is(err, ErrNoResources) {
		t.Errorf("third group of 2: %v", err)
	}
	if err := u[1].AttachMcast(netip.MustParseAddr("239.0.0.2")); !errors.Is(err, ErrNoResources) {
		t.Errorf("fourth attachment of 3: %v", err)
	}
	if err := u[2].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := u[2].AttachMcast(g); !errors.Is(err, ErrDestroyed) {
		t.Errorf("attach a destroyed qp: %v", err)
	}
	if err := u[1].AttachMcast(netip.MustParseAddr("239.0.0.2")); err != nil {
		t.Errorf("attach after a destroy freed room: %v", err)
	}
	if want := []string{"add", "add", "del", "add"}; !slices.Equal(f.log, want) {
		t.Errorf("filter calls %v, want %v", f.log, want)
	}
}

// TestMulticastTwoQueues attaches QPs owned by both engines of a device:
// whichever queue a datagram arrives on, each QP gets it once.
func TestMulticastTwoQueues(t *testing.T) {
	clock := NewFakeClock(0)
	da, db := twoQueueDevices(t, clock, true, false)
	s := &simPair{clock: clock, a: da, b: db}
	A, B := newSide(t, da, 1<<16, 64), newSide(t, db, 1<<16, 64)
	g := netip.MustParseAddr("239.9.9.9")
	engines := map[int]bool{}
	var bs []*QP
	for i := 0; i < 4; i++ {
		q := B.qp(t, UD)
		udReady(t, q, 7, 0)
		for k := 0; k < 3; k++ {
			q.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{B.mr.SGE(uint64(i*4096+k*1024), 1024)}})
		}
		if err := q.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
		engines[q.eng.Load().id] = true
		bs = append(bs, q)
	}
	if len(engines) != 2 {
		t.Fatalf("the QPs are on engines %v: the test needs both", engines)
	}
	var senders []*QP
	for i := 0; i < 2; i++ { // one sender per queue of A
		q := A.qp(t, UD)
		udReady(t, q, 7, 0)
		senders = append(senders, q)
	}
	ah, err := A.pd.CreateAH(AHAttr{DGID: g, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := senders[i%2].PostSend(&SendWR{ID: uint64(i), Op: OpSendWithImm, Imm: uint32(i), SG: []SGE{A.mr.SGE(0, 100)},
			AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 7}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint32][]uint32{}
	for _, wc := range pollN(t, s, B.cq, 12) {
		got[wc.QPN] = append(got[wc.QPN], wc.Imm)
	}
	s.run(t, func() bool { return !da.Step() && !db.Step() })
	if n := B.cq.Poll(make([]WC, 4)); n != 0 {
		t.Errorf("%d more completions than datagrams", n)
	}
	for _, q := range bs {
		imms := got[q.QPN()]
		slices.Sort(imms)
		if !slices.Equal(imms, []uint32{0, 1, 2}) {
			t.Errorf("qp %#x received %v, want each of 0, 1, 2 once", q.QPN(), imms)
		}
	}
}
