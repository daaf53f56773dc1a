package qp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// READ recovery: a READ that lost responses asks for the rest only, from
// the first response missing; READs answered in full are not asked for
// again; what a later response shows lost is asked for at once, the rest
// when the probe timer fires. Crafted responses check what goes on the
// wire; two QPs whose packets are dropped by a seeded generator check
// the whole.

// rdResps returns the responses a responder sends for the READ of data
// whose first response has PSN first, from packet from on, at MTU mtu:
// FIRST (or ONLY) first, as after a re-request.
func rdResps(t *testing.T, first bth.PSN, from int, data []byte, mtu int) []*bth.Packet {
	t.Helper()
	n := max((len(data)+mtu-1)/mtu, 1)
	var ps []*bth.Packet
	for k := from; k < n; k++ {
		op := bth.OpReadRespMiddle
		switch {
		case k == from && k == n-1:
			op = bth.OpReadRespOnly
		case k == from:
			op = bth.OpReadRespFirst
		case k == n-1:
			op = bth.OpReadRespLast
		}
		h := hdr(op, first.Add(k))
		h.Syndrome = bth.SyndromeACKNoCredits
		ps = append(ps, craft(t, h, data[k*mtu:min((k+1)*mtu, len(data))]))
	}
	return ps
}

// wantReRequest checks that ps is one READ request at psn for the bytes
// of the READ at va, rkey, length n from packet k on (MTU mtu).
func wantReRequest(t *testing.T, ps []*bth.Packet, psn bth.PSN, va uint64, rkey, n uint32, k, mtu int) {
	t.Helper()
	wantPkts(t, ps, pkt{bth.OpReadRequest, psn, true, 0})
	r := ps[0].RETH()
	off := uint32(k * mtu)
	if r.VA() != va+uint64(off) || r.RKey() != rkey || r.DMALen() != n-off {
		t.Fatalf("READ request at %d: va %#x rkey %d len %d, want va %#x rkey %d len %d",
			psn, r.VA(), r.RKey(), r.DMALen(), va+uint64(off), rkey, n-off)
	}
}

// wantAsk checks that ps is one READ request at psn for packets k up to
// upto (exclusive) of the READ at va, rkey, length n (MTU mtu): the gap
// before responses kept and the first of them.
func wantAsk(t *testing.T, ps []*bth.Packet, psn bth.PSN, va uint64, rkey, n uint32, k, upto, mtu int) {
	t.Helper()
	wantPkts(t, ps, pkt{bth.OpReadRequest, psn, true, 0})
	r := ps[0].RETH()
	off, end := uint32(k*mtu), min(uint32(upto*mtu), n)
	if r.VA() != va+uint64(off) || r.RKey() != rkey || r.DMALen() != end-off {
		t.Fatalf("READ request at %d: va %#x rkey %d len %d, want va %#x rkey %d len %d",
			psn, r.VA(), r.RKey(), r.DMALen(), va+uint64(off), rkey, end-off)
	}
}

// wantAskAny checks that ps is one READ request at psn for packets from
// k on of the READ at va, rkey, length n: to the end, or a whole number
// of packets short of it (wantAsk).
func wantAskAny(t *testing.T, ps []*bth.Packet, psn bth.PSN, va uint64, rkey, n uint32, k, mtu int) {
	t.Helper()
	r := ps[0].RETH()
	off := uint32(k * mtu)
	if l := r.DMALen(); l > 0 && off+l < n && l%uint32(mtu) == 0 {
		wantAsk(t, ps, psn, va, rkey, n, k, int(off+l)/mtu, mtu)
		return
	}
	wantReRequest(t, ps, psn, va, rkey, n, k, mtu)
}

// readWR is a signaled READ of n bytes into the node's buffer at local,
// from the peer's remote (R_Key 9).
func readWR(id uint64, local uint64, n uint32, key uint32, remote uint64) SendWR {
	return SendWR{ID: id, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: local, Length: n, LKey: key}},
		RemoteAddr: remote, RKey: 9}
}

