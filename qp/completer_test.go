package qp

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// sends posts count signaled one-packet SENDs with IDs 1..count.
func sends(t *testing.T, n *node, count int) {
	t.Helper()
	_, key := n.buf(64, 0x10000, 1)
	for i := 1; i <= count; i++ {
		n.post(t, SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 64, LKey: key}}})
	}
}

func TestCoalescedAck(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 10
	n := single(t, Caps{}, o)
	sends(t, n, 3)
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(0, ackPkt(t, 12, bth.SyndromeACKNoCredits, 3))
	wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2}, WC{ID: 3})
	// Duplicate and bogus ACKs change nothing.
	n.qp.Receive(0, ackPkt(t, 12, bth.SyndromeACKNoCredits, 3))
	n.qp.Receive(0, ackPkt(t, 40, bth.SyndromeACKNoCredits, 3))
	if len(n.sink.send) != 3 || n.qp.State() != StateRTS {
		t.Fatalf("after stale acks: %+v, %s", n.sink.send, n.qp.State())
	}
	if _, ok := n.qp.Deadline(); ok {
		t.Error("timer armed with nothing outstanding")
	}
}

func TestPartialAckOfLongMessage(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(5000, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 5000, LKey: key}}})
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(100, ackPkt(t, 2, bth.SyndromeACKNoCredits, 0))
	if len(n.sink.send) != 0 {
		t.Fatal("completed on a partial ACK")
	}
	if d, _ := n.qp.Deadline(); d != 100+ackTimeoutDur(14) {
		t.Errorf("timer not restarted on progress: %v", d)
	}
	// A timeout now resends from PSN 3 only.
	n.qp.Tick(100 + ackTimeoutDur(14))
	n.qp.Pump(100 + ackTimeoutDur(14))
	wantPkts(t, n.out.take(), pkt{bth.OpSendMiddle, 3, false, 1024}, pkt{bth.OpSendLast, 4, true, 904})
}

func TestNAKSequenceErrorGoBackN(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 100
	n := single(t, Caps{}, o)
	n.dropsPastGap()
	sends(t, n, 4)
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(0, ackPkt(t, 101, bth.SyndromePSNSeqErr, 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 101, true, 64}, pkt{bth.OpSendOnly, 102, true, 64}, pkt{bth.OpSendOnly, 103, true, 64})
	c := n.qp.Counters()
	if c.RcvdSeqErr != 1 || c.RetransmittedPkts != 3 || c.ImpliedNakSeqErr != 0 {
		t.Errorf("counters %+v", *c)
	}
	n.qp.Receive(0, ackPkt(t, 103, bth.SyndromeACKNoCredits, 4))
	wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2}, WC{ID: 3}, WC{ID: 4})
}

func TestSequenceNAKCopyAndRetryExhaustion(t *testing.T) {
	o := defaultConn()
	o.retry = 2
	n := single(t, Caps{}, o)
	n.dropsPastGap()
	sends(t, n, 2)
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(5, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(5)
	if got := len(n.out.take()); got != 2 {
		t.Fatalf("go-back-N sent %d packets", got)
	}
	// A repeated NAK (a responder's repeat, or a duplicate on the way),
	// arriving with the first, starts no second go-back and charges no
	// retry.
	n.qp.Receive(5, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(5)
	if got := len(n.out.take()); got != 0 {
		t.Fatalf("NAK copy resent %d packets", got)
	}
	if c := n.qp.Counters(); c.RcvdSeqErr != 2 || c.CompleterRetryErr != 1 {
		t.Errorf("counters %+v", *c)
	}
	// A NAK for the same PSN an ACK timeout later answers the
	// retransmission: it was lost too. Go back again; that is the last
	// retry.
	later := 5 + ackTimeoutDur(o.timeout)
	n.qp.Receive(later, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(later)
	if got := len(n.out.take()); got != 2 {
		t.Fatalf("second go-back-N sent %d packets", got)
	}
	if c := n.qp.Counters(); c.CompleterRetryErr != 2 {
		t.Errorf("counters %+v", *c)
	}
	// Timeouts retry as well, and the counter has run out.
	d, _ := n.qp.Deadline()
	n.qp.Tick(d)
	wantWC(t, "send", n.sink.send, WC{ID: 1, Status: WCRetryExcErr}, WC{ID: 2, Status: WCWRFlushErr})
	if n.qp.State() != StateErr || n.qp.Counters().RetryExceededErr != 1 {
		t.Errorf("state %s counters %+v", n.qp.State(), *n.qp.Counters())
	}
}

func TestSequenceNAKAfterProgressRetriesAgain(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	n.dropsPastGap()
	sends(t, n, 4)
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(0, ackPkt(t, 1, bth.SyndromePSNSeqErr, 1))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 1, true, 64}, pkt{bth.OpSendOnly, 2, true, 64}, pkt{bth.OpSendOnly, 3, true, 64})
	// PSN 1 arrived, 2 was lost again: the NAK for 2 acknowledges 1, so
	// it is a new loss.
	n.qp.Receive(0, ackPkt(t, 2, bth.SyndromePSNSeqErr, 2))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 2, true, 64}, pkt{bth.OpSendOnly, 3, true, 64})
	wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2})
}

