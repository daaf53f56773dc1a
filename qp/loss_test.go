package qp

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// Loss recovery: the send window, the A-bit cadence, loss probes and
// the responder's NAKs, with crafted packets and with two QPs whose
// packets are dropped one by one.

// writeWR is a signaled WRITE of n bytes from the node's buffer at 0x10000.
func writeWR(id uint64, n uint32, key uint32) SendWR {
	return SendWR{ID: id, Opcode: WRWrite, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: n, LKey: key}},
		RemoteAddr: 0x90000, RKey: 5}
}

// psns returns the PSNs of ps and the PSNs of those with the A bit.
func psns(ps []*bth.Packet) (all, acked []bth.PSN) {
	for _, p := range ps {
		all = append(all, p.BTH().PSN())
		if p.BTH().AckReq() {
			acked = append(acked, p.BTH().PSN())
		}
	}
	return all, acked
}

func wantPSNs(t *testing.T, what string, got []bth.PSN, want ...bth.PSN) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: PSNs %v, want %v", what, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: PSNs %v, want %v", what, got, want)
		}
	}
}

func TestSendWindow(t *testing.T) {
	n := single(t, Caps{SendWindow: 8 << 10}, defaultConn()) // 8 packets at MTU 1024
	_, key := n.buf(20*1024, 0x10000, 1)
	n.post(t, writeWR(1, 20*1024, key))
	n.qp.Pump(0)
	// Eight packets fill the window; the A bit every quarter window (2
	// packets) and on the packet that fills it.
	all, acked := psns(n.out.take())
	wantPSNs(t, "first burst", all, 0, 1, 2, 3, 4, 5, 6, 7)
	wantPSNs(t, "first burst A bits", acked, 1, 3, 5, 7)
	if n.qp.Busy() {
		t.Error("busy with a full window")
	}
	// An ACK for 3 opens four places.
	n.qp.Receive(1, ackPkt(t, 3, bth.SyndromeACKNoCredits, 0))
	if !n.qp.Busy() {
		t.Error("not busy after the window opened")
	}
	n.qp.Pump(1)
	all, acked = psns(n.out.take())
	wantPSNs(t, "second burst", all, 8, 9, 10, 11)
	wantPSNs(t, "second burst A bits", acked, 9, 11)
	n.qp.Receive(2, ackPkt(t, 11, bth.SyndromeACKNoCredits, 0))
	n.qp.Pump(2)
	all, acked = psns(n.out.take())
	wantPSNs(t, "third burst", all, 12, 13, 14, 15, 16, 17, 18, 19)
	wantPSNs(t, "third burst A bits", acked, 13, 15, 17, 19)
	n.qp.Receive(3, ackPkt(t, 19, bth.SyndromeACKNoCredits, 1))
	wantWC(t, "write", n.sink.send, WC{ID: 1, Opcode: WCRDMAWrite})
	if c := n.qp.Counters(); c.SentPkts != 20 || c.RetransmittedPkts != 0 {
		t.Errorf("counters %+v", *c)
	}
}

func TestDefaultAndUnboundedSendWindow(t *testing.T) {
	for _, c := range []struct {
		win, sent int
		acks      []bth.PSN
	}{
		// At MTU 256 a packet counts as 1 KiB: 48 of them, the A bit on
		// every twelfth.
		{0, DefaultSendWindow >> 10, []bth.PSN{11, 23, 35, 47}},
		{-1, 100, []bth.PSN{63, 99}},
	} {
		o := defaultConn()
		o.mtu = MTU256
		n := single(t, Caps{SendWindow: c.win}, o)
		_, key := n.buf(100*256, 0x10000, 1)
		n.post(t, writeWR(1, 100*256, key))
		n.qp.Pump(0)
		all, acked := psns(n.out.take())
		if len(all) != c.sent {
			t.Errorf("window %d: %d packets sent, want %d", c.win, len(all), c.sent)
		}
		wantPSNs(t, "A bits", acked, c.acks...)
	}
}