// A lost middle response: the responses after it are kept, and the READ
// asks again, once, for the missing one and the first kept (whose copy
// shows the answer went past the gap); the rest of the first answer and
// late duplicates change nothing, and the data lands byte for byte.
func TestReadLostMiddleResponse(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 100
	n := single(t, Caps{}, o)
	local, key := n.buf(8000, 0x10000, 0)
	clear(local)
	remote := make([]byte, 8000)
	pattern(remote, 9)
	n.post(t, readWR(1, 0x10000, 8000, key, 0x70000))
	n.qp.Pump(0)
	wantReRequest(t, n.out.take(), 100, 0x70000, 9, 8000, 0, 1024)
	resps := rdResps(t, 100, 0, remote, 1024) // PSNs 100-107
	deliver(1, n.qp, resps[:3])
	n.qp.Receive(1, resps[4]) // 103 is lost
	n.qp.Pump(1)
	wantAsk(t, n.out.take(), 103, 0x70000, 9, 8000, 3, 5, 1024)
	// The first answer goes on: no more requests.
	deliver(2, n.qp, resps[5:])
	n.qp.Pump(2)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent %v while the first answer went on", describe(ps))
	}
	// The answer to the re-request, then duplicates of both answers.
	deliver(3, n.qp, rdResps(t, 100, 3, remote, 1024))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	deliver(4, n.qp, resps[2:])
	deliver(4, n.qp, rdResps(t, 100, 3, remote, 1024))
	n.qp.Pump(4)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent %v for duplicates", describe(ps))
	}
	if len(n.sink.send) != 1 || n.qp.State() != StateRTS {
		t.Fatalf("completions %+v, state %s", n.sink.send, n.qp.State())
	}
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
	if c := n.qp.Counters(); c.ImpliedNakSeqErr != 1 || c.RetransmittedPkts != 1 || c.LocalAckTimeoutErr != 0 {
		t.Errorf("counters %+v", *c)
	}
}

// oneRead posts a READ of 8000 bytes of the peer's (at 0x70000, filled
// with pattern seed) into a cleared local buffer at 0x10000, and takes
// its request; it returns both buffers.
func oneRead(t *testing.T, n *node, seed byte) (local, remote []byte) {
	t.Helper()
	local, key := n.buf(8000, 0x10000, 0)
	clear(local)
	remote = make([]byte, 8000)
	pattern(remote, seed)
	n.post(t, readWR(1, 0x10000, 8000, key, 0x70000))
	n.qp.Pump(0)
	n.out.take()
	return local, remote
}

// A response past a gap whose payload is not what its PSN's place holds
// (a MIDDLE of half an MTU) is not kept: the answer to the re-request
// brings that place's bytes, and the data lands byte for byte.
func TestReadKeptResponseLengthChecked(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 100
	n := single(t, Caps{}, o)
	local, remote := oneRead(t, n, 5)
	resps := rdResps(t, 100, 0, remote, 1024) // PSNs 100-107
	deliver(1, n.qp, resps[:3])
	// 103 is lost; 104 comes short.
	h := hdr(bth.OpReadRespMiddle, 104)
	h.Syndrome = bth.SyndromeACKNoCredits
	n.qp.Receive(1, craft(t, h, make([]byte, 512)))
	deliver(1, n.qp, resps[5:])
	n.qp.Pump(1)
	n.out.take()
	deliver(2, n.qp, rdResps(t, 100, 3, remote, 1024))
	n.qp.Pump(2)
	n.out.take()
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	if !bytes.Equal(local, remote) {
		for i := range local {
			if local[i] != remote[i] {
				t.Fatalf("read data differs from byte %d on", i)
			}
		}
	}
}

// A lost last response shows when the next READ's answer begins: only
// the missing one is asked for, the next READ is kept (and not asked for
// again), and both complete in order once the missing response comes.
func TestReadLostLastResponseBeforeNext(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, key := n.buf(5000, 0x10000, 0)
	clear(local)
	remote := make([]byte, 5000)
	pattern(remote, 3)
	n.post(t, readWR(1, 0x10000, 3000, key, 0x70000))           // PSNs 0-2
	n.post(t, readWR(2, 0x10000+3000, 2000, key, 0x70000+3000)) // PSNs 3-4
	n.qp.Pump(0)
	n.out.take()
	a := rdResps(t, 0, 0, remote[:3000], 1024)
	b := rdResps(t, 3, 0, remote[3000:], 1024)
	deliver(1, n.qp, a[:2])
	n.qp.Receive(1, b[0]) // a[2] is lost
	n.qp.Pump(1)
	wantReRequest(t, n.out.take(), 2, 0x70000, 9, 3000, 2, 1024)
	n.qp.Receive(2, b[1])
	n.qp.Pump(2)
	if ps := n.out.take(); len(ps) != 0 || len(n.sink.send) != 0 {
		t.Fatalf("sent %v, completions %+v", describe(ps), n.sink.send)
	}
	deliver(3, n.qp, rdResps(t, 0, 2, remote[:3000], 1024))
	wantWC(t, "reads", n.sink.send, WC{ID: 1, Opcode: WCRDMARead}, WC{ID: 2, Opcode: WCRDMARead})
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
	if n.qp.rdOut != 0 || n.qp.Busy() {
		t.Errorf("rdOut %d, busy %v", n.qp.rdOut, n.qp.Busy())
	}
}

