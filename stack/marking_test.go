package stack

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
)

func TestMarkingTrafficClass(t *testing.T) {
	for _, c := range []struct {
		m    Marking
		tc   uint8
		want uint8
	}{
		{Marking{}, 0, 26<<2 | 2},                        // the defaults: DSCP 26, ECT(0)
		{Marking{}, 3, 26<<2 | 2},                        // the path's ECN bits give way to ECT(0)
		{Marking{}, 46 << 2, 46<<2 | 2},                  // the path's DSCP is kept
		{Marking{DSCP: 10}, 0, 10<<2 | 2},                // the device's DSCP
		{Marking{DSCP: -1}, 0, 2},                        // DSCP 0
		{Marking{ECN: ECT1}, 0, 26<<2 | 1},               // ECT(1)
		{Marking{ECN: ECNAsPath}, 0, 26 << 2},            // not ECN-capable
		{Marking{ECN: ECNAsPath, DSCP: -1}, 1, 1},        // exactly as the path says
		{Marking{ECN: ECNAsPath}, 48<<2 | 3, 48<<2 | 3},  // CE on purpose (tests)
		{Marking{DSCP: 63, ECN: ECT1}, 8 << 2, 8<<2 | 1}, // the path's DSCP, ECT(1)
	} {
		if got := c.m.trafficClass(c.tc); got != c.want {
			t.Errorf("%+v: traffic class %#x gives %#x, want %#x", c.m, c.tc, got, c.want)
		}
	}
}

func TestMarkingConfig(t *testing.T) {
	for _, s := range []string{"ect0", "ect1", "off"} {
		e, err := ParseECN(s)
		if err != nil || e.String() != s {
			t.Errorf("ParseECN(%q) = %v, %v", s, e, err)
		}
	}
	if _, err := ParseECN("ce"); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("ParseECN(ce): %v", err)
	}
	for _, m := range []Marking{{DSCP: 64}, {ECN: 3}, {ECN: -1}} {
		if err := m.check(); !errors.Is(err, ErrInvalidArg) {
			t.Errorf("%+v: %v, want ErrInvalidArg", m, err)
		}
	}
	a, _ := pipe.New(pipe.Config{})
	if _, err := Open(t.Context(), Config{Link: a, MAC: macA, Manual: true, Marking: Marking{DSCP: 70}}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("open with dscp 70: %v", err)
	}
}

// tosLink records the traffic class of each RoCE frame received, by
// opcode, and whether IPv4 header checksums verify.
type tosLink struct {
	Link
	pkt   bth.Packet
	tos   map[bth.Opcode]map[uint8]int
	badIP int
}

func (l *tosLink) Receive(frames [][]byte) int {
	n := l.Link.Receive(frames)
	for _, f := range frames[:n] {
		if bth.Parse(f, &l.pkt) != nil {
			continue
		}
		op := l.pkt.Opcode()
		if l.tos[op] == nil {
			l.tos[op] = map[uint8]int{}
		}
		l.tos[op][l.pkt.TrafficClass()]++
		if !l.pkt.IPv4ChecksumOK() {
			l.badIP++
		}
	}
	return n
}

// TestCongestionNotification: A's WRITEs leave with DSCP 26 and ECT(0);
// a switch marks them CE on the way to B (a fault.Link with MarkCE); B
// counts them and sends A CNPs (DSCP 48, ECT(0)), which A's QP counts;
// the data arrives intact. B's ACKs, unmarked, get no CNP.
func TestCongestionNotification(t *testing.T) {
	clock := NewFakeClock(time.Second)
	pa, pb := pipe.New(pipe.Config{MTU: 4200, Slots: 512})
	ra := &tosLink{Link: pa, tos: map[bth.Opcode]map[uint8]int{}}
	rb := &tosLink{Link: fault.Wrap(pb, fault.Config{Seed: 1, MarkCE: 0.5, Dir: fault.Receive, Clock: clock}),
		tos: map[bth.Opcode]map[uint8]int{}}
	s := &simPair{clock: clock}
	s.a = openManual(t, ra, macA, []netip.Addr{ipA, ip6A}, clock)
	s.b = openManual(t, rb, macB, []netip.Addr{ipB, ip6B}, clock)
	A, B := newSide(t, s.a, 1<<20, 256), newSide(t, s.b, 1<<20, 256)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 100, 200, AccessRemoteWrite)
	fill(A.buf, 7)
	const n = 64
	for i := 0; i < n; i++ {
		wr := &SendWR{ID: uint64(i), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(uint64(i)*16384, 16384)},
			Remote: RemoteAddr{Addr: B.mr.Addr() + uint64(i)*16384, RKey: B.mr.RKey()}}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	var wcs []WC
	buf := make([]WC, 16)
	s.run(t, func() bool {
		k := A.cq.Poll(buf)
		wcs = append(wcs, buf[:k]...)
		return len(wcs) == n
	})
	for _, wc := range wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	if !bytes.Equal(A.buf[:n*16384], B.buf[:n*16384]) {
		t.Fatal("the data differs")
	}
	ca, cb := qa.Counters(), qb.Counters()
	marked := rb.Link.(*fault.Link).Stats().MarkedCE
	if marked == 0 || cb.NPECNMarked != marked || cb.NPCNPSent == 0 || cb.NPCNPSent > marked {
		t.Errorf("B: %d frames marked CE, %d counted, %d CNPs sent", marked, cb.NPECNMarked, cb.NPCNPSent)
	}
	if ca.CNPRcvd != cb.NPCNPSent || ca.NPCNPSent != 0 {
		t.Errorf("A: %d CNPs received of %d sent, %d sent itself", ca.CNPRcvd, cb.NPCNPSent, ca.NPCNPSent)
	}
	// At B, WRITEs came ECT(0) or CE-marked, all with DSCP 26.
	for tc, k := range rb.tos[bth.OpWriteMiddle] {
		if tc != 26<<2|2 && tc != 26<<2|3 {
			t.Errorf("%d WRITE packets with traffic class %#x", k, tc)
		}
	}
	if got := ra.tos[bth.OpCNP]; len(got) != 1 || got[48<<2|2] != int(cb.NPCNPSent) {
		t.Errorf("CNPs at A by traffic class: %v", got)
	}
	if got := ra.tos[bth.OpAck]; len(got) != 1 || got[26<<2|2] == 0 {
		t.Errorf("ACKs at A by traffic class: %v", got)
	}
	if ra.badIP+rb.badIP != 0 {
		t.Errorf("%d frames with a bad IPv4 header checksum", ra.badIP+rb.badIP)
	}
}