// READ and atomic responses are not requests the window holds: a WRITE
// after a long READ goes out at once.
func TestSendWindowCountsNoReadResponses(t *testing.T) {
	n := single(t, Caps{SendWindow: 4 << 10}, defaultConn())
	_, key := n.buf(16*1024, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 16 * 1024, LKey: key}},
		RemoteAddr: 0x70000, RKey: 9})
	n.post(t, writeWR(2, 4*1024, key))
	n.post(t, writeWR(3, 2*1024, key))
	n.qp.Pump(0)
	all, _ := psns(n.out.take())
	wantPSNs(t, "READ and first WRITE", all, 0, 16, 17, 18, 19)
	// Half the READ's responses: still four WRITE packets in flight.
	remote := make([]byte, 16*1024)
	for k := 0; k < 16; k++ {
		op := bth.OpReadRespMiddle
		switch k {
		case 0:
			op = bth.OpReadRespFirst
		case 15:
			op = bth.OpReadRespLast
		}
		n.qp.Receive(1, craft(t, hdr(op, bth.PSN(k)), remote[k*1024:(k+1)*1024]))
		if k == 7 {
			n.qp.Pump(1)
			if ps := n.out.take(); len(ps) != 0 {
				t.Fatalf("sent %v with the window full", describe(ps))
			}
		}
	}
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	n.qp.Pump(1)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent %v with the window full", describe(ps))
	}
	n.qp.Receive(2, ackPkt(t, 17, bth.SyndromeACKNoCredits, 1))
	n.qp.Pump(2)
	all, _ = psns(n.out.take())
	wantPSNs(t, "second WRITE", all, 20, 21)
}

// rttOnce sends one SEND and acknowledges it rtt later, so that the QP
// has a round-trip estimate (srtt rtt, rttvar rtt/2). It returns the
// time of the ACK.
func rttOnce(t *testing.T, n *node, key uint32, psn bth.PSN, rtt time.Duration) Time {
	t.Helper()
	n.post(t, SendWR{ID: 100, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 64, LKey: key}}})
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(rtt, ackPkt(t, psn, bth.SyndromeACKNoCredits, 1))
	if _, ok := n.qp.Deadline(); ok {
		t.Fatal("timer armed with nothing outstanding")
	}
	return rtt
}