// A lost last response of the last READ: nothing shows it but the
// probe timer, long before the ACK timeout; the probe asks for the rest
// and charges no retry.
func TestReadLostLastResponseProbe(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, key := n.buf(4096, 0x10000, 0)
	rttOnce(t, n, key, 0, 20*time.Microsecond)
	clear(local)
	remote := make([]byte, 3000)
	pattern(remote, 5)
	now := Time(time.Millisecond)
	n.post(t, readWR(1, 0x10000, 3000, key, 0x70000)) // PSNs 1-3
	n.qp.Pump(now)
	n.out.take()
	deliver(now, n.qp, rdResps(t, 1, 0, remote, 1024)[:2])
	d, ok := n.qp.Deadline()
	if !ok || d-now >= ackTimeoutDur(14) || d-now > time.Millisecond {
		t.Fatalf("deadline %v after the last response, want a probe", d-now)
	}
	n.qp.Tick(d)
	n.qp.Pump(d)
	wantReRequest(t, n.out.take(), 3, 0x70000, 9, 3000, 2, 1024)
	deliver(d, n.qp, rdResps(t, 1, 2, remote, 1024))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	if !bytes.Equal(local[:3000], remote) {
		t.Error("read data differs")
	}
	if c := n.qp.Counters(); c.LossProbes != 1 || c.CompleterRetryErr != 0 || c.LocalAckTimeoutErr != 0 {
		t.Errorf("counters %+v", *c)
	}
}

// A lost READ request draws a NAK when the next one arrives: the READ
// is requested again, whole, with the READs after it (a responder drops
// what follows a gap), but not the one before it, which was answered.
func TestReadLostRequest(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, key := n.buf(8000, 0x10000, 0)
	clear(local)
	remote := make([]byte, 8000)
	pattern(remote, 7)
	for i := 0; i < 4; i++ { // PSNs 0-1, 2-3, 4-5, 6-7
		n.post(t, readWR(uint64(i+1), 0x10000+uint64(2000*i), 2000, key, 0x70000+uint64(2000*i)))
	}
	n.qp.Pump(0)
	n.out.take()
	deliver(1, n.qp, rdResps(t, 0, 0, remote[:2000], 1024))
	// The second request was lost: the NAK names its PSN.
	n.qp.Receive(1, ackPkt(t, 2, bth.SyndromePSNSeqErr, 1))
	n.qp.Pump(1)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRequest, 2, true, 0}, pkt{bth.OpReadRequest, 4, true, 0}, pkt{bth.OpReadRequest, 6, true, 0})
	for i, p := range ps {
		if r := p.RETH(); r.VA() != 0x70000+uint64(2000*(i+1)) || r.DMALen() != 2000 {
			t.Errorf("request %d: va %#x len %d", i, r.VA(), r.DMALen())
		}
	}
	for i := 1; i < 4; i++ {
		deliver(2, n.qp, rdResps(t, bth.PSN(2*i), 0, remote[2000*i:2000*(i+1)], 1024))
	}
	wantWC(t, "reads", n.sink.send, WC{ID: 1, Opcode: WCRDMARead}, WC{ID: 2, Opcode: WCRDMARead},
		WC{ID: 3, Opcode: WCRDMARead}, WC{ID: 4, Opcode: WCRDMARead})
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
}

