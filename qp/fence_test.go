package qp

import (
	"bytes"
	"testing"

	"github.com/uroce/uroce/bth"
)

// Once a region is deregistered or invalidated, no response reads from
// it and no request writes to it, whatever was accepted before: the
// responder looks the region up again for every packet.

const marker = 0xEE

// gone invalidates the region of key and fills it with marker bytes:
// any byte of it that reaches the wire or stays written after this was
// read or written after the region went away.
func (n *node) gone(key uint32) {
	r := &n.mem.regions[key]
	r.valid = false
	for i := range r.buf {
		r.buf[i] = marker
	}
}

func hasMarker(b []byte) bool { return bytes.IndexByte(b, marker) >= 0 }

func TestResponderReadRegionGoneBeforeFirstResponse(t *testing.T) {
	n := respNode(t, 10)
	_, key := n.buf(3000, 0x20000, 1)
	n.out.full = true // the responses wait in the queue
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 3000)))
	n.gone(key)
	n.out.full = false
	n.qp.Pump(0)
	// In place of the first response: a remote access error NAK at its
	// PSN, with the MSN of the last request completed before the READ.
	wantAck(t, n.out.take(), 10, bth.SyndromeRemoteAccess, 0)
	if n.qp.State() != StateErr || n.qp.Counters().RespRemoteAccessErr != 1 {
		t.Errorf("state %s counters %+v", n.qp.State(), *n.qp.Counters())
	}
}

func TestResponderReadRegionGoneMidway(t *testing.T) {
	n := respNode(t, 10)
	src, key := n.buf(3000, 0x20000, 1)
	want := bytes.Clone(src[:1024])
	// A later READ of another region queues behind the first one.
	_, key2 := n.buf(100, 0x40000, 2)
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 3000)))
	n.qp.Receive(0, req(t, bth.OpReadRequest, 13, true, nil, reth(0x40000, key2, 100)))
	n.out.full = false
	// One response goes out, then the region goes away.
	if !n.qp.resp.pending() || !n.qp.sendResp(0, n.qp.resp.item(n.qp.resp.ihead)) {
		t.Fatal("first response not sent")
	}
	n.gone(key)
	n.qp.Pump(0)
	ps := n.out.take()
	if len(ps) != 2 {
		t.Fatalf("got %v, want the FIRST response and a NAK", describe(ps))
	}
	if ps[0].Opcode() != bth.OpReadRespFirst || !bytes.Equal(ps[0].Payload(), want) {
		t.Errorf("first response %v", describe(ps[:1]))
	}
	// The NAK takes the place of the second response; the later READ's
	// response is not sent either (the QP is in ERR).
	wantAck(t, ps[1:], 11, bth.SyndromeRemoteAccess, 0)
	if n.qp.State() != StateErr {
		t.Errorf("state %s", n.qp.State())
	}
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 0 {
		t.Errorf("sent after the NAK: %v", describe(ps))
	}
}

func TestResponderDuplicateReadRegionGone(t *testing.T) {
	n := respNode(t, 10)
	_, key := n.buf(3000, 0x20000, 1)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 3000)))
	n.out.take()
	// The duplicate is accepted, then the region goes before its
	// responses are sent.
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 3000)))
	n.gone(key)
	n.out.full = false
	n.qp.Pump(0)
	for _, p := range n.out.take() {
		if hasMarker(p.Payload()) {
			t.Fatalf("%v carries bytes of a region that is gone", describe([]*bth.Packet{p}))
		}
	}
	if n.qp.State() != StateErr {
		t.Errorf("state %s", n.qp.State())
	}
}

func TestResponderWriteRegionGoneMidway(t *testing.T) {
	n := respNode(t, 0)
	dst, key := n.buf(3000, 0x20000, 1)
	payload := make([]byte, 1024)
	pattern(payload, 9)
	n.qp.Receive(0, req(t, bth.OpWriteFirst, 0, false, payload, reth(0x20000, key, 3000)))
	if !bytes.Equal(dst[:1024], payload) {
		t.Fatal("WRITE_FIRST not written")
	}
	n.gone(key)
	n.qp.Receive(0, req(t, bth.OpWriteMiddle, 1, false, payload, nil))
	wantAck(t, n.out.take(), 1, bth.SyndromeRemoteAccess, 0)
	for i, b := range dst {
		if b != marker {
			t.Fatalf("byte %d written after the region went away", i)
		}
	}
	if n.qp.State() != StateErr || n.qp.Counters().RespRemoteAccessErr != 1 {
		t.Errorf("state %s counters %+v", n.qp.State(), *n.qp.Counters())
	}
}

func TestResponderSendRegionGoneMidway(t *testing.T) {
	n := respNode(t, 0)
	dst, key := n.buf(3000, 0x10000, 1)
	n.recv(t, 1, 0x10000, 3000, key)
	payload := make([]byte, 1024)
	pattern(payload, 9)
	n.qp.Receive(0, req(t, bth.OpSendFirst, 0, false, payload, nil))
	n.gone(key)
	n.qp.Receive(0, req(t, bth.OpSendMiddle, 1, false, payload, nil))
	wantAck(t, n.out.take(), 1, bth.SyndromeRemoteOpError, 0)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Status: WCLocProtErr, Opcode: WCRecv})
	for i, b := range dst {
		if b != marker {
			t.Fatalf("byte %d of the receive buffer written after the region went away", i)
		}
	}
}

// The requester side: a READ's local buffer that goes away stops taking
// responses, and a SEND's source is read again for every packet.
func TestRequesterRegionGone(t *testing.T) {
	o := defaultConn()
	n := single(t, Caps{}, o)
	local, key := n.buf(3000, 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: key}},
		RemoteAddr: 0x70000, RKey: 9})
	n.qp.Pump(0)
	n.out.take()
	resp := make([]byte, 1024)
	pattern(resp, 3)
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespFirst, 0), resp))
	n.gone(key)
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespMiddle, 1), resp))
	wantWC(t, "read", n.sink.send, WC{ID: 1, Status: WCLocProtErr, Opcode: WCRDMARead})
	for i, b := range local {
		if b != marker {
			t.Fatalf("byte %d of the READ's buffer written after it went away", i)
		}
	}

	n = single(t, Caps{}, o)
	_, skey := n.buf(3000, 0x10000, 0)
	n.post(t, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: skey}}})
	n.out.full = true
	n.qp.Pump(0)
	n.gone(skey)
	n.out.full = false
	n.qp.Pump(0)
	for _, p := range n.out.take() {
		if hasMarker(p.Payload()) {
			t.Fatalf("%v carries bytes of a region that is gone", describe([]*bth.Packet{p}))
		}
	}
	wantWC(t, "send", n.sink.send, WC{ID: 2, Status: WCLocProtErr, Opcode: WCSend})
}

func TestResponderDuplicateReadOfRegionGone(t *testing.T) {
	n := respNode(t, 10)
	_, key := n.buf(3000, 0x20000, 1)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 10, true, nil, reth(0x20000, key, 3000)))
	n.out.take()
	n.gone(key)
	// The requester asks again for the rest: refused with a remote
	// access error, as the READ itself would be now.
	n.qp.Receive(0, req(t, bth.OpReadRequest, 11, true, nil, reth(0x20000+1024, key, 3000-1024)))
	wantAck(t, n.out.take(), 11, bth.SyndromeRemoteAccess, 1)
	if n.qp.State() != StateErr || n.qp.Counters().RespRemoteAccessErr != 1 {
		t.Errorf("state %s counters %+v", n.qp.State(), *n.qp.Counters())
	}
}