func TestLossProbe(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	n.dropsPastGap()
	_, key := n.buf(4096, 0x10000, 1)
	// No probe without a round-trip estimate: the ACK timer only.
	n.post(t, SendWR{ID: 1, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 64, LKey: key}}})
	n.qp.Pump(0)
	n.out.take()
	if d, _ := n.qp.Deadline(); d != ackTimeoutDur(14) {
		t.Fatalf("deadline %v without an RTT estimate, want the ACK timeout", d)
	}
	n.qp.Receive(20*time.Microsecond, ackPkt(t, 0, bth.SyndromeACKNoCredits, 1))
	// srtt 20 µs, rttvar 10 µs: the probe timeout is 20 + 2×10 = 40 µs.
	now := Time(100 * time.Microsecond)
	for id := uint64(2); id <= 4; id++ {
		n.post(t, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 2000, LKey: key}}})
	}
	n.qp.Pump(now)
	all, _ := psns(n.out.take())
	wantPSNs(t, "sends", all, 1, 2, 3, 4, 5, 6)
	d, ok := n.qp.Deadline()
	if !ok || d != now+40*time.Microsecond {
		t.Fatalf("probe deadline %v, want %v", d, now+40*time.Microsecond)
	}
	n.qp.Tick(d - 1)
	n.qp.Pump(d - 1)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("probe before its time: %v", describe(ps))
	}
	// The probe: the last packet again, with the A bit; no cursor moves,
	// no retry is charged.
	n.qp.Tick(d)
	if !n.qp.Busy() {
		t.Fatal("not busy with a probe due")
	}
	n.qp.Pump(d)
	wantPkts(t, n.out.take(), pkt{bth.OpSendLast, 6, true, 2000 - 1024})
	c := n.qp.Counters()
	if c.LossProbes != 1 || c.RetransmittedPkts != 1 || c.CompleterRetryErr != 0 || c.LocalAckTimeoutErr != 0 {
		t.Errorf("counters %+v", *c)
	}
	// Nothing answers: the next probe waits twice as long.
	d2, _ := n.qp.Deadline()
	if d2 != d+80*time.Microsecond {
		t.Fatalf("second probe at %v, want %v", d2-d, 80*time.Microsecond)
	}
	n.qp.Tick(d2)
	n.qp.Pump(d2)
	wantPkts(t, n.out.take(), pkt{bth.OpSendLast, 6, true, 2000 - 1024})
	// The responder misses PSN 3: its NAK sends everything from there.
	n.qp.Receive(d2+1, ackPkt(t, 3, bth.SyndromePSNSeqErr, 2))
	n.qp.Pump(d2 + 1)
	all, _ = psns(n.out.take())
	wantPSNs(t, "go-back-N after the probe", all, 3, 4, 5, 6)
	wantWC(t, "sends", n.sink.send, WC{ID: 2})
	// Progress resets the backoff: the probe is one timeout away again
	// (srtt has not moved: the go-back stopped the timing).
	n.qp.Receive(d2+2, ackPkt(t, 4, bth.SyndromeACKNoCredits, 3))
	if d3, _ := n.qp.Deadline(); d3 != d2+2+40*time.Microsecond {
		t.Fatalf("probe after progress at +%v, want 40µs", d3-d2-2)
	}
	n.qp.Receive(d2+3, ackPkt(t, 6, bth.SyndromeACKNoCredits, 4))
	wantWC(t, "sends", n.sink.send, WC{ID: 2}, WC{ID: 3}, WC{ID: 4})
	if _, ok := n.qp.Deadline(); ok {
		t.Error("timer armed with nothing outstanding")
	}
}

// A READ whose responses stop (its last ones lost, or the request) is
// requested again, for what is missing, when the probe timer fires: no
// retry is charged. An atomic is not probed (the ACK timeout covers it);
// the probe timer backs off all the same.
func TestLossProbeRead(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(4096, 0x10000, 1)
	rttOnce(t, n, key, 0, 20*time.Microsecond)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 4000, LKey: key}}, RemoteAddr: 0x70000, RKey: 9})
	now := Time(time.Millisecond)
	n.qp.Pump(now)
	n.out.take()
	probe := func() []*bth.Packet {
		t.Helper()
		d, ok := n.qp.Deadline()
		if !ok || d >= now+ackTimeoutDur(14) {
			t.Fatalf("no probe timer: %v", d)
		}
		now = d
		n.qp.Tick(now)
		n.qp.Pump(now)
		return n.out.take()
	}
	// Nothing came back: the whole READ again.
	ps := probe()
	wantPkts(t, ps, pkt{bth.OpReadRequest, 1, true, 0})
	// Three responses come, the last is lost: the rest is requested.
	remote := make([]byte, 4000)
	pattern(remote, 9)
	n.qp.Receive(now, craft(t, hdr(bth.OpReadRespFirst, 1), remote[:1024]))
	n.qp.Receive(now, craft(t, hdr(bth.OpReadRespMiddle, 2), remote[1024:2048]))
	n.qp.Receive(now, craft(t, hdr(bth.OpReadRespMiddle, 3), remote[2048:3072]))
	ps = probe()
	wantPkts(t, ps, pkt{bth.OpReadRequest, 4, true, 0})
	if r := ps[0].RETH(); r.VA() != 0x70000+3072 || r.DMALen() != 4000-3072 {
		t.Errorf("re-request RETH va %#x len %d", r.VA(), r.DMALen())
	}
	n.qp.Receive(now, craft(t, hdr(bth.OpReadRespLast, 4), remote[3072:]))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead, ByteLen: 4000})
	if c := n.qp.Counters(); c.LossProbes != 2 || c.CompleterRetryErr != 0 || c.LocalAckTimeoutErr != 0 {
		t.Errorf("counters %+v", *c)
	}

	// An atomic is not probed.
	n.post(t, SendWR{ID: 2, Opcode: WRFetchAdd, SG: []SGE{{Addr: 0x10000, Length: 8, LKey: key}}, RemoteAddr: 0x70000, RKey: 9, CompareAdd: 1})
	n.qp.Pump(now)
	n.out.take()
	d := now
	if ps := probe(); len(ps) != 0 {
		t.Fatalf("probed an atomic: %v", describe(ps))
	}
	if d2, _ := n.qp.Deadline(); d2 <= now || now <= d {
		t.Errorf("probe timer not re-armed: %v", d2)
	}
}