// Several outstanding READs lose responses: each asks, as soon as a
// later response shows it, for exactly what it lacks; those answered in
// full are asked for nothing; completions come in order.
func TestReadLossSeveralOutstanding(t *testing.T) {
	o := defaultConn()
	o.rdAtomic = 8
	n := single(t, Caps{}, o)
	const each = 4000 // 4 packets
	local, key := n.buf(6*each, 0x10000, 0)
	clear(local)
	remote := make([]byte, 6*each)
	pattern(remote, 11)
	for i := 0; i < 6; i++ { // PSNs 4i to 4i+3
		n.post(t, readWR(uint64(i+1), 0x10000+uint64(each*i), each, key, 0x70000+uint64(each*i)))
	}
	n.qp.Pump(0)
	n.out.take()
	answer := func(i, from int) []*bth.Packet {
		return rdResps(t, bth.PSN(4*i), from, remote[each*i:each*(i+1)], 1024)
	}
	var asked []bth.PSN
	take := func() {
		t.Helper()
		n.qp.Pump(1)
		for _, r := range n.out.take() {
			if r.Opcode() != bth.OpReadRequest {
				t.Fatalf("sent %v", describe([]*bth.Packet{r}))
			}
			psn := r.BTH().PSN()
			wantAskAny(t, []*bth.Packet{r}, psn, 0x70000+uint64(each*(psn/4)), 9, each, int(psn%4), 1024)
			asked = append(asked, psn)
		}
	}
	// READ 0 loses its second response, READ 1 its last, READ 2 its
	// first, READ 3 its last two, READ 5 its last; READ 4 loses none.
	lost := map[bth.PSN]bool{1: true, 7: true, 8: true, 14: true, 15: true, 23: true}
	for i := 0; i < 6; i++ {
		for _, p := range answer(i, 0) {
			if !lost[p.BTH().PSN()] {
				n.qp.Receive(1, p)
			}
			take()
		}
	}
	wantPSNs(t, "asked for", asked, 1, 7, 8, 14)
	if len(n.sink.send) != 0 {
		t.Fatalf("completions %+v before the missing responses", n.sink.send)
	}
	// READ 5's last loss shows when the answer to a request sent after
	// it begins.
	asked = nil
	for _, r := range [][2]int{{0, 1}, {1, 3}, {2, 0}, {3, 2}} {
		for _, p := range answer(r[0], r[1]) {
			n.qp.Receive(2, p)
			take()
		}
	}
	wantPSNs(t, "asked for", asked, 23)
	deliver(3, n.qp, answer(5, 3))
	var want []WC
	for i := 1; i <= 6; i++ {
		want = append(want, WC{ID: uint64(i), Opcode: WCRDMARead})
	}
	wantWC(t, "reads", n.sink.send, want...)
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
	if c := n.qp.Counters(); c.RetransmittedPkts != 5 || c.LocalAckTimeoutErr != 0 || c.LossProbes != 0 {
		t.Errorf("counters %+v", *c)
	}
}

// A re-request whose first response is lost too: the rest of its answer
// shows it (no earlier answer is still coming), and the READ asks again.
func TestReadLostReRequestAnswer(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, key := n.buf(4000, 0x10000, 0)
	clear(local)
	remote := make([]byte, 4000)
	pattern(remote, 13)
	n.post(t, readWR(1, 0x10000, 4000, key, 0x70000)) // PSNs 0-3
	n.qp.Pump(0)
	n.out.take()
	first := rdResps(t, 0, 0, remote, 1024)
	n.qp.Receive(1, first[0])
	n.qp.Receive(1, first[2]) // 1 lost
	n.qp.Pump(1)
	wantAsk(t, n.out.take(), 1, 0x70000, 9, 4000, 1, 3, 1024)
	n.qp.Receive(1, first[3]) // the first answer ends
	again := rdResps(t, 0, 1, remote, 1024)
	n.qp.Receive(2, again[1]) // again[0], PSN 1, lost
	n.qp.Pump(2)
	wantAsk(t, n.out.take(), 1, 0x70000, 9, 4000, 1, 3, 1024)
	deliver(3, n.qp, again[2:])
	deliver(3, n.qp, rdResps(t, 0, 1, remote, 1024))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
}

