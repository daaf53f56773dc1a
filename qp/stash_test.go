package qp

import (
	"bytes"
	"testing"

	"github.com/uroce/uroce/bth"
)

// The responder keeping requests past a gap (Env.Stash), and the
// requester's gentle go-back that makes use of it.

// stashNode is a responder (ePSN 10, path MTU 1024) with a stash of at
// most max buffers, an 8 KiB WRITE target at 0x10000 and a 4 KiB
// receive buffer at 0x20000 (posted unless norecv).
type stashNode struct {
	*node
	st      *testStash
	wbuf    []byte
	wkey    uint32
	rbuf    []byte
	payload []byte // 6 KiB of data the requests carry
}

func newStashNode(t *testing.T, max int, norecv bool) *stashNode {
	n := respNode(t, 10)
	s := &stashNode{node: n, st: &testStash{max: max}}
	n.qp.stash = s.st
	s.wbuf, s.wkey = n.buf(8192, 0x10000, 0)
	clear(s.wbuf)
	var rkey uint32
	s.rbuf, rkey = n.buf(4096, 0x20000, 0)
	if !norecv {
		n.recv(t, 1, 0x20000, 4096, rkey)
	}
	s.payload = make([]byte, 6144)
	pattern(s.payload, 3)
	return s
}

// The requests: a WRITE of 4000 bytes at 10-13, a SEND at 14, a WRITE at
// 15 (to 0x10000+5000).
func (s *stashNode) request(t *testing.T, psn bth.PSN) *bth.Packet {
	d := s.payload
	switch psn {
	case 10:
		return req(t, bth.OpWriteFirst, 10, false, d[:1024], reth(0x10000, s.wkey, 4000))
	case 11:
		return req(t, bth.OpWriteMiddle, 11, false, d[1024:2048], nil)
	case 12:
		return req(t, bth.OpWriteMiddle, 12, false, d[2048:3072], nil)
	case 13:
		return req(t, bth.OpWriteLast, 13, true, d[3072:4000], nil)
	case 14:
		return req(t, bth.OpSendOnly, 14, true, d[4000:4100], nil)
	case 15:
		return req(t, bth.OpWriteOnly, 15, true, d[4100:4164], reth(0x10000+5000, s.wkey, 64))
	}
	t.Fatalf("no request %d", psn)
	return nil
}

func (s *stashNode) deliver(t *testing.T, psns ...bth.PSN) {
	t.Helper()
	for _, psn := range psns {
		s.qp.Receive(0, s.request(t, psn))
	}
}

func (s *stashNode) wantNothing(t *testing.T) {
	t.Helper()
	if ps := s.out.take(); len(ps) != 0 {
		t.Fatalf("sent %v", describe(ps))
	}
}

// checkAll checks that every request was executed: memory, the receive.
func (s *stashNode) checkAll(t *testing.T) {
	t.Helper()
	if !bytes.Equal(s.wbuf[:4000], s.payload[:4000]) || !bytes.Equal(s.wbuf[5000:5064], s.payload[4100:4164]) {
		t.Error("WRITE data differs")
	}
	wantWC(t, "recv", s.sink.recv, WC{ID: 1, Opcode: WCRecv})
	if !bytes.Equal(s.rbuf[:100], s.payload[4000:4100]) {
		t.Error("SEND data differs")
	}
	if s.st.out != 0 {
		t.Errorf("%d stash buffers not returned", s.st.out)
	}
}