func TestResponderNAKsAgainWhenRequesterWentBack(t *testing.T) {
	n := respNode(t, 10)
	_, key := n.buf(4096, 0x10000, 0)
	for i := uint64(1); i <= 4; i++ {
		n.recv(t, i, 0x10000, 4096, key)
	}
	send := func(psn bth.PSN, ack bool) { n.qp.Receive(0, req(t, bth.OpSendOnly, psn, ack, []byte("x"), nil)) }
	send(12, true)
	wantAck(t, n.out.take(), 10, bth.SyndromePSNSeqErr, 0)
	// Increasing PSNs after the NAK are the same loss: dropped silently,
	// A bit or not.
	send(13, false)
	send(14, true)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("NAKed a later request again: %v", describe(ps))
	}
	// The requester probes: a request at the previous one's PSN while
	// 10 is still missing is NAKed again.
	send(14, true)
	wantAck(t, n.out.take(), 10, bth.SyndromePSNSeqErr, 0)
	// The requester went back, and 10 was lost again: the first request
	// below the previous one is NAKed, the following ones are not.
	send(11, false)
	wantAck(t, n.out.take(), 10, bth.SyndromePSNSeqErr, 0)
	send(12, true)
	send(13, false)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("NAKed without a step back: %v", describe(ps))
	}
	if c := n.qp.Counters(); c.PacketSeqErr != 3 || c.OutOfSequence != 7 {
		t.Errorf("counters %+v", *c)
	}
	// 10 arrives: the requests go on in order.
	send(10, false)
	send(11, true)
	wantAck(t, n.out.take(), 11, bth.ACKSyndrome(2), 2)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecv}, WC{ID: 2, Opcode: WCRecv})
}