// rdma_rxe ends an answer when asked again, and answers a request for
// the middle of a READ from a MIDDLE (or a LAST), ending where the
// request ends: the answer to the request again shows itself by the
// response that was missing, what the first answer did not bring after
// the kept ones is asked for as soon as the gap is filled, and a gap in
// an answer shows a loss at once.
func TestReadReRequestAnsweredFromMiddle(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	local, remote := oneRead(t, n, 17) // PSNs 0-7
	resps := rdResps(t, 0, 0, remote, 1024)
	deliver(1, n.qp, resps[:2])
	n.qp.Receive(1, resps[3]) // 2 is lost; the first answer ends here
	n.qp.Pump(1)
	wantAsk(t, n.out.take(), 2, 0x70000, 9, 8000, 2, 4, 1024)
	// The answer again, as rdma_rxe sends it: MIDDLE 2, LAST 3.
	last := hdr(bth.OpReadRespLast, 3)
	last.Syndrome = bth.SyndromeACKNoCredits
	deliver(2, n.qp, []*bth.Packet{resps[2], craft(t, last, remote[3072:4096])})
	n.qp.Pump(2)
	wantReRequest(t, n.out.take(), 4, 0x70000, 9, 8000, 4, 1024)
	// Its answer: MIDDLE 4, 5 lost, 6 kept.
	n.qp.Receive(3, resps[4])
	n.qp.Receive(3, resps[6])
	n.qp.Pump(3)
	wantAsk(t, n.out.take(), 5, 0x70000, 9, 8000, 5, 7, 1024)
	deliver(4, n.qp, resps[5:])
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})
	if !bytes.Equal(local, remote) {
		t.Error("read data differs")
	}
	if c := n.qp.Counters(); c.LocalAckTimeoutErr != 0 || c.LossProbes != 0 {
		t.Errorf("counters %+v", *c)
	}
}

// The responder answers a request inside a READ's PSN range, for the
// tail of its bytes, from the right place: the responses begin at the
// request's PSN with the bytes at its address, carry the READ's MSN,
// and a later READ in between changes nothing. A request whose PSN and
// address disagree is dropped.
func TestResponderReadTailReRequest(t *testing.T) {
	n := respNode(t, 10)
	region, key := n.buf(16384, 0x20000, 1)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 5000)))      // PSNs 10-14
	n.qp.Receive(0, req(t, bth.OpReadRequest, 15, true, nil, reth(0x20000+8192, key, 2000))) // PSNs 15-16
	n.out.take()
	n.qp.Receive(1, req(t, bth.OpReadRequest, 12, true, nil, reth(0x20000+2048, key, 5000-2048)))
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, 12, false, 1024}, pkt{bth.OpReadRespMiddle, 13, false, 1024},
		pkt{bth.OpReadRespLast, 14, false, 5000 - 4096})
	var got []byte
	for _, p := range ps {
		got = append(got, p.Payload()...)
		if p.AETH() != nil && p.AETH().MSN() != 1 {
			t.Errorf("psn %d: msn %d, want the READ's 1", p.BTH().PSN(), p.AETH().MSN())
		}
	}
	if !bytes.Equal(got, region[2048:5000]) {
		t.Error("tail data differs")
	}
	// The later READ's tail, one packet.
	n.qp.Receive(1, req(t, bth.OpReadRequest, 16, true, nil, reth(0x20000+8192+1024, key, 2000-1024)))
	ps = n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespOnly, 16, false, 2000 - 1024})
	if !bytes.Equal(ps[0].Payload(), region[8192+1024:8192+2000]) {
		t.Error("second tail data differs")
	}
	dropped := n.qp.Counters().DroppedPkts
	for _, c := range []struct {
		psn bth.PSN
		va  uint64
		n   uint32
	}{{12, 0x20000 + 1024, 1000}, {13, 0x20000 + 2048, 100}, {11, 0x20000 + 3072, 100}} {
		n.qp.Receive(1, req(t, bth.OpReadRequest, c.psn, true, nil, reth(c.va, key, c.n)))
		if ps := n.out.take(); len(ps) != 0 {
			t.Fatalf("psn %d va %#x: answered %v", c.psn, c.va, describe(ps))
		}
	}
	if got := n.qp.Counters().DroppedPkts - dropped; got != 3 || n.qp.State() != StateRTS {
		t.Errorf("%d dropped, state %s", got, n.qp.State())
	}
}

// readPair is a requester A reading from a responder B through links
// that drop packets: B's region (key 1) holds a pattern, A's buffer
// (key 1) receives it.
type readPair struct {
	lp     *lossyPair
	remote []byte
	local  []byte
}