func TestResponderKeepsRequestsPastGap(t *testing.T) {
	s := newStashNode(t, 8, false)
	s.deliver(t, 10, 12)
	wantAck(t, s.out.take(), 11, bth.SyndromePSNSeqErr, 0)
	// A WRITE_MIDDLE goes to its place at once; nothing is kept for it.
	if !bytes.Equal(s.wbuf[2048:3072], s.payload[2048:3072]) || s.st.out != 0 {
		t.Fatalf("WRITE_MIDDLE past the gap not placed (%d buffers out)", s.st.out)
	}
	// The rest is kept, the WRITE's last bytes with it.
	s.deliver(t, 13, 14, 15)
	s.wantNothing(t)
	if s.st.out != 3 || !bytes.Equal(s.wbuf[3072:4000], make([]byte, 928)) || len(s.sink.recv) != 0 {
		t.Fatalf("%d buffers out, WRITE_LAST executed early or receive completed", s.st.out)
	}
	// A copy of a kept request (a loss probe) draws the NAK again and
	// keeps nothing more.
	s.deliver(t, 14)
	wantAck(t, s.out.take(), 11, bth.SyndromePSNSeqErr, 0)
	if s.st.out != 3 {
		t.Fatalf("%d buffers out after a copy", s.st.out)
	}
	// 11 arrives: everything runs, in order, but the ACK names 11
	// only: the requester has not sent the rest again.
	s.deliver(t, 11)
	wantAck(t, s.out.take(), 11, bth.ACKSyndrome(0), 3)
	s.checkAll(t)
	// A go-back-N requester sends them again: each duplicate is
	// acknowledged as far as it goes.
	s.deliver(t, 12)
	wantAck(t, s.out.take(), 12, bth.ACKSyndrome(0), 3)
	// A gentle requester probes with its last packet: the ACK covers
	// everything.
	s.deliver(t, 15)
	wantAck(t, s.out.take(), 15, bth.ACKSyndrome(0), 3)
	if c := s.qp.Counters(); c.OutOfSequence != 5 || c.PacketSeqErr != 2 || c.DuplicateRequest != 2 {
		t.Errorf("counters %+v", *c)
	}
	// The next requests go on in order.
	s.qp.Receive(0, req(t, bth.OpWriteOnly, 16, true, nil, reth(0x10000, s.wkey, 0)))
	wantAck(t, s.out.take(), 16, bth.ACKSyndrome(0), 4)
}

func TestResponderNAKsNextGapOnNextRequest(t *testing.T) {
	s := newStashNode(t, 8, false)
	s.deliver(t, 10, 12, 14, 15)
	wantAck(t, s.out.take(), 11, bth.SyndromePSNSeqErr, 0)
	// 11 fills the first gap and 12 runs; 13 is missing too. The next
	// request past it (the probe) draws its NAK.
	s.deliver(t, 11)
	wantAck(t, s.out.take(), 11, bth.ACKSyndrome(1), 0)
	s.deliver(t, 15)
	wantAck(t, s.out.take(), 13, bth.SyndromePSNSeqErr, 0)
	s.deliver(t, 13)
	wantAck(t, s.out.take(), 13, bth.ACKSyndrome(0), 3)
	s.deliver(t, 15)
	wantAck(t, s.out.take(), 15, bth.ACKSyndrome(0), 3)
	s.checkAll(t)
}

// Without a free buffer, requests past a gap are dropped as without a
// stash; the requester sends them again.
func TestResponderStashFull(t *testing.T) {
	s := newStashNode(t, 1, false)
	s.deliver(t, 10, 12, 13, 14, 15) // 12 placed, 13 kept, 14 and 15 dropped
	wantAck(t, s.out.take(), 11, bth.SyndromePSNSeqErr, 0)
	if s.st.out != 1 {
		t.Fatalf("%d buffers out", s.st.out)
	}
	s.deliver(t, 11)
	wantAck(t, s.out.take(), 11, bth.ACKSyndrome(1), 1)
	s.deliver(t, 14, 15)
	if ps := s.out.take(); len(ps) != 2 {
		t.Fatalf("answers %v", describe(ps))
	}
	s.checkAll(t)
}