func TestAckTimeout(t *testing.T) {
	o := defaultConn()
	o.timeout, o.retry = 10, 3
	n := single(t, Caps{}, o)
	sends(t, n, 2)
	start := Time(time.Second)
	n.qp.Pump(start)
	n.out.take()
	to := time.Duration(4096<<10) * time.Nanosecond // 4.096 µs × 2^10
	now := start
	for i := 0; i < 3; i++ {
		d, ok := n.qp.Deadline()
		if !ok || d != now+to {
			t.Fatalf("retry %d: deadline %v %v, want %v", i, d, ok, now+to)
		}
		n.qp.Tick(d - 1)
		n.qp.Pump(d - 1)
		if ps := n.out.take(); len(ps) != 0 {
			t.Fatalf("retransmitted before the timeout: %v", describe(ps))
		}
		now = d
		n.qp.Tick(now)
		n.qp.Pump(now)
		wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 0, true, 64}, pkt{bth.OpSendOnly, 1, true, 64})
	}
	if c := n.qp.Counters(); c.LocalAckTimeoutErr != 3 || c.RetransmittedPkts != 6 {
		t.Errorf("counters %+v", *c)
	}
	d, _ := n.qp.Deadline()
	n.qp.Tick(d)
	wantWC(t, "send", n.sink.send, WC{ID: 1, Status: WCRetryExcErr}, WC{ID: 2, Status: WCWRFlushErr})
	if n.qp.State() != StateErr || n.qp.Counters().RetryExceededErr != 1 {
		t.Errorf("state %s", n.qp.State())
	}
}

func TestAckTimeoutZeroIsInfinite(t *testing.T) {
	o := defaultConn()
	o.timeout = 0
	n := single(t, Caps{}, o)
	sends(t, n, 1)
	n.qp.Pump(0)
	if _, ok := n.qp.Deadline(); ok {
		t.Fatal("timer armed with timeout 0")
	}
}

func TestRetryCount7(t *testing.T) {
	for _, inf := range []bool{false, true} {
		o := defaultConn()
		o.timeout, o.retry = 1, 7
		n := single(t, Caps{InfiniteRetry7: inf}, o)
		sends(t, n, 1)
		n.qp.Pump(0)
		timeouts := 0
		for i := 0; i < 20 && n.qp.State() == StateRTS; i++ {
			d, ok := n.qp.Deadline()
			if !ok {
				t.Fatal("no timer")
			}
			n.qp.Tick(d)
			n.qp.Pump(d)
			timeouts++
		}
		if inf && (n.qp.State() != StateRTS || timeouts != 20) {
			t.Errorf("InfiniteRetry7: gave up after %d timeouts", timeouts)
		}
		if !inf && (n.qp.State() != StateErr || timeouts != 8) {
			t.Errorf("retry_cnt 7: state %s after %d timeouts, want ERR after 8", n.qp.State(), timeouts)
		}
	}
}

