package qp

import (
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// End-to-end credits (credit.go): the encoding, the responder's
// advertisement and the requester's limit.

// TestCreditCodeTable checks the credit count encoding both ways: the
// table against the IBTA's scale (0 to 4 one by one, then steps of 1.5
// and 4/3 by turns: 2^(c/2) for an even code, 3·2^((c-3)/2) for an odd
// one, up to 32768), and the code of every count against a naive search.
func TestCreditCodeTable(t *testing.T) {
	for c := 0; c < len(creditCounts); c++ {
		want := c
		switch {
		case c >= 2 && c%2 == 0:
			want = 1 << (c / 2)
		case c >= 2:
			want = 3 << ((c - 3) / 2)
		}
		if int(creditCounts[c]) != want {
			t.Errorf("code %d stands for %d receives, want %d", c, creditCounts[c], want)
		}
	}
	if len(creditCounts) != bth.CreditsInvalid || creditCounts[30] != 32768 {
		t.Fatalf("%d codes, the last %d", len(creditCounts), creditCounts[len(creditCounts)-1])
	}
	for n := -1; n <= 40000; n++ {
		want := uint8(0)
		for c := len(creditCounts) - 1; c >= 0; c-- {
			if int(creditCounts[c]) <= n {
				want = uint8(c)
				break
			}
		}
		if got := creditCode(n); got != want {
			t.Fatalf("%d receives: code %d, want %d", n, got, want)
		}
	}
	for _, c := range []struct{ n, code int }{{0, 0}, {4, 4}, {5, 4}, {6, 5}, {7, 5}, {8, 6}, {95, 12}, {96, 13}, {1 << 20, 30}} {
		if got := creditCode(c.n); int(got) != c.code {
			t.Errorf("%d receives: code %d, want %d", c.n, got, c.code)
		}
	}
}

// TestCreditLimit: an AETH's MSN plus its count, modulo 2^24, is the
// limit; an older AETH does not lower it; code 31 lifts it for good.
func TestCreditLimit(t *testing.T) {
	var c credits
	c.take(3, 10)
	if c.unlimited || c.lsn != 13 {
		t.Fatalf("msn 10, code 3: %+v", c)
	}
	c.take(2, 10) // sent before the one above
	c.take(9, 0xfffff0)
	if c.lsn != 13 {
		t.Fatalf("an older AETH moved the limit: %+v", c)
	}
	c = credits{lsn: 0xfffff0}
	c.take(5, 0xfffffe) // 6 receives past MSN 0xfffffe
	if c.lsn != 4 {
		t.Fatalf("across the wrap: %+v", c)
	}
	c.take(bth.CreditsInvalid, 0)
	c.take(0, 100)
	if !c.unlimited {
		t.Fatalf("a count after code 31 limits again: %+v", c)
	}
}

// wantCredits checks that p is an ACK-kind response whose AETH
// advertises code.
func wantCredits(t *testing.T, p *bth.Packet, code uint8) {
	t.Helper()
	a := p.AETH()
	if a == nil || a.Syndrome() != bth.ACKSyndrome(code) {
		t.Fatalf("%v: want an AETH with credit code %d", describe([]*bth.Packet{p}), code)
	}
}

// TestResponderAdvertisesCredits: every ACK, READ response FIRST/LAST
// and atomic ACK names the receives posted and not yet taken.
func TestResponderAdvertisesCredits(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(4096, 0x10000, 0)
	psn := bth.PSN(0)
	send := func(op bth.Opcode, ack bool, size int) []*bth.Packet {
		t.Helper()
		n.qp.Receive(0, req(t, op, psn, ack, make([]byte, size), nil))
		psn = psn.Next()
		return n.out.take()
	}
	recvs := func(k int) {
		for i := 0; i < k; i++ {
			n.recv(t, uint64(i), 0x10000, 4096, key)
		}
	}
	// k receives: the ACK of each SEND names those left.
	recvs(5)
	for i, code := range []uint8{4, 3, 2, 1, 0} {
		wantAck(t, send(bth.OpSendOnly, true, 8), psn.Add(-1), bth.ACKSyndrome(code), uint32(i+1))
	}
	wantAck(t, send(bth.OpSendOnly, true, 8), psn.Add(-1), bth.RNRSyndrome(12), 5)
	psn = psn.Add(-1) // the requester sends it again
	const k = 40
	recvs(k)
	for i := 1; i <= k; i++ {
		wantAck(t, send(bth.OpSendOnly, true, 8), psn.Add(-1), bth.ACKSyndrome(creditCode(k-i)), uint32(5+i))
	}
	// A SEND in progress holds its receive: the ACK of its FIRST
	// counts the others only.
	recvs(3)
	wantAck(t, send(bth.OpSendFirst, true, 1024), psn.Add(-1), bth.ACKSyndrome(2), 45)
	wantAck(t, send(bth.OpSendLast, true, 8), psn.Add(-1), bth.ACKSyndrome(2), 46)
	// READ responses and atomic ACKs carry the count too.
	_, skey := n.buf(3000, 0x20000, 1)
	n.qp.Receive(0, req(t, bth.OpReadRequest, psn, true, nil, reth(0x20000, skey, 3000)))
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, psn, false, 1024}, pkt{bth.OpReadRespMiddle, psn.Add(1), false, 1024},
		pkt{bth.OpReadRespLast, psn.Add(2), false, 952})
	wantCredits(t, ps[0], 2)
	wantCredits(t, ps[2], 2)
	psn = psn.Add(3)
	n.qp.Receive(0, req(t, bth.OpFetchAdd, psn, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey = 0x20000, skey }))
	ps = n.out.take()
	if len(ps) != 1 || ps[0].Opcode() != bth.OpAtomicAck {
		t.Fatalf("atomic answer %v", describe(ps))
	}
	wantCredits(t, ps[0], 2)
}