// An RNR NAK shows that the responder got the request it names: lost
// retransmissions before it no longer count against retry_cnt.
func TestRNRNakResetsRetryCount(t *testing.T) {
	o := defaultConn()
	o.retry = 1
	n := single(t, Caps{}, o)
	sends(t, n, 2)
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(1, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(1)
	n.out.take()
	n.qp.Receive(2, ackPkt(t, 0, bth.RNRSyndrome(1), 0))
	n.qp.Tick(2 + 10*time.Microsecond)
	n.qp.Pump(2 + 10*time.Microsecond)
	n.out.take()
	// Another lost retransmission, an ACK timeout later (a sooner one
	// would be no charge: TestLostAgainChargedPerTimeout): one retry is
	// left again.
	later := 3 + 10*time.Microsecond + ackTimeoutDur(o.timeout)
	n.qp.Receive(later, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(later)
	if got := len(n.out.take()); got != 2 || n.qp.State() != StateRTS {
		t.Fatalf("%d packets resent, state %s", got, n.qp.State())
	}
	if c := n.qp.Counters(); c.CompleterRetryErr != 2 || c.RetryExceededErr != 0 {
		t.Errorf("counters %+v", *c)
	}
}

// lossyPair is a requester A and a responder B, with every packet
// between them passed by hand so that a test can lose the ones it
// chooses.
type lossyPair struct {
	t    *testing.T
	a, b *node
	now  Time
	data []byte
}

// newLossyPair connects A and B with send window win; with keep, B
// keeps requests past a gap (Env.Stash), lending from st.
func newLossyPair(t *testing.T, win int, keep bool) *lossyPair {
	o := defaultConn()
	a := newNode(t, Caps{Type: RC, QPN: localQPN, SendWindow: win})
	b := newNode(t, Caps{Type: RC, QPN: peerQPN, SendWindow: win})
	if keep {
		b.qp.stash = &testStash{max: 64}
	}
	connect(t, a.qp, addrA, addrB, peerQPN, o)
	connect(t, b.qp, addrB, addrA, localQPN, o)
	lp := &lossyPair{t: t, a: a, b: b}
	lp.data, _ = a.buf(64*1024, 0x10000, 7)                                       // key 1
	b.mem.reg(make([]byte, 64*1024), 0x90000, AccessLocalWrite|AccessRemoteWrite) // key 1
	return lp
}

// write posts a signaled WRITE of n packets (1 KiB each).
func (lp *lossyPair) write(id uint64, n int) { lp.writeAt(id, n, 0) }

// writeAt posts a signaled WRITE of n packets from and to offset off of
// the two buffers.
func (lp *lossyPair) writeAt(id uint64, n int, off uint64) {
	lp.a.post(lp.t, SendWR{ID: id, Opcode: WRWrite, Flags: SendSignaled,
		SG: []SGE{{Addr: 0x10000 + off, Length: uint32(n * 1024), LKey: 1}}, RemoteAddr: 0x90000 + off, RKey: 1})
}

// lossyStep is the time one step of a lossyPair takes: well below the
// shortest probe timeout (minProbe).
const lossyStep = 2 * time.Microsecond

// step moves time on by lossyStep: A sends what it may, B gets the requests
// drop lets through and answers, A gets the answers drop lets through.
// drop sees every packet with its direction (true: A to B).
func (lp *lossyPair) step(drop func(toB bool, p *bth.Packet) bool) (toB, toA []*bth.Packet) {
	lp.now += lossyStep
	lp.a.qp.Tick(lp.now)
	lp.a.qp.Pump(lp.now)
	for _, p := range lp.a.out.take() {
		toB = append(toB, p)
		if drop == nil || !drop(true, p) {
			lp.b.qp.Receive(lp.now, p)
		}
	}
	lp.b.qp.Pump(lp.now)
	for _, p := range lp.b.out.take() {
		toA = append(toA, p)
		if drop == nil || !drop(false, p) {
			lp.a.qp.Receive(lp.now, p)
		}
	}
	return toB, toA
}

// settle steps until A has nothing outstanding, jumping to A's next
// timer when nothing moves, and fails after max steps.
func (lp *lossyPair) settle(max int, drop func(toB bool, p *bth.Packet) bool) {
	for i := 0; i < max; i++ {
		toB, toA := lp.step(drop)
		if len(toB)+len(toA) > 0 {
			continue
		}
		d, ok := lp.a.qp.Deadline()
		if !ok {
			return
		}
		if d > lp.now {
			lp.now = d - lossyStep
		}
	}
	lp.t.Fatalf("not settled after %d steps", max)
}

// dropOnce loses the first packet of the given direction and PSN that
// satisfies is (nil: any).
func dropOnce(toB bool, psn bth.PSN, is func(p *bth.Packet) bool) func(bool, *bth.Packet) bool {
	done := false
	return func(dir bool, p *bth.Packet) bool {
		if done || dir != toB || p.BTH().PSN() != psn || (is != nil && !is(p)) {
			return false
		}
		done = true
		return true
	}
}

func isNAK(p *bth.Packet) bool {
	a := p.AETH()
	return p.Opcode() == bth.OpAck && a != nil && a.Syndrome() == bth.SyndromePSNSeqErr
}

// all drops a packet when one of fs drops it (the first that does
// counts it).
func all(fs ...func(bool, *bth.Packet) bool) func(bool, *bth.Packet) bool {
	return func(toB bool, p *bth.Packet) bool {
		for _, f := range fs {
			if f(toB, p) {
				return true
			}
		}
		return false
	}
}

// warm gives A a round-trip estimate with one WRITE.
func (lp *lossyPair) warm() {
	lp.write(99, 1)
	lp.settle(10, nil)
	lp.a.sink.send = nil
}

// dropN loses the first n packets A sends with PSN psn.
func dropN(psn bth.PSN, n int) func() func(bool, *bth.Packet) bool {
	return func() func(bool, *bth.Packet) bool {
		k := 0
		return func(toB bool, p *bth.Packet) bool {
			if toB && p.BTH().PSN() == psn && k < n {
				k++
				return true
			}
			return false
		}
	}
}

// TestRecoveryWithoutTimeout: A writes 12 packets (window 8, PSNs 1-12)
// to B, which drops the requests past a gap or keeps them (keep), and
// every kind of loss is recovered without the ACK timeout: every byte
// arrives, each WRITE is executed once, and what A sends again is
// bounded (see lossyRun). The comments tell how each case goes today.
func TestRecoveryWithoutTimeout(t *testing.T) {
	for _, c := range []struct {
		name    string
		drop    func() func(bool, *bth.Packet) bool
		goBackN bool // A knows B for a responder that drops (no gentle go-back)
	}{
		// B NAKs 3; A sends it again, then 8 (the probe); B
		// acknowledges 3 and NAKs 4, and A goes back to 4 (5 packets
		// again), or B acknowledges everything it kept for the probe.
		{"lost request", dropN(3, 1), false},
		// The NAK is lost: A fills its window (to 10) and waits; its
		// probe (10 again) draws the NAK again.
		{"lost NAK", func() func(bool, *bth.Packet) bool {
			return all(dropOnce(true, 3, nil), dropOnce(false, 3, isNAK))
		}, false},
		// The gentle retransmission of 3 is lost: its probe, 8 again,
		// draws a second NAK of 3, and the gentle go-back starts over.
		{"lost retransmission", dropN(3, 2), false},
		// Twice.
		{"lost retransmissions", dropN(3, 3), false},
		// Plain go-back-N (3-8 again, and 9-10), and its retransmission
		// of 3 lost: the first request below the highest B saw draws a
		// second NAK (3-10 again).
		{"lost go-back-N retransmission", dropN(3, 2), true},
		// The last packet is lost: nothing after it shows the gap.
		{"lost tail", dropN(12, 1), false},
		// The ACKs of the last requests are lost: the probe, a
		// duplicate, draws a new one.
		{"lost ACKs", func() func(bool, *bth.Packet) bool {
			isACK := func(p *bth.Packet) bool { return p.Opcode() == bth.OpAck && !isNAK(p) }
			return all(dropOnce(false, 10, isACK), dropOnce(false, 12, isACK))
		}, false},
	} {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keep=%v", c.name, keep), func(t *testing.T) {
				lossyRun(t, keep, c.goBackN, c.drop())
			})
		}
	}
}

