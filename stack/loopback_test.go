package stack

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/link/pipe"
)

// TestLoopback: QPs of one device talk to each other through its own
// addresses, as on rdma_rxe: an RC pair (SEND, WRITE, READ, an atomic),
// a UD datagram through an address handle to the device's own GID, and
// a datagram to a multicast group, which the device's attached QP
// receives as well as the other device's. Nothing of it crosses the
// link but the multicast datagram.
func TestLoopback(t *testing.T) {
	s := newSimPair(t, 4200, nil)
	A := newSide(t, s.a, 1<<20, 256)
	qa, qb := A.qp(t, RC), A.qp(t, RC)
	connect(t, qa, qb, 1, 100, 200, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	sent0 := s.b.Counters().RcvdPkts

	fill(A.buf[:100000], 3)
	if err := qb.PostRecv(&RecvWR{ID: 9, SG: []SGE{A.mr.SGE(200000, 20000)}}); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(A.buf[900000:], 41)
	for _, wr := range []SendWR{
		{ID: 1, Op: OpSend, SG: []SGE{A.mr.SGE(0, 10000)}},
		{ID: 2, Op: OpWrite, SG: []SGE{A.mr.SGE(0, 100000)}, Remote: RemoteAddr{Addr: A.mr.Addr() + 300000, RKey: A.mr.RKey()}},
		{ID: 3, Op: OpRead, SG: []SGE{A.mr.SGE(500000, 100000)}, Remote: RemoteAddr{Addr: A.mr.Addr() + 300000, RKey: A.mr.RKey()}},
		{ID: 4, Op: OpFetchAdd, CompareAdd: 1, SG: []SGE{A.mr.SGE(910000, 8)}, Remote: RemoteAddr{Addr: A.mr.Addr() + 900000, RKey: A.mr.RKey()}},
	} {
		wr.Flags = SendSignaled
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	wcs := pollN(t, s, A.cq, 5)
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	if !bytes.Equal(A.buf[200000:210000], A.buf[:10000]) || !bytes.Equal(A.buf[300000:400000], A.buf[:100000]) ||
		!bytes.Equal(A.buf[500000:600000], A.buf[:100000]) {
		t.Fatal("data differs")
	}
	if binary.LittleEndian.Uint64(A.buf[910000:]) != 41 || binary.LittleEndian.Uint64(A.buf[900000:]) != 42 {
		t.Fatal("fetch and add")
	}

	// UD to the device's own GID; then to a group A and B have QPs in.
	ua, ub := A.qp(t, UD), A.qp(t, UD)
	udReady(t, ua, 0x77, 1)
	udReady(t, ub, 0x77, 1)
	B := newSide(t, s.b, 1<<16, 16)
	uc := B.qp(t, UD)
	udReady(t, uc, 0x77, 1)
	g := netip.MustParseAddr("::ffff:239.0.2.9")
	for _, q := range []*QP{ub, uc} {
		if err := q.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := ub.PostRecv(&RecvWR{ID: uint64(20 + i), SG: []SGE{A.mr.SGE(uint64(700000+i*4096), 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := uc.PostRecv(&RecvWR{ID: 30, SG: []SGE{B.mr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	gid, _ := s.a.GID(1)
	self, err := A.pd.CreateAH(AHAttr{DGID: gid, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if self.Attr().DMAC != macA {
		t.Errorf("an AH to the device's own GID: dmac %x, want its own %x", self.Attr().DMAC, macA)
	}
	group, err := A.pd.CreateAH(AHAttr{DGID: g, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, wr := range []SendWR{
		{ID: 10, AH: self, RemoteQPN: ub.QPN()},
		{ID: 11, AH: group, RemoteQPN: MulticastQPN},
	} {
		wr.Op, wr.Flags, wr.RemoteQKey = OpSendWithImm, SendSignaled, 0x77
		wr.Imm = uint32(wr.ID)
		wr.SG = []SGE{A.mr.SGE(0, 1000)}
		if err := ua.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	got := pollN(t, s, A.cq, 4) // two sends, two receives on ub
	imms := map[uint32]bool{}
	for _, wc := range got {
		if wc.Status != WCSuccess {
			t.Fatalf("ud completion %+v", wc)
		}
		if wc.Opcode == WCRecv {
			if wc.QPN != ub.QPN() || wc.SrcQP != ua.QPN() || wc.ByteLen != 1000+40 {
				t.Errorf("ud receive %+v", wc)
			}
			imms[wc.Imm] = true
		}
	}
	if !imms[10] || !imms[11] {
		t.Errorf("ub received %v, want the unicast (10) and the group's (11) datagrams", imms)
	}
	if wc := pollN(t, s, B.cq, 1); wc[0].Imm != 11 || wc[0].QPN != uc.QPN() {
		t.Errorf("the other device's group member: %+v", wc[0])
	}
	if n := s.b.Counters().RcvdPkts - sent0; n != 1 {
		t.Errorf("the other device received %d packets, want only the multicast one", n)
	}
	if c := s.a.Counters(); c.Loopback == 0 || c.RcvNotOurs != 0 {
		t.Errorf("loopback_pkts %d, rcv_not_ours %d", c.Loopback, c.RcvNotOurs)
	}
}

// TestLoopbackTwoQueues: looped-back frames reach QPs on the other
// engine of a two-queue device: an RC pair whose QPs the two engines
// own, and a group with members on both engines, sent to from the same
// device.
func TestLoopbackTwoQueues(t *testing.T) {
	clock := NewFakeClock(0)
	da, db := twoQueueDevices(t, clock, true, false)
	s := &simPair{clock: clock, a: da, b: db}
	A := newSide(t, da, 1<<16, 64)
	var qs [2]*QP
	for qs[1] == nil {
		q := A.qp(t, RC)
		if qs[0] == nil {
			qs[0] = q
		} else if q.eng.Load() != qs[0].eng.Load() {
			qs[1] = q
		}
	}
	connect(t, qs[0], qs[1], 1, 1, 2, AccessLocalWrite|AccessRemoteWrite)
	fill(A.buf[:8000], 5)
	if err := qs[0].PostSend(&SendWR{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 8000)},
		Remote: RemoteAddr{Addr: A.mr.Addr() + 10000, RKey: A.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, s, A.cq, 1); wc[0].Status != WCSuccess || !bytes.Equal(A.buf[10000:18000], A.buf[:8000]) {
		t.Fatalf("write between the engines: %+v", wc[0])
	}

	g := netip.MustParseAddr("::ffff:239.9.9.8")
	engines := map[int]bool{}
	var members []*QP
	for len(engines) < 2 {
		q := A.qp(t, UD)
		udReady(t, q, 7, 0)
		if engines[q.eng.Load().id] {
			continue
		}
		engines[q.eng.Load().id] = true
		q.PostRecv(&RecvWR{ID: 50, SG: []SGE{A.mr.SGE(uint64(20000+len(members)*2048), 2048)}})
		if err := q.AttachMcast(g); err != nil {
			t.Fatal(err)
		}
		members = append(members, q)
	}
	sender := A.qp(t, UD)
	udReady(t, sender, 7, 0)
	ah, err := A.pd.CreateAH(AHAttr{DGID: g, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.PostSend(&SendWR{ID: 2, Op: OpSendWithImm, Flags: SendSignaled, Imm: 77, SG: []SGE{A.mr.SGE(0, 100)},
		AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 7}); err != nil {
		t.Fatal(err)
	}
	got := map[uint32]int{}
	for _, wc := range pollN(t, s, A.cq, 3) { // the send and the two members' receives
		if wc.Opcode == WCRecv && wc.Imm == 77 {
			got[wc.QPN]++
		}
	}
	s.run(t, func() bool { return !da.Step() && !db.Step() })
	if n := A.cq.Poll(make([]WC, 4)); n != 0 {
		t.Errorf("%d more completions", n)
	}
	for _, q := range members {
		if got[q.QPN()] != 1 {
			t.Errorf("member %#x on engine %d received the datagram %d times, want once", q.QPN(), q.eng.Load().id, got[q.QPN()])
		}
	}
}

// TestLoopbackNoAllocs: once the inbox has its buffers, looped-back
// traffic (WRITE, READ, SEND and an atomic between two QPs of one
// device) allocates nothing.
func TestLoopbackNoAllocs(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	A := newSide(t, s.a, 1<<20, 256)
	qa, qb := A.qp(t, RC), A.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	wrs := []SendWR{
		{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 65536)}, Remote: RemoteAddr{A.mr.Addr() + 400000, A.mr.RKey()}},
		{ID: 2, Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(65536, 65536)}, Remote: RemoteAddr{A.mr.Addr() + 400000, A.mr.RKey()}},
		{ID: 3, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 10000)}},
		{ID: 4, Op: OpFetchAdd, Flags: SendSignaled, SG: []SGE{A.mr.SGE(200000, 8)}, Remote: RemoteAddr{A.mr.Addr() + 8192, A.mr.RKey()}, CompareAdd: 1},
	}
	rwr := RecvWR{ID: 9, SG: []SGE{A.mr.SGE(300000, 10000)}}
	wcs := make([]WC, 16)
	round := func() {
		qb.PostRecv(&rwr)
		qa.PostSendBatch(wrs)
		for got := 0; got < len(wrs)+1; { // the receive completes too
			s.a.Step()
			s.clock.Advance(1000)
			got += A.cq.Poll(wcs)
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	lb := s.a.Counters().Loopback
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
	if s.a.Counters().Loopback == lb {
		t.Fatal("nothing looped back")
	}
}

// refusingLink refuses the first refuse Transmit calls that carry
// frames, as a full transmit ring does.
type refusingLink struct {
	Link
	refuse int
}

func (l *refusingLink) Transmit(frames [][]byte) int {
	if len(frames) > 0 && l.refuse > 0 {
		l.refuse--
		return 0
	}
	return l.Link.Transmit(frames)
}

// TestLoopbackMcastOnce: a multicast datagram the link refuses at first
// is copied to the device's own group members once, not once per try.
func TestLoopbackMcastOnce(t *testing.T) {
	clock := NewFakeClock(time.Second)
	pa, _ := pipe.New(pipe.Config{MTU: 1500})
	l := &refusingLink{Link: pa}
	d := openManualCfg(t, l, macA, []netip.Addr{ipA}, clock, Config{})
	A := newSide(t, d, 1<<16, 16)
	member, sender := A.qp(t, UD), A.qp(t, UD)
	udReady(t, member, 7, 0)
	udReady(t, sender, 7, 0)
	g := netip.MustParseAddr("::ffff:239.0.2.10")
	if err := member.AttachMcast(g); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		member.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{A.mr.SGE(uint64(i)*2048, 2048)}})
	}
	ah, err := A.pd.CreateAH(AHAttr{DGID: g, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.refuse = 3
	if err := sender.PostSend(&SendWR{ID: 9, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(10000, 100)},
		AH: ah, RemoteQPN: MulticastQPN, RemoteQKey: 7}); err != nil {
		t.Fatal(err)
	}
	recvs, sends := 0, 0
	wcs := make([]WC, 8)
	for i := 0; i < 1000; i++ {
		d.Step()
		clock.Advance(time.Microsecond)
		for _, wc := range wcs[:A.cq.Poll(wcs)] {
			if wc.Opcode == WCRecv {
				recvs++
			} else {
				sends++
			}
		}
	}
	if l.refuse != 0 || sends != 1 || recvs != 1 {
		t.Fatalf("refusals left %d; %d send and %d receive completions, want 1 and 1", l.refuse, sends, recvs)
	}
}