func newReadPair(t *testing.T, o connOpts) *readPair {
	a := newNode(t, Caps{Type: RC, QPN: localQPN, MaxSendWR: 64})
	b := newNode(t, Caps{Type: RC, QPN: peerQPN, MaxSendWR: 64})
	connect(t, a.qp, addrA, addrB, peerQPN, o)
	connect(t, b.qp, addrB, addrA, localQPN, o)
	rp := &readPair{lp: &lossyPair{t: t, a: a, b: b}, remote: make([]byte, 1<<20), local: make([]byte, 1<<20)}
	pattern(rp.remote, 21)
	a.mem.reg(rp.local, 0x100000, AccessLocalWrite)
	b.mem.reg(rp.remote, 0x900000, AccessRemoteRead)
	return rp
}

// warm gives A a round-trip estimate with one READ (PSN 0).
func (rp *readPair) warm() {
	rp.read(100, 0, 64)
	rp.lp.settle(20, nil)
	rp.lp.a.sink.send = nil
}

func (rp *readPair) read(id uint64, off uint64, n uint32) {
	rp.lp.a.post(rp.lp.t, SendWR{ID: id, Opcode: WRRead, Flags: SendSignaled,
		SG: []SGE{{Addr: 0x100000 + off, Length: n, LKey: 1}}, RemoteAddr: 0x900000 + off, RKey: 1})
}

// dropFirst loses the first n packets of the given direction with PSN
// psn.
func dropFirst(toB bool, psn bth.PSN, n int) func(bool, *bth.Packet) bool {
	k := 0
	return func(dir bool, p *bth.Packet) bool {
		if dir != toB || p.BTH().PSN() != psn || k == n {
			return false
		}
		k++
		return true
	}
}

// Five READs of four packets between two QPs, with every kind of loss:
// each READ is asked for again only from the response it lacks, never
// one answered in full, and no ACK timeout is needed; copies of
// responses change nothing.
func TestReadRecoveryPair(t *testing.T) {
	for _, c := range []struct {
		name     string
		drop     func(toB bool, p *bth.Packet) bool
		requests []bth.PSN // the PSNs of the READ requests A sends
	}{
		// READ 0 loses its second response, READ 1 its last, READ 2
		// its first, READ 3 its last two.
		{"lost responses", all(dropOnce(false, 2, nil), dropOnce(false, 8, nil), dropOnce(false, 9, nil),
			dropOnce(false, 15, nil), dropOnce(false, 16, nil)),
			[]bth.PSN{1, 5, 9, 13, 17, 2, 8, 9, 15}},
		// B NAKs 5 when 9 comes: A asks for 5 and the READs after it.
		{"lost requests", all(dropOnce(true, 5, nil), dropOnce(true, 17, nil)),
			[]bth.PSN{1, 5, 9, 13, 17, 5, 9, 13, 17}},
		// The NAK is lost: the probe asks for the first READ, which B
		// executes, and the last, which B NAKs (for 9): A goes back to 9.
		{"lost requests and NAK", all(dropOnce(true, 5, nil), dropOnce(false, 5, isNAK), dropOnce(true, 17, nil)),
			[]bth.PSN{1, 5, 9, 13, 17, 5, 17, 9, 13, 17}},
		// READ 1 loses its second response, then its request again;
		// READ 3 its second response, then the first of the answer to
		// its request again: that answer shows READ 1's request lost,
		// its rest READ 3's response.
		{"lost re-requests", all(dropOnce(false, 6, nil), dropOnce(true, 6, nil), dropFirst(false, 14, 2)),
			[]bth.PSN{1, 5, 9, 13, 17, 6, 14, 6, 14}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := defaultConn()
			o.rdAtomic, o.destRdAtomic = 8, 8
			rp := newReadPair(t, o)
			lp := rp.lp
			rp.warm()
			clear(rp.local)
			for i := 0; i < 5; i++ { // PSNs 1-4, 5-8, 9-12, 13-16, 17-20
				rp.read(uint64(i+1), uint64(4000*i), 4000)
			}
			var requests []*bth.Packet
			copies := 0
			lp.settle(200, func(toB bool, p *bth.Packet) bool {
				if toB {
					requests = append(requests, p)
				}
				if c.drop(toB, p) {
					return true
				}
				if !toB && copies%7 == 3 { // a copy now and then
					lp.a.qp.Receive(lp.now, p)
				}
				copies++
				return false
			})
			wantWC(t, "reads", lp.a.sink.send, WC{ID: 1, Opcode: WCRDMARead}, WC{ID: 2, Opcode: WCRDMARead},
				WC{ID: 3, Opcode: WCRDMARead}, WC{ID: 4, Opcode: WCRDMARead}, WC{ID: 5, Opcode: WCRDMARead})
			if !bytes.Equal(rp.local[:20000], rp.remote[:20000]) {
				t.Error("read data differs")
			}
			var got []bth.PSN
			for _, r := range requests {
				psn := r.BTH().PSN()
				j, k := (psn-1)/4, (psn-1)%4
				wantAskAny(t, []*bth.Packet{r}, psn, 0x900000+uint64(4000*j), 1, 4000, int(k), 1024)
				got = append(got, psn)
			}
			wantPSNs(t, "requests", got, c.requests...)
			if ca := lp.a.qp.Counters(); ca.LocalAckTimeoutErr != 0 || lp.a.qp.State() != StateRTS || lp.a.qp.rdOut != 0 {
				t.Errorf("state %s, rdOut %d, counters %+v", lp.a.qp.State(), lp.a.qp.rdOut, *ca)
			}
		})
	}
}