func TestRNRNak(t *testing.T) {
	o := defaultConn()
	o.rnrRetry = 2
	n := single(t, Caps{}, o)
	sends(t, n, 3)
	n.qp.Pump(0)
	n.out.take()
	// The responder had no receive for PSN 1: timer code 5 is 60 µs.
	n.qp.Receive(0, ackPkt(t, 1, bth.RNRSyndrome(5), 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1})
	if n.qp.Busy() {
		t.Error("busy during the RNR wait")
	}
	d, ok := n.qp.Deadline()
	if !ok || d != 60*time.Microsecond {
		t.Fatalf("deadline %v %v, want 60µs", d, ok)
	}
	n.qp.Pump(d - 1)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent during the RNR wait: %v", describe(ps))
	}
	// A sequence NAK for the same PSN does not cut the wait short.
	n.qp.Receive(d-1, ackPkt(t, 1, bth.SyndromePSNSeqErr, 1))
	n.qp.Pump(d - 1)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent during the RNR wait: %v", describe(ps))
	}
	n.qp.Tick(d)
	n.qp.Pump(d)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 1, true, 64}, pkt{bth.OpSendOnly, 2, true, 64})
	// Two more RNR NAKs without progress exhaust rnr_retry 2.
	n.qp.Receive(d, ackPkt(t, 1, bth.RNRSyndrome(1), 1))
	n.qp.Tick(d + 10*time.Microsecond)
	n.qp.Pump(d + 10*time.Microsecond)
	n.out.take()
	n.qp.Receive(d, ackPkt(t, 1, bth.RNRSyndrome(1), 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2, Status: WCRNRRetryExcErr}, WC{ID: 3, Status: WCWRFlushErr})
	if c := n.qp.Counters(); c.RcvdRNRErr != 3 || c.RNRNakRetryErr != 1 || n.qp.State() != StateErr {
		t.Errorf("state %s counters %+v", n.qp.State(), *c)
	}
}

func TestRNRRetry7IsInfinite(t *testing.T) {
	n := single(t, Caps{}, defaultConn()) // rnr_retry 7
	sends(t, n, 1)
	n.qp.Pump(0)
	n.out.take()
	now := Time(0)
	for i := 0; i < 30; i++ {
		n.qp.Receive(now, ackPkt(t, 0, bth.RNRSyndrome(0), 0))
		d, _ := n.qp.Deadline()
		if d != now+655360*time.Microsecond {
			t.Fatalf("rnr timer code 0: deadline %v", d-now)
		}
		now = d
		n.qp.Tick(now)
		n.qp.Pump(now)
		if len(n.out.take()) != 1 {
			t.Fatal("no retransmission after the RNR wait")
		}
	}
	if n.qp.State() != StateRTS {
		t.Fatalf("state %s", n.qp.State())
	}
}

func TestImpliedNAKOnReadResponseGap(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 200
	n := single(t, Caps{}, o)
	local, key := n.buf(3000, 0x10000, 0)
	clear(local)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.qp.Pump(0)
	n.out.take()
	remote := make([]byte, 3000)
	pattern(remote, 9)
	first := hdr(bth.OpReadRespFirst, 200)
	n.qp.Receive(0, craft(t, first, remote[:1024]))
	// The MIDDLE (201) is lost: the LAST implies a NAK.
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespLast, 202), remote[2048:]))
	n.qp.Pump(0)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRequest, 201, true, 0})
	if r := ps[0].RETH(); r.VA() != 0x70000+1024 || r.DMALen() != 3000-1024 || r.RKey() != 9 {
		t.Errorf("re-request RETH va %#x len %d", r.VA(), r.DMALen())
	}
	if c := n.qp.Counters(); c.ImpliedNakSeqErr != 1 || c.RetransmittedPkts != 1 {
		t.Errorf("counters %+v", *c)
	}
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespFirst, 201), remote[1024:2048]))
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespLast, 202), remote[2048:]))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	if string(local) != string(remote) {
		t.Error("read data differs")
	}
}