// lossyRun has A write 12 packets to B in two WRITEs, losing what drop
// says, and checks that both complete without an ACK timeout, every byte
// written once, with resends bounded: a gentle go-back toward a
// responder that keeps requests sends at most two packets per loss (the
// NAKed one and a probe), go-back-N at most a send window and two per
// loss, and a loss probe only follows a loss.
func lossyRun(t *testing.T, keep, goBackN bool, drop func(bool, *bth.Packet) bool) {
	{
		{
			lp := newLossyPair(t, 8<<10, keep)
			if goBackN {
				lp.a.dropsPastGap()
			}
			lp.warm() // PSN 0
			lp.writeAt(1, 6, 0)
			lp.writeAt(2, 6, 6*1024)
			drops := uint64(0)
			counted := func(toB bool, p *bth.Packet) bool {
				if drop(toB, p) {
					drops++
					return true
				}
				return false
			}
			steps := 0
			for len(lp.a.sink.send) < 2 && steps < 100 {
				toB, toA := lp.step(counted)
				steps++
				if len(toB)+len(toA) == 0 {
					d, ok := lp.a.qp.Deadline()
					if !ok {
						t.Fatal("stuck with no timer")
					}
					lp.now = max(lp.now, d-lossyStep)
				}
			}
			wantWC(t, "writes", lp.a.sink.send, WC{ID: 1, Opcode: WCRDMAWrite}, WC{ID: 2, Opcode: WCRDMAWrite})
			ca := lp.a.qp.Counters()
			if ca.LocalAckTimeoutErr != 0 || lp.a.qp.State() != StateRTS {
				t.Errorf("state %s, counters %+v", lp.a.qp.State(), *ca)
			}
			const window = 8 // packets of 1 KiB
			bound := drops * (window + 2)
			if keep && !goBackN {
				bound = 2 * drops
			}
			if drops == 0 || ca.RetransmittedPkts > bound || ca.LossProbes > drops {
				t.Errorf("%d packets lost, %d sent again (at most %d), %d loss probes", drops, ca.RetransmittedPkts, bound, ca.LossProbes)
			}
			if b := lp.b.mem.regions[1].buf; !bytes.Equal(b[:12*1024], lp.data[:12*1024]) {
				t.Error("data differs")
			}
			// Three WRITEs executed (the warm-up and two), each once: a
			// WRITE run twice would count twice in the MSN.
			if msn := lp.b.qp.resp.msn; msn != 3 {
				t.Errorf("responder msn %d, want 3", msn)
			}
			if st, ok := lp.b.qp.stash.(*testStash); ok && st.out != 0 {
				t.Errorf("%d stash buffers not returned", st.out)
			}
		}
	}
}