// TestResponderCreditsCountedAsSent: a queued ACK counts the receives
// posted by the time it goes out.
func TestResponderCreditsCountedAsSent(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(4096, 0x10000, 0)
	n.recv(t, 1, 0x10000, 4096, key)
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("x"), nil))
	for i := uint64(2); i <= 9; i++ {
		n.recv(t, i, 0x10000, 4096, key)
	}
	n.out.full = false
	n.qp.Pump(0)
	wantAck(t, n.out.take(), 0, bth.ACKSyndrome(6), 1) // 8 receives: code 6
}

// TestResponderSRQNoCredits: a QP with an SRQ advertises code 31, its
// receives being anyone's.
func TestResponderSRQNoCredits(t *testing.T) {
	srq := NewSRQ(8, 1)
	n := single(t, Caps{SRQ: srq}, defaultConn())
	_, key := n.buf(4096, 0x10000, 0)
	for i := uint64(1); i <= 4; i++ {
		if err := srq.PostRecv(&RecvWR{ID: i, SG: []SGE{{Addr: 0x10000, Length: 4096, LKey: key}}}); err != nil {
			t.Fatal(err)
		}
	}
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("x"), nil))
	wantAck(t, n.out.take(), 0, bth.ACKSyndrome(bth.CreditsInvalid), 1)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 1, true, nil, reth(0x10000, key, 100)))
	ps := n.out.take()
	if len(ps) != 1 {
		t.Fatalf("READ answer %v", describe(ps))
	}
	wantCredits(t, ps[0], bth.CreditsInvalid)
}

// fresh returns a requester (path MTU 1024) with a new QP's credits:
// none known, so that its first message that takes a receive is a
// probe.
func fresh(t *testing.T) *node {
	t.Helper()
	n := single(t, Caps{}, defaultConn())
	n.qp.cred = credits{}
	return n
}