// Seeded random loss both ways, with every READ size from one byte to a
// few packets and up to max_rd_atomic READs outstanding: the data lands
// byte for byte, completions come in order, no ACK timeout is needed,
// and the responses sent again stay within what asking for the rest
// from the first missing one costs.
func TestReadRandomLoss(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			o := defaultConn()
			o.rdAtomic, o.destRdAtomic = 8, 8
			rp := newReadPair(t, o)
			lp := rp.lp
			rng := rand.New(rand.NewPCG(seed, 7))
			drop := func(bool, *bth.Packet) bool { return rng.Float64() < 0.05 }
			rp.warm()
			clear(rp.local)
			var want []WC
			var off uint64
			resp := 0
			count := func(toB bool, p *bth.Packet) bool {
				if !toB {
					resp++
				}
				return drop(toB, p)
			}
			pkts := 0
			for i := 0; i < 40; i++ {
				n := uint32(1 + rng.IntN(6*1024))
				rp.read(uint64(i+1), off, n)
				want = append(want, WC{ID: uint64(i + 1), Opcode: WCRDMARead})
				off += uint64(n)
				pkts += int(n+1023) / 1024
				if i%8 == 7 {
					lp.settle(2000, count)
				}
			}
			lp.settle(2000, count)
			wantWC(t, "reads", lp.a.sink.send, want...)
			if !bytes.Equal(rp.local[:off], rp.remote[:off]) {
				t.Error("read data differs")
			}
			if ca := lp.a.qp.Counters(); ca.LocalAckTimeoutErr != 0 || lp.a.qp.State() != StateRTS {
				t.Errorf("state %s, counters %+v", lp.a.qp.State(), *ca)
			}
			if resp > 2*pkts+8 {
				t.Errorf("%d responses for %d packets of READs", resp, pkts)
			}
		})
	}
}