// A NAK for the PSN already NAKed inside a multi-packet message
// acknowledges nothing new: it is no progress, and does not refill the
// retry counter.
func TestRepeatedNAKInsideMessageIsNoProgress(t *testing.T) {
	o := defaultConn()
	o.retry = 2
	n := single(t, Caps{}, o)
	n.dropsPastGap()
	_, key := n.buf(5*1024, 0x10000, 1)
	n.post(t, writeWR(1, 5*1024, key))
	n.qp.Pump(0)
	n.out.take()
	n.qp.Receive(1, ackPkt(t, 2, bth.SyndromePSNSeqErr, 0))
	n.qp.Receive(1, ackPkt(t, 2, bth.SyndromePSNSeqErr, 0)) // the copy
	n.qp.Pump(1)
	all, _ := psns(n.out.take())
	wantPSNs(t, "go-back-N", all, 2, 3, 4)
	// The retransmission of 2 was lost too, an ACK timeout later: the
	// last retry, charged although the NAK's PSN lies inside the WRITE.
	to := ackTimeoutDur(o.timeout)
	n.qp.Receive(5+to, ackPkt(t, 2, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(5 + to)
	all, _ = psns(n.out.take())
	wantPSNs(t, "second go-back-N", all, 2, 3, 4)
	// And again: the retry counter has run out.
	n.qp.Receive(9+2*to, ackPkt(t, 2, bth.SyndromePSNSeqErr, 0))
	wantWC(t, "write", n.sink.send, WC{ID: 1, Status: WCRetryExcErr, Opcode: WCRDMAWrite})
	if c := n.qp.Counters(); c.CompleterRetryErr != 2 || c.RetryExceededErr != 1 {
		t.Errorf("counters %+v", *c)
	}
}

// TestLostAgainChargedPerTimeout: a responder that NAKs every lost
// retransmission of the same PSN, a round trip apart, draws go-backs
// that cost retry_cnt at most once per ACK timeout: fifty of them within
// one timeout leave the QP in RTS with retries left (under congestion
// that keeps losing one packet, they would otherwise run out within a
// millisecond); spaced an ACK timeout apart, retry_cnt+1 of them end
// the work request.
func TestLostAgainChargedPerTimeout(t *testing.T) {
	o := defaultConn()
	o.retry = 2
	n := single(t, Caps{}, o)
	n.dropsPastGap()
	sends(t, n, 2)
	n.qp.Pump(0)
	n.out.take()
	to := ackTimeoutDur(o.timeout)
	now := Time(time.Millisecond)
	for i := 0; i < 50; i++ {
		n.qp.Receive(now, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
		n.qp.Pump(now)
		if got := len(n.out.take()); got == 0 || n.qp.State() != StateRTS {
			t.Fatalf("NAK %d: %d packets resent, state %s", i, got, n.qp.State())
		}
		now += 20 * time.Microsecond
	}
	if c := n.qp.Counters(); c.CompleterRetryErr != 1 || c.RcvdSeqErr != 50 {
		t.Fatalf("counters %+v", *c)
	}
	// An ACK timeout after the charge: the last retry.
	now = time.Millisecond + to
	n.qp.Receive(now, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(now)
	if c := n.qp.Counters(); c.CompleterRetryErr != 2 || n.qp.State() != StateRTS {
		t.Fatalf("a timeout later: state %s, counters %+v", n.qp.State(), *c)
	}
	n.qp.Receive(now+to, ackPkt(t, 0, bth.SyndromePSNSeqErr, 0))
	wantWC(t, "send", n.sink.send, WC{ID: 1, Status: WCRetryExcErr}, WC{ID: 2, Status: WCWRFlushErr})
}

// The default send window grows by 4 KiB for every window's worth
// acknowledged, up to maxSendWindow, and halves on a loss, down to
// DefaultSendWindow; a window given in Caps stays as it is.
func TestSendWindowAdapts(t *testing.T) {
	o := defaultConn()
	o.mtu = MTU4096
	n := single(t, Caps{MaxSendWR: 512}, o)
	n.dropsPastGap()
	_, key := n.buf(64<<10, 0x10000, 1)
	var psn bth.PSN
	now := Time(0)
	// burst posts count 4 KiB WRITEs, sends what the window allows and
	// acknowledges it all; it returns how many went out at once.
	burst := func(count int) int {
		for i := 0; i < count; i++ {
			n.post(t, writeWR(uint64(i), 4096, key))
		}
		now++
		n.qp.Pump(now)
		sent := len(n.out.take())
		for got := sent; ; {
			psn = psn.Add(got)
			now++
			n.qp.Receive(now, ackPkt(t, psn.Add(-1), bth.SyndromeACKNoCredits, 0))
			n.qp.Pump(now)
			if got = len(n.out.take()); got == 0 {
				break
			}
		}
		return sent
	}
	if got := burst(40); got != DefaultSendWindow/4096 {
		t.Fatalf("first burst %d packets, want %d", got, DefaultSendWindow/4096)
	}
	// 40 packets acknowledged: 160 KiB, three windows' worth or so.
	if w := n.qp.win.size; w <= DefaultSendWindow || w > DefaultSendWindow+4*winGrowUnit {
		t.Fatalf("window %d after 160 KiB acknowledged", w)
	}
	for i := 0; i < 40; i++ {
		burst(100)
	}
	if n.qp.win.size != maxSendWindow {
		t.Fatalf("window %d after 16 MiB acknowledged, want %d", n.qp.win.size, maxSendWindow)
	}
	if got := burst(100); got != maxSendWindow/4096 {
		t.Fatalf("burst of %d packets with the window at %d", got, n.qp.win.size)
	}
	// Losses halve it, to DefaultSendWindow at least.
	n.post(t, writeWR(1, 4096, key))
	n.post(t, writeWR(2, 4096, key))
	n.qp.Pump(now)
	n.out.take()
	for i, want := range []int{maxSendWindow / 2, maxSendWindow / 4, DefaultSendWindow, DefaultSendWindow} {
		now += 10
		n.qp.Receive(now, ackPkt(t, psn, bth.SyndromePSNSeqErr, 0))
		if n.qp.win.size != want {
			t.Fatalf("loss %d: window %d, want %d", i, n.qp.win.size, want)
		}
	}
	// A window given in Caps is fixed.
	f := single(t, Caps{SendWindow: 8 << 10}, o)
	f.qp.growWindow(1 << 20)
	f.qp.shrinkWindow()
	if f.qp.win.size != 8<<10 {
		t.Errorf("fixed window became %d", f.qp.win.size)
	}
}