// cnpFor is a CNP to q from its peer, parsed.
func cnpFor(t testing.TB, q *QP) *bth.Packet {
	h := &bth.Headers{L2L3: bth.L2L3{SrcMAC: macB, DstMAC: macA, SrcIP: ipB, DstIP: ipA},
		BTH: bth.BTHFields{Opcode: bth.OpCNP, PKey: 0xffff, BECN: true, DestQP: q.QPN()}}
	buf := make([]byte, h.FrameLen(0))
	n, err := bth.Encode(buf, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := new(bth.Packet)
	if err := bth.Parse(buf[:n], p); err != nil {
		t.Fatal(err)
	}
	return p
}

// tciLink records the 802.1Q tag of each RoCE frame received, by opcode.
type tciLink struct {
	Link
	pkt bth.Packet
	tci map[bth.Opcode]map[uint16]int
}

func (l *tciLink) Receive(frames [][]byte) int {
	n := l.Link.Receive(frames)
	for _, f := range frames[:n] {
		if bth.Parse(f, &l.pkt) != nil {
			continue
		}
		op := l.pkt.Opcode()
		if l.tci[op] == nil {
			l.tci[op] = map[uint16]int{}
		}
		tci := uint16(0xffff) // untagged
		if l.pkt.HasVLAN {
			tci = l.pkt.VLANTCI
		}
		l.tci[op][tci]++
	}
	return n
}

// TestVLANTagging: with Config.VLAN every frame is tagged with the VLAN
// and a priority: the DSCP's (26: 3) for a connected QP and its ACKs,
// the address handle's SL for UD, cnp_802p_prio (6) for CNPs; a
// Priorities map changes the DSCP's.
func TestVLANTagging(t *testing.T) {
	clock := NewFakeClock(time.Second)
	pa, pb := pipe.New(pipe.Config{MTU: 4200, Slots: 512})
	ra := &tciLink{Link: pa, tci: map[bth.Opcode]map[uint16]int{}}
	rb := &tciLink{Link: fault.Wrap(pb, fault.Config{Seed: 1, MarkCE: 1, Dir: fault.Receive, Clock: clock}),
		tci: map[bth.Opcode]map[uint16]int{}}
	var prio [64]uint8
	for i := range prio {
		prio[i] = uint8(i >> 3)
	}
	prio[26] = 4
	open := func(l Link, mac [6]byte, addrs []netip.Addr, m Marking) *Device {
		d, err := Open(context.Background(), Config{Link: l, MAC: mac, Addrs: addrs, Manual: true, Clock: clock, VLAN: 100,
			Marking: m, Neighbors: StaticNeighbors{ipA: macA, ipB: macB, ip6A: macA, ip6B: macB}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	s := &simPair{clock: clock, a: open(ra, macA, []netip.Addr{ipA, ip6A}, Marking{}),
		b: open(rb, macB, []netip.Addr{ipB, ip6B}, Marking{Priorities: &prio})}
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 100, 200, AccessRemoteWrite)
	if err := qa.PostSend(&SendWR{Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 8192)},
		Remote: RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	// UD with SL 5, A to B.
	ua, ub := A.qp(t, UD), B.qp(t, UD)
	for _, q := range []*QP{ua, ub} {
		udReady(t, q, 0x1234, 0)
	}
	if err := ub.PostRecv(&RecvWR{ID: 7, SG: []SGE{B.mr.SGE(0, 1024)}}); err != nil {
		t.Fatal(err)
	}
	dgid, _ := s.b.GID(1)
	ah, err := A.pd.CreateAH(AHAttr{DGID: dgid, SGIDIndex: 1, SL: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := ua.PostSend(&SendWR{Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 100)}, AH: ah,
		RemoteQPN: ub.QPN(), RemoteQKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]WC, 4)
	got := 0
	s.run(t, func() bool { got += A.cq.Poll(wcs); return got == 2 })
	want := func(l *tciLink, op bth.Opcode, tci uint16) {
		t.Helper()
		if m := l.tci[op]; len(m) != 1 || m[tci] == 0 {
			t.Errorf("%v frames by tag: %v, want all %#x", op, m, tci)
		}
	}
	want(rb, bth.OpWriteFirst, 3<<13|100) // A's default: DSCP 26 is priority 3
	want(rb, bth.OpUDSendOnly, 5<<13|100) // the AH's SL
	want(ra, bth.OpAck, 4<<13|100)        // B maps DSCP 26 to 4
	want(ra, bth.OpCNP, 6<<13|100)        // cnp_802p_prio
	if _, err := Open(context.Background(), Config{Link: pa, MAC: macA, Manual: true, VLAN: 4095}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("vlan 4095: %v", err)
	}
}