func TestImpliedNAKOnAckPastRead(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(100, 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 8, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.post(t, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 8, LKey: key}}})
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(0, ackPkt(t, 1, bth.SyndromeACKNoCredits, 2))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 0, true, 0}, pkt{bth.OpSendOnly, 1, true, 8})
	if len(n.sink.send) != 0 || n.qp.Counters().ImpliedNakSeqErr != 1 {
		t.Fatalf("completions %+v counters %+v", n.sink.send, *n.qp.Counters())
	}
}

func TestErrorNAKs(t *testing.T) {
	cases := []struct {
		code uint8
		st   WCStatus
		ctr  func(*Counters) uint64
	}{
		{bth.NAKInvalidRequest, WCRemInvReqErr, func(c *Counters) uint64 { return c.ReqRemoteInvalidReq }},
		{bth.NAKRemoteAccessError, WCRemAccessErr, func(c *Counters) uint64 { return c.ReqRemoteAccessErrs }},
		{bth.NAKRemoteOpError, WCRemOpErr, func(c *Counters) uint64 { return 1 }},
	}
	for _, c := range cases {
		n := single(t, Caps{}, defaultConn())
		sends(t, n, 3)
		n.qp.Pump(0)
		n.out.take()
		n.qp.Receive(0, ackPkt(t, 1, bth.NAKSyndrome(c.code), 1))
		wantWC(t, "send", n.sink.send, WC{ID: 1}, WC{ID: 2, Status: c.st}, WC{ID: 3, Status: WCWRFlushErr})
		if n.qp.State() != StateErr || c.ctr(n.qp.Counters()) != 1 {
			t.Errorf("code %d: state %s counters %+v", c.code, n.qp.State(), *n.qp.Counters())
		}
	}
}

func TestAtomicAck(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, key := n.buf(16, 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRCompareSwap, Flags: SendSignaled, SG: []SGE{{Addr: 0x10008, Length: 8, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.qp.Pump(0)
	n.out.take()
	h := hdr(bth.OpAtomicAck, 0)
	h.AtomicAckOrig = 0x0102030405060708
	n.qp.Receive(0, craft(t, h, nil))
	wantWC(t, "atomic", n.sink.send, WC{ID: 1, Opcode: WCCompSwap})
	if got := binary.NativeEndian.Uint64(local[8:]); got != 0x0102030405060708 {
		t.Errorf("result %#x", got)
	}
	if n.qp.Busy() {
		t.Error("busy")
	}
}

func TestBadReadResponse(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(3000, 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 2000, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.qp.Pump(0)
	n.out.take()
	// ONLY where FIRST is expected.
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespOnly, 0), make([]byte, 1024)))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Status: WCBadRespErr, Opcode: WCRDMARead})
}

func TestReadTimeoutResendsRemainder(t *testing.T) {
	o := defaultConn()
	o.mtu = MTU256
	n := single(t, Caps{}, o)
	_, key := n.buf(1000, 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 1000, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespFirst, 0), make([]byte, 256)))
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespMiddle, 1), make([]byte, 256)))
	d, _ := n.qp.Deadline()
	n.qp.Tick(d)
	n.qp.Pump(d)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRequest, 2, true, 0})
	if r := ps[0].RETH(); r.VA() != 0x70000+512 || r.DMALen() != 1000-512 {
		t.Errorf("RETH va %#x len %d", r.VA(), r.DMALen())
	}
	if c := n.qp.Counters(); c.LocalAckTimeoutErr != 1 {
		t.Errorf("counters %+v", *c)
	}
}

func TestSharedCounters(t *testing.T) {
	c := &Counters{}
	env := Env{Mem: &fakeMem{}, Out: &recOut{t: t}, Sink: &recSink{}, Counters: c}
	q, err := New(Caps{Type: RC, QPN: 5, MaxSendWR: 1}, env)
	if err != nil {
		t.Fatal(err)
	}
	if q.Counters() != c {
		t.Fatal("Counters does not return the shared block")
	}
}