// TestRequesterCreditLimit: the requester starts no SEND past the
// responder's limit but the probe, one packet with the A bit, and goes
// on as ACKs open the limit.
func TestRequesterCreditLimit(t *testing.T) {
	n := fresh(t)
	sends(t, n, 6)
	busy := func(want bool) {
		t.Helper()
		if n.qp.Busy() != want {
			t.Fatalf("busy %v, want %v", !want, want)
		}
	}
	// No credits yet: the first SEND is the probe.
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 0, true, 64})
	busy(false)
	// MSN 1, 2 receives: messages 2 and 3, and 4 as the probe.
	n.qp.Receive(0, ackPkt(t, 0, bth.ACKSyndrome(2), 1))
	busy(true)
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 1, true, 64}, pkt{bth.OpSendOnly, 2, true, 64}, pkt{bth.OpSendOnly, 3, true, 64})
	busy(false)
	// An ACK that moves the limit by nothing holds the rest.
	n.qp.Receive(0, ackPkt(t, 2, bth.ACKSyndrome(0), 3))
	n.qp.Pump(0)
	wantPkts(t, n.out.take())
	// The probe is answered, no receive left: the next SEND probes.
	n.qp.Receive(0, ackPkt(t, 3, bth.ACKSyndrome(0), 4))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 4, true, 64})
	n.qp.Receive(0, ackPkt(t, 4, bth.ACKSyndrome(3), 5))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 5, true, 64})
	n.qp.Receive(0, ackPkt(t, 5, bth.ACKSyndrome(0), 6))
	wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2}, WC{ID: 3}, WC{ID: 4}, WC{ID: 5}, WC{ID: 6})

	// No credits left (MSN 6, code 0): WRITEs, READs and atomics need
	// none and go; the SEND after them waits for their answer.
	_, key := n.buf(64, 0x20000, 2)
	sg := []SGE{{Addr: 0x20000, Length: 8, LKey: key}}
	n.post(t, SendWR{ID: 7, Opcode: WRWrite, RemoteAddr: 0x1000, RKey: 5, SG: sg})
	n.post(t, SendWR{ID: 8, Opcode: WRRead, RemoteAddr: 0x1000, RKey: 5, SG: sg})
	n.post(t, SendWR{ID: 9, Opcode: WRFetchAdd, RemoteAddr: 0x1000, RKey: 5, SG: sg})
	n.post(t, SendWR{ID: 10, Opcode: WRSend, SG: sg})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpWriteOnly, 6, true, 8}, pkt{bth.OpReadRequest, 7, true, 0}, pkt{bth.OpFetchAdd, 8, true, 0})
	busy(false)
	n.qp.Receive(0, ackPkt(t, 6, bth.ACKSyndrome(0), 7)) // message 10 is still 3 past the limit
	n.qp.Pump(0)
	wantPkts(t, n.out.take())
	rr := hdr(bth.OpReadRespOnly, 7)
	rr.Syndrome, rr.MSN = bth.ACKSyndrome(1), 8 // one receive: message 9 is the limit, 10 probes
	n.qp.Receive(0, craft(t, rr, make([]byte, 8)))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 9, true, 8})
}

// TestRequesterCreditProbe: with no credits, a long SEND sends its first
// packet alone, with the A bit; an RNR NAK of it sends it again, alone,
// once the RNR wait is over; its ACK lets the rest go.
func TestRequesterCreditProbe(t *testing.T) {
	n := fresh(t)
	_, key := n.buf(3000, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: key}}})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendFirst, 0, true, 1024})
	if n.qp.Busy() {
		t.Fatal("busy while the probe is unanswered")
	}
	n.qp.Receive(time.Microsecond, ackPkt(t, 0, bth.RNRSyndrome(1), 0)) // 10 µs
	n.qp.Pump(5 * time.Microsecond)
	wantPkts(t, n.out.take())
	n.qp.Pump(11 * time.Microsecond)
	wantPkts(t, n.out.take(), pkt{bth.OpSendFirst, 0, true, 1024})
	n.qp.Receive(12*time.Microsecond, ackPkt(t, 0, bth.ACKSyndrome(0), 0))
	n.qp.Pump(12 * time.Microsecond)
	wantPkts(t, n.out.take(), pkt{bth.OpSendMiddle, 1, false, 1024}, pkt{bth.OpSendLast, 2, true, 952})
	n.qp.Receive(13*time.Microsecond, ackPkt(t, 2, bth.ACKSyndrome(0), 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1})

	// A WRITE with immediate takes a receive too: it probes the same
	// way (the receive is taken by its last packet).
	n.post(t, SendWR{ID: 2, Opcode: WRWriteWithImm, Flags: SendSignaled, RemoteAddr: 0x1000, RKey: 5,
		SG: []SGE{{Addr: 0x10000, Length: 2048, LKey: key}}})
	n.qp.Pump(20 * time.Microsecond)
	wantPkts(t, n.out.take(), pkt{bth.OpWriteFirst, 3, true, 1024})
	n.qp.Receive(21*time.Microsecond, ackPkt(t, 3, bth.ACKSyndrome(0), 1))
	n.qp.Pump(21 * time.Microsecond)
	wantPkts(t, n.out.take(), pkt{bth.OpWriteLastImm, 4, true, 1024})
}