// readSim runs count 64 KiB READs, batches of 4 with the last one
// signaled and 4 batches outstanding (as the stack's benchmark posts
// them), over links of 2 Gpkt/s each way and 5 µs, losing the fraction
// drop of the packets both ways. It returns the time it took.
func readSim(t *testing.T, drop float64, count int) Time {
	o := defaultConn()
	o.mtu = MTU4096
	o.rdAtomic, o.destRdAtomic = 16, 16
	rp := newReadPair(t, o)
	a, b := rp.lp.a, rp.lp.b
	rng := rand.New(rand.NewPCG(1, 2))
	ab := &timedLink{rng: rng, drop: drop, lat: 5 * time.Microsecond, per: 500}
	ba := &timedLink{rng: rng, drop: drop, lat: 5 * time.Microsecond, per: 500}
	now := Time(0)
	posted := 0
	const batch, depth = 4, 4
	for len(a.sink.send) < count/batch {
		if now > 10*time.Second {
			t.Fatal("stuck")
		}
		for posted < count && posted-len(a.sink.send)*batch < batch*depth {
			for k := 0; k < batch; k++ {
				off := uint64(posted%16) * 65536
				wr := SendWR{ID: uint64(posted), Opcode: WRRead, SG: []SGE{{Addr: 0x100000 + off, Length: 65536, LKey: 1}},
					RemoteAddr: 0x900000 + off, RKey: 1}
				if k == batch-1 {
					wr.Flags = SendSignaled
				}
				a.post(t, wr)
				posted++
			}
		}
		now += 250
		a.qp.Tick(now)
		a.qp.Pump(now)
		for _, p := range a.out.take() {
			ab.put(now, p)
		}
		deliver(now, b.qp, ab.due(now))
		b.qp.Pump(now)
		for _, p := range b.out.take() {
			ba.put(now, p)
		}
		deliver(now, a.qp, ba.due(now))
	}
	for _, wc := range a.sink.send {
		if wc.Status != WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	return now
}

// timedLink carries packets one way at a fixed rate and delay, losing
// some.
type timedLink struct {
	rng      *rand.Rand
	drop     float64
	lat, per Time // delay, and time per packet
	free     Time // when the link is free
	queue    []timedPkt
}

type timedPkt struct {
	at Time
	p  *bth.Packet
}

func (l *timedLink) put(now Time, p *bth.Packet) {
	l.free = max(now, l.free) + l.per
	if l.rng.Float64() >= l.drop {
		l.queue = append(l.queue, timedPkt{l.free + l.lat, p})
	}
}

func (l *timedLink) due(now Time) []*bth.Packet {
	var out []*bth.Packet
	k := 0
	for _, f := range l.queue {
		if f.at <= now {
			out = append(out, f.p)
		} else {
			l.queue[k] = f
			k++
		}
	}
	l.queue = l.queue[:k]
	return out
}

// 64 KiB READs at 5 % loss both ways keep more than half the throughput
// of a loss-free link (asking for the rest from the first response
// missing costs 45 % more responses; the rest must not stall).
func TestReadLossThroughput(t *testing.T) {
	const count = 2000
	clean, lossy := readSim(t, 0, count), readSim(t, 0.05, count)
	ratio := float64(clean) / float64(lossy)
	t.Logf("loss-free %v, 5%% loss %v: %.0f %%", clean, lossy, 100*ratio)
	if ratio < 0.55 {
		t.Errorf("5 %% loss keeps %.0f %% of the loss-free throughput", 100*ratio)
	}
}

// Recovering lost READ responses allocates nothing.
func TestZeroAllocsReadLoss(t *testing.T) {
	mem := &fakeMem{}
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	kl := mem.reg(dst, 0x100000, AccessLocalWrite)
	kr := mem.reg(src, 0x200000, AccessRemoteRead)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, RC, MTU1024, mem, sa, sb)
	sg := [1]SGE{{Addr: 0x100000, Length: 16 << 10, LKey: kl}}
	read := SendWR{ID: 3, Opcode: WRRead, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kr}
	var now Time
	k, lossy := 0, false
	lose := func() bool { k++; return lossy && k%13 == 0 }
	round := func() {
		want := sa.send + 4
		for i := 0; i < 4; i++ {
			read.SG = sg[:]
			if err := w.a.PostSend(now, &read); err != nil {
				panic(err)
			}
		}
		for sa.send < want {
			now += time.Microsecond
			w.a.Pump(now)
			w.b.Pump(now)
			if w.outA.n == 0 && w.outB.n == 0 {
				// Quiet: on to A's next timer.
				if d, ok := w.a.Deadline(); ok && d > now {
					now = d
				}
				w.a.Tick(now)
				continue
			}
			w.moveLossy(w.outA, w.b, now, lose)
			w.moveLossy(w.outB, w.a, now, lose)
		}
	}
	round() // warm up, and a round-trip estimate
	lossy = true
	round()
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("%.1f allocations per round of 4 READs losing packets", allocs)
	}
	if c := w.a.Counters(); sa.bad != 0 || c.ImpliedNakSeqErr == 0 || c.LossProbes == 0 || c.LocalAckTimeoutErr != 0 {
		t.Fatalf("completions %+v, counters %+v", sa, *w.a.Counters())
	}
}

// moveLossy delivers the frames of o to the QP to, but those lose picks.
func (w *wire) moveLossy(o *ringOut, to *QP, now Time, lose func() bool) {
	n := o.n
	o.n = 0
	for i := 0; i < n; i++ {
		if lose() {
			continue
		}
		p := &w.pkts[i]
		if err := bth.Parse(o.bufs[i][:o.lens[i]], p); err != nil {
			panic(err)
		}
		to.Receive(now, p)
	}
}