func TestResponderStashReleased(t *testing.T) {
	for _, how := range []string{"error", "reset", "release"} {
		s := newStashNode(t, 8, false)
		s.deliver(t, 10, 13, 14)
		if s.st.out != 2 {
			t.Fatalf("%s: %d buffers out", how, s.st.out)
		}
		var err error
		switch how {
		case "error":
			err = s.qp.Modify(0, &Attr{State: StateErr}, AttrState)
		case "reset":
			err = s.qp.Modify(0, &Attr{State: StateReset}, AttrState)
		case "release":
			s.qp.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.st.out != 0 {
			t.Errorf("%s: %d buffers not returned", how, s.st.out)
		}
	}
}

// A kept SEND finds no receive when its turn comes: RNR NAK, and what
// was kept after it is dropped (the requester goes back to it).
func TestResponderReplayRNR(t *testing.T) {
	s := newStashNode(t, 8, true)
	s.deliver(t, 10, 12, 13, 14, 15)
	s.out.take()
	s.deliver(t, 11)
	wantAck(t, s.out.take(), 14, bth.RNRSyndrome(12), 1)
	if s.st.out != 0 || !bytes.Equal(s.wbuf[:4000], s.payload[:4000]) {
		t.Fatalf("%d buffers out; WRITE before the SEND not complete", s.st.out)
	}
	if c := s.qp.Counters(); c.SendRNRErr != 1 {
		t.Errorf("counters %+v", *c)
	}
}

// A WRITE_MIDDLE placed on the word of a WRITE_FIRST is checked when its
// turn comes: a retransmitted FIRST for another target makes it an
// invalid request.
func TestResponderPlacedMiddleChecked(t *testing.T) {
	s := newStashNode(t, 0, false) // no buffers: the FIRST is not kept
	_, other := s.buf(8192, 0x40000, 0)
	s.qp.Receive(0, req(t, bth.OpWriteOnly, 10, false, nil, reth(0x10000, s.wkey, 0)))
	s.qp.Receive(0, req(t, bth.OpWriteFirst, 12, false, s.payload[:1024], reth(0x10000, s.wkey, 3000)))
	s.qp.Receive(0, req(t, bth.OpWriteMiddle, 13, false, s.payload[1024:2048], nil))
	wantAck(t, s.out.take(), 11, bth.SyndromePSNSeqErr, 1)
	// 11 arrives; 12 was not kept, and the requester goes back to it.
	s.qp.Receive(0, req(t, bth.OpSendOnly, 11, false, nil, nil))
	s.wantNothing(t)
	s.qp.Receive(0, req(t, bth.OpWriteFirst, 12, false, s.payload[:1024], reth(0x40000, other, 3000)))
	wantAck(t, s.out.take(), 13, bth.SyndromeInvalidReq, 2)
	if s.qp.State() != StateErr {
		t.Errorf("state %s", s.qp.State())
	}
}

func TestGentleGoBack(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(16*1024, 0x10000, 1)
	n.post(t, writeWR(1, 8*1024, key))
	n.qp.Pump(0)
	n.out.take()
	// The NAKed packet, then the last one (the probe), both with the A
	// bit; then nothing. A copy of the NAK changes nothing.
	n.qp.Receive(1, ackPkt(t, 3, bth.SyndromePSNSeqErr, 0))
	n.qp.Receive(1, ackPkt(t, 3, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(1)
	wantPkts(t, n.out.take(), pkt{bth.OpWriteMiddle, 3, true, 1024}, pkt{bth.OpWriteLast, 7, true, 1024})
	if n.qp.Busy() {
		t.Error("busy while the resent packets are unacknowledged")
	}
	// The ACK of the resent packet alone: the probe's answer is awaited.
	n.qp.Receive(2, ackPkt(t, 3, bth.SyndromeACKNoCredits, 0))
	n.qp.Pump(2)
	if ps := n.out.take(); len(ps) != 0 || n.qp.Busy() {
		t.Fatalf("sent %v after the ACK of the resent packet", describe(ps))
	}
	// The responder kept 4-7: the probe's ACK covers them.
	n.qp.Receive(3, ackPkt(t, 7, bth.SyndromeACKNoCredits, 1))
	wantWC(t, "write", n.sink.send, WC{ID: 1, Opcode: WCRDMAWrite})
	n.qp.Pump(3)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent %v after the ACK", describe(ps))
	}
	if c := n.qp.Counters(); c.RetransmittedPkts != 2 || c.CompleterRetryErr != 1 {
		t.Errorf("counters %+v", *c)
	}
	// The next loss goes the same way.
	n.post(t, writeWR(2, 8*1024, key))
	n.qp.Pump(4)
	n.out.take()
	n.qp.Receive(5, ackPkt(t, 10, bth.SyndromePSNSeqErr, 1))
	n.qp.Pump(5)
	wantPkts(t, n.out.take(), pkt{bth.OpWriteMiddle, 10, true, 1024}, pkt{bth.OpWriteLast, 15, true, 1024})
}

// A responder that drops what follows a gap acknowledges the resent
// packet and NAKs the next for the probe: go-back-N goes on from there.
// After gentleMisses such answers the requester goes back plainly at
// once, and tries the gentle way again every gentleRetest go-backs.
func TestGentleGoBackLearnsDroppingResponder(t *testing.T) {
	n := single(t, Caps{InfiniteRetry7: true}, defaultConn())
	_, key := n.buf(48*1024, 0x10000, 1)
	n.post(t, writeWR(1, 48*1024, key)) // PSNs 0-47: the first window
	n.qp.Pump(0)
	n.out.take()
	now := Time(1)
	at := func() Time { now++; return now }
	for miss := 0; miss < gentleMisses; miss++ {
		lost := bth.PSN(3 + 10*miss)
		n.qp.Receive(at(), ackPkt(t, lost, bth.SyndromePSNSeqErr, 0))
		n.qp.Pump(now)
		wantPkts(t, n.out.take(), pkt{bth.OpWriteMiddle, lost, true, 1024}, pkt{bth.OpWriteLast, 47, true, 1024})
		n.qp.Receive(at(), ackPkt(t, lost, bth.SyndromeACKNoCredits, 0))
		n.qp.Receive(at(), ackPkt(t, lost+1, bth.SyndromePSNSeqErr, 0))
		n.qp.Pump(now)
		all, _ := psns(n.out.take())
		if len(all) != int(47-lost) || all[0] != lost+1 {
			t.Fatalf("miss %d: go-back-N sent %v", miss, all)
		}
	}
	// Known to drop: the next loss is resent plainly at once.
	n.qp.Receive(at(), ackPkt(t, 40, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(now)
	if all, _ := psns(n.out.take()); len(all) != 8 || all[0] != 40 {
		t.Fatalf("plain go-back-N sent %v", all)
	}
	// Every gentleRetest go-backs it tries again.
	for i := 1; i < gentleRetest; i++ {
		n.qp.Receive(at(), ackPkt(t, 41, bth.SyndromePSNSeqErr, 0))
		n.qp.Pump(now)
		if got := len(n.out.take()); got != 7 && i < gentleRetest-1 {
			t.Fatalf("go-back %d sent %d packets", i, got)
		}
	}
	if !n.qp.gentle.on {
		t.Error("no gentle go-back after gentleRetest go-backs")
	}
}

// A lost READ request is sent again once, gently: a responder executes
// a duplicate READ again.
func TestGentleGoBackRead(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(4096, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, SG: []SGE{{Addr: 0x10000, Length: 2048, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.post(t, writeWR(2, 1024, key))
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(1, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(1)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 0, true, 0})
}

// FuzzStashOrder delivers the stash node's six requests (PSNs 10-15) in
// an arbitrary order, with losses and duplicates, then once more in
// order as a go-back-N requester would. Whatever the order: no ACK names
// a PSN that was not received in sequence or as a duplicate (the ACK
// limit), nothing is NAKed but sequence errors, every request takes
// effect exactly once with the right bytes, and every stash buffer comes
// back.
func FuzzStashOrder(f *testing.F) {
	f.Add(uint8(8), []byte{0, 2, 3, 4, 5, 1})
	f.Add(uint8(1), []byte{0, 2, 4, 5, 1, 3, 5})
	f.Add(uint8(8), []byte{5, 4, 3, 2, 1, 0, 0, 1})
	f.Add(uint8(0), []byte{1, 1, 2})
	f.Fuzz(func(t *testing.T, max uint8, order []byte) {
		if len(order) > 64 {
			order = order[:64]
		}
		s := newStashNode(t, int(max%10), false)
		eligible := bth.PSN(9) // the highest PSN received in sequence or as a duplicate
		deliver := func(psn bth.PSN) {
			if psn.LessEq(s.qp.ePSN) && eligible.Less(psn) {
				eligible = psn
			}
			s.deliver(t, psn)
			for _, p := range s.out.take() {
				if p.Opcode() != bth.OpAck {
					t.Fatalf("after %d: sent %v", psn, describe([]*bth.Packet{p}))
				}
				syn := p.AETH().Syndrome()
				switch {
				case syn.Kind() == bth.AckKindACK:
					if got := p.BTH().PSN(); eligible.Less(got) {
						t.Fatalf("after %d: ACK %d, but only %d was received in sequence", psn, got, eligible)
					}
				case syn != bth.SyndromePSNSeqErr:
					t.Fatalf("after %d: syndrome %#x", psn, uint8(syn))
				}
			}
			if s.qp.State() == StateErr {
				t.Fatalf("after %d: state %s", psn, s.qp.State())
			}
		}
		for _, b := range order {
			deliver(bth.PSN(10 + b%6))
		}
		for psn := bth.PSN(10); psn <= 15; psn++ {
			deliver(psn)
		}
		s.checkAll(t)
	})
}