// TestRequesterUnlimitedCredits: after code 31 nothing waits for
// credits, whatever the AETHs say later.
func TestRequesterUnlimitedCredits(t *testing.T) {
	n := fresh(t)
	sends(t, n, 1)
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 0, true, 64})
	n.qp.Receive(0, ackPkt(t, 0, bth.ACKSyndrome(bth.CreditsInvalid), 1))
	sends(t, n, 20)
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 20 {
		t.Fatalf("%d SENDs after code 31, want 20", len(ps))
	}
	n.qp.Receive(0, ackPkt(t, 20, bth.ACKSyndrome(0), 21))
	sends(t, n, 5)
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 5 {
		t.Fatalf("%d SENDs after a count of 0 that followed code 31, want 5", len(ps))
	}
}

// TestCreditsBetweenQPs: a requester whose responder has fewer receives
// than SENDs to send sends only what they take and the probe; the
// probe's RNR NAK is the only one, and nothing else is sent twice.
func TestCreditsBetweenQPs(t *testing.T) {
	mem := &fakeMem{}
	src := make([]byte, 1000)
	dst := make([]byte, 1000)
	ks := mem.reg(src, 0x100000, 0)
	kd := mem.reg(dst, 0x200000, AccessLocalWrite)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, RC, MTU1024, mem, sa, sb)
	recvs := func(k int) {
		for i := 0; i < k; i++ {
			if err := w.b.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{{Addr: 0x200000, Length: 1000, LKey: kd}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recvs(3)
	for i := 1; i <= 10; i++ {
		wr := SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x100000, Length: 1000, LKey: ks}}}
		if err := w.a.PostSend(0, &wr); err != nil {
			t.Fatal(err)
		}
	}
	w.run(0) // 1 (the probe), then 2, 3 and 4 (a probe, RNR NAKed)
	if sb.recv != 3 || sa.send != 3 || w.a.Counters().SentPkts != 4 {
		t.Fatalf("%d received, %d completed, %d sent", sb.recv, sa.send, w.a.Counters().SentPkts)
	}
	recvs(7)
	now := Time(time.Millisecond) // past the RNR timer (code 12: 640 µs)
	w.a.Tick(now)
	w.run(now)
	ca, cb := w.a.Counters(), w.b.Counters()
	if sb.recv != 10 || sa.send != 10 || sa.bad+sb.bad != 0 {
		t.Fatalf("%d received, %d completed, %d+%d bad", sb.recv, sa.send, sa.bad, sb.bad)
	}
	if ca.SentPkts != 11 || ca.RetransmittedPkts != 1 || ca.RcvdRNRErr != 1 || cb.SendRNRErr != 1 {
		t.Fatalf("sent %d, again %d, RNR NAKs %d/%d", ca.SentPkts, ca.RetransmittedPkts, ca.RcvdRNRErr, cb.SendRNRErr)
	}
}

// TestRequesterCreditsFromCopy: another answer to the PSN acknowledged
// last (a duplicate's ACK) brings newer credits too.
func TestRequesterCreditsFromCopy(t *testing.T) {
	n := fresh(t)
	sends(t, n, 3)
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 0, true, 64})
	n.qp.Receive(0, ackPkt(t, 0, bth.ACKSyndrome(0), 1))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 1, true, 64}) // the probe: 3 waits
	n.qp.Receive(0, ackPkt(t, 0, bth.ACKSyndrome(2), 1))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 2, true, 64})
	if c := n.qp.Counters(); c.DroppedPkts != 1 {
		t.Errorf("the copy was taken for progress: %+v", *c)
	}
}
