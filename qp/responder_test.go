package qp

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// req builds a request packet from the peer with the A bit as given.
func req(t *testing.T, op bth.Opcode, psn bth.PSN, ack bool, payload []byte, set func(h *bth.Headers)) *bth.Packet {
	t.Helper()
	h := hdr(op, psn)
	h.BTH.AckReq = ack
	if set != nil {
		set(h)
	}
	return craft(t, h, payload)
}

func reth(va uint64, rkey, n uint32) func(h *bth.Headers) {
	return func(h *bth.Headers) { h.VA, h.RKey, h.DMALen = va, rkey, n }
}

// wantAck checks that ps is one ACK/NAK with the given PSN, syndrome and
// MSN.
func wantAck(t *testing.T, ps []*bth.Packet, psn bth.PSN, syn bth.Syndrome, msn uint32) {
	t.Helper()
	want := 1
	if len(ps) != want {
		t.Fatalf("want %d ACK/NAK, got %v", want, describe(ps))
	}
	for _, p := range ps {
		if p.Opcode() != bth.OpAck {
			t.Fatalf("want ACK/NAK, got %v", describe(ps))
		}
		a := p.AETH()
		if p.BTH().PSN() != psn || a.Syndrome() != syn || a.MSN() != msn {
			t.Fatalf("ACK psn %d syndrome %#x msn %d, want %d %#x %d", p.BTH().PSN(), a.Syndrome(), a.MSN(), psn, syn, msn)
		}
		if p.BTH().DestQP() != peerQPN {
			t.Fatalf("ACK to qp %#x", p.BTH().DestQP())
		}
	}
}

func respNode(t *testing.T, rqPSN bth.PSN) *node {
	t.Helper()
	o := defaultConn()
	o.rqPSN = rqPSN
	return single(t, Caps{}, o)
}

func TestResponderSendAndCoalescedAck(t *testing.T) {
	n := respNode(t, 500)
	dst, key := n.buf(4096, 0x10000, 0)
	n.recv(t, 1, 0x10000, 4096, key)
	data := make([]byte, 2500)
	pattern(data, 5)
	n.qp.Receive(0, req(t, bth.OpSendFirst, 500, false, data[:1024], nil))
	n.qp.Receive(0, req(t, bth.OpSendMiddle, 501, false, data[1024:2048], nil))
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("ACK without the A bit: %v", describe(ps))
	}
	n.qp.Receive(0, req(t, bth.OpSendLast, 502, true, data[2048:], nil))
	wantAck(t, n.out.take(), 502, bth.ACKSyndrome(0), 1)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecv})
	if wc := n.sink.recv[0]; wc.ByteLen != 2500 || wc.Flags != 0 || wc.QPN != localQPN {
		t.Errorf("wc %+v", wc)
	}
	if !bytes.Equal(dst[:2500], data) {
		t.Error("data differs")
	}
}

func TestResponderDuplicateSend(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(4096, 0x10000, 0)
	n.recv(t, 1, 0x10000, 4096, key)
	n.recv(t, 2, 0x10000, 4096, key)
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("one"), nil))
	n.qp.Receive(0, req(t, bth.OpSendOnly, 1, false, []byte("two"), nil))
	n.out.take()
	// The first is sent again: ACKed again with the current MSN (2) and
	// its own PSN (a requester resending from 0 may not have resent 1
	// yet), and not delivered twice.
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("one"), nil))
	wantAck(t, n.out.take(), 0, bth.ACKSyndrome(0), 2)
	if len(n.sink.recv) != 2 || n.qp.Counters().DuplicateRequest != 1 {
		t.Fatalf("recv %+v counters %+v", n.sink.recv, *n.qp.Counters())
	}
}

func TestResponderOutOfSequenceOneNAK(t *testing.T) {
	n := respNode(t, 10)
	_, key := n.buf(4096, 0x10000, 0)
	for i := uint64(1); i <= 3; i++ {
		n.recv(t, i, 0x10000, 4096, key)
	}
	// One NAK for the first request past the gap, none for
	// the next one.
	n.qp.Receive(0, req(t, bth.OpSendOnly, 12, true, []byte("x"), nil))
	n.qp.Receive(0, req(t, bth.OpSendOnly, 13, true, []byte("x"), nil))
	wantAck(t, n.out.take(), 10, bth.SyndromePSNSeqErr, 0)
	c := n.qp.Counters()
	if c.OutOfSequence != 2 || c.PacketSeqErr != 1 || len(n.sink.recv) != 0 {
		t.Fatalf("counters %+v", *c)
	}
	// The gap is filled: the next gap gets its own NAK.
	n.qp.Receive(0, req(t, bth.OpSendOnly, 10, true, []byte("x"), nil))
	wantAck(t, n.out.take(), 10, bth.ACKSyndrome(2), 1)
	n.qp.Receive(0, req(t, bth.OpSendOnly, 13, true, []byte("x"), nil))
	wantAck(t, n.out.take(), 11, bth.SyndromePSNSeqErr, 1)
	if c.PacketSeqErr != 2 {
		t.Errorf("packet_seq_err %d", c.PacketSeqErr)
	}
}

func TestResponderRNR(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(4096, 0x10000, 0)
	n.qp.Receive(0, req(t, bth.OpSendFirst, 0, false, make([]byte, 1024), nil))
	wantAck(t, n.out.take(), 0, bth.RNRSyndrome(12), 0)
	// The rest of the message is out of sequence now; no second NAK.
	n.qp.Receive(0, req(t, bth.OpSendLast, 1, true, make([]byte, 10), nil))
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("answered after the RNR NAK: %v", describe(ps))
	}
	if c := n.qp.Counters(); c.SendRNRErr != 1 || c.OutOfSequence != 1 {
		t.Errorf("counters %+v", *c)
	}
	n.recv(t, 1, 0x10000, 4096, key)
	n.qp.Receive(0, req(t, bth.OpSendFirst, 0, false, make([]byte, 1024), nil))
	n.qp.Receive(0, req(t, bth.OpSendLast, 1, true, make([]byte, 10), nil))
	wantAck(t, n.out.take(), 1, bth.ACKSyndrome(0), 1)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecv})
}

func TestResponderWrite(t *testing.T) {
	n := respNode(t, 0)
	dst, key := n.buf(8192, 0x20000, 0)
	data := make([]byte, 3000)
	pattern(data, 11)
	n.qp.Receive(0, req(t, bth.OpWriteFirst, 0, false, data[:1024], reth(0x20100, key, 3000)))
	n.qp.Receive(0, req(t, bth.OpWriteMiddle, 1, false, data[1024:2048], nil))
	n.qp.Receive(0, req(t, bth.OpWriteLast, 2, true, data[2048:], nil))
	wantAck(t, n.out.take(), 2, bth.ACKSyndrome(0), 1)
	if !bytes.Equal(dst[0x100:0x100+3000], data) {
		t.Error("write data differs")
	}
	if len(n.sink.recv) != 0 {
		t.Error("a plain WRITE completed a receive")
	}
	// Zero-length WRITE: the R_Key is not checked.
	n.qp.Receive(0, req(t, bth.OpWriteOnly, 3, true, nil, reth(0, 0xdead, 0)))
	wantAck(t, n.out.take(), 3, bth.ACKSyndrome(0), 2)
}

func TestResponderWriteWithImm(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(8192, 0x20000, 0)
	n.qp.Receive(0, req(t, bth.OpWriteFirst, 0, false, make([]byte, 1024), reth(0x20000, key, 1500)))
	imm := func(h *bth.Headers) { h.Imm = 0x01020304 }
	// No receive posted: RNR on the packet carrying the immediate.
	n.qp.Receive(0, req(t, bth.OpWriteLastImm, 1, true, make([]byte, 476), imm))
	wantAck(t, n.out.take(), 1, bth.RNRSyndrome(12), 0)
	n.recv(t, 9, 0x20000, 0, key)
	n.qp.Receive(0, req(t, bth.OpWriteLastImm, 1, true, make([]byte, 476), imm))
	wantAck(t, n.out.take(), 1, bth.ACKSyndrome(0), 1)
	wantWC(t, "recv", n.sink.recv, WC{ID: 9, Opcode: WCRecvRDMAImm})
	if wc := n.sink.recv[0]; wc.Imm != 0x01020304 || wc.Flags != WCWithImm || wc.ByteLen != 1500 {
		t.Errorf("wc %+v", wc)
	}
}

func TestResponderSendWithImmAndInv(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(4096, 0x10000, 0)
	_, victim := n.buf(16, 0x90000, 0)
	n.recv(t, 1, 0x10000, 4096, key)
	n.recv(t, 2, 0x10000, 4096, key)
	n.recv(t, 3, 0x10000, 4096, key)
	n.qp.Receive(0, req(t, bth.OpSendOnlyImm, 0, true, []byte("hi"), func(h *bth.Headers) { h.Imm = 0xfeedbeef }))
	n.qp.Receive(0, req(t, bth.OpSendOnlyInv, 1, true, []byte("inv"), func(h *bth.Headers) { h.InvKey = victim }))
	if wc := n.sink.recv[0]; wc.Flags != WCWithImm || wc.Imm != 0xfeedbeef || wc.ByteLen != 2 {
		t.Errorf("imm wc %+v", wc)
	}
	if wc := n.sink.recv[1]; wc.Flags != WCWithInv || wc.InvRKey != victim || wc.ByteLen != 3 {
		t.Errorf("inv wc %+v", wc)
	}
	if _, ok := n.mem.Remote(victim, 0x90000, 8, 0); ok {
		t.Error("key still valid after SEND_WITH_INV")
	}
	n.out.take()
	// Invalidating it again is an invalid request.
	n.qp.Receive(0, req(t, bth.OpSendOnlyInv, 2, true, []byte("inv"), func(h *bth.Headers) { h.InvKey = victim }))
	wantAck(t, n.out.take(), 2, bth.SyndromeInvalidReq, 2)
	if n.qp.State() != StateErr {
		t.Errorf("state %s", n.qp.State())
	}
}

func TestResponderAccessErrors(t *testing.T) {
	type tc struct {
		name string
		p    func(t *testing.T, key uint32) *bth.Packet
		acc  Access
	}
	cases := []tc{
		{"bad rkey", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpWriteOnly, 0, true, make([]byte, 8), reth(0x20000, key+100, 8))
		}, 0},
		{"out of bounds", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpWriteOnly, 0, true, make([]byte, 8), reth(0x20000+4096-4, key, 8))
		}, 0},
		{"qp without remote write", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpWriteOnly, 0, true, make([]byte, 8), reth(0x20000, key, 8))
		}, AccessRemoteRead},
		{"qp without remote read", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 8))
		}, AccessRemoteWrite},
		{"read out of bounds", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 4097))
		}, 0},
		{"qp without atomics", func(t *testing.T, key uint32) *bth.Packet {
			return req(t, bth.OpFetchAdd, 0, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey = 0x20000, key })
		}, AccessRemoteRead},
	}
	for _, c := range cases {
		o := defaultConn()
		if c.acc != 0 {
			o.access = c.acc
		}
		n := single(t, Caps{}, o)
		_, key := n.buf(4096, 0x20000, 0)
		_, rk := n.buf(64, 0x10000, 0)
		n.recv(t, 1, 0x10000, 64, rk)
		n.qp.Receive(0, c.p(t, key))
		wantAck(t, n.out.take(), 0, bth.SyndromeRemoteAccess, 0)
		if n.qp.State() != StateErr || n.qp.Counters().RespRemoteAccessErr != 1 {
			t.Errorf("%s: state %s counters %+v", c.name, n.qp.State(), *n.qp.Counters())
		}
		wantWC(t, c.name, n.sink.recv, WC{ID: 1, Status: WCWRFlushErr, Opcode: WCRecv})
	}
}

func TestResponderInvalidRequests(t *testing.T) {
	cases := []struct {
		name  string
		pkts  func(t *testing.T, key uint32) []*bth.Packet
		recv  WCStatus // status of the receive in progress, 0 if none
		nakAt bth.PSN
	}{
		{"middle without first", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpSendMiddle, 0, false, make([]byte, 1024), nil)}
		}, 0, 0},
		{"write inside a send", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{
				req(t, bth.OpSendFirst, 0, false, make([]byte, 1024), nil),
				req(t, bth.OpWriteOnly, 1, true, make([]byte, 8), reth(0x20000, key, 8)),
			}
		}, WCRemInvReqErr, 1},
		{"short first packet", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpWriteFirst, 0, false, make([]byte, 1000), reth(0x20000, key, 3000))}
		}, 0, 0},
		{"write longer than its DMA length", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpWriteOnly, 0, true, make([]byte, 100), reth(0x20000, key, 50))}
		}, 0, 0},
		{"write ends early", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{
				req(t, bth.OpWriteFirst, 0, false, make([]byte, 1024), reth(0x20000, key, 3000)),
				req(t, bth.OpWriteLast, 1, true, make([]byte, 100), nil),
			}
		}, 0, 1},
		{"only packet above the MTU", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpSendOnly, 0, true, make([]byte, 1025), nil)}
		}, 0, 0},
		{"misaligned atomic write", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpAtomicWrite, 0, true, make([]byte, 8), reth(0x20004, key, 8))}
		}, 0, 0},
		{"misaligned atomic", func(t *testing.T, key uint32) []*bth.Packet {
			return []*bth.Packet{req(t, bth.OpFetchAdd, 0, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey = 0x20004, key })}
		}, 0, 0},
	}
	for _, c := range cases {
		n := respNode(t, 0)
		_, key := n.buf(4096, 0x20000, 0)
		_, rk := n.buf(4096, 0x10000, 0)
		n.recv(t, 1, 0x10000, 4096, rk)
		for _, p := range c.pkts(t, key) {
			n.qp.Receive(0, p)
		}
		wantAck(t, n.out.take(), c.nakAt, bth.SyndromeInvalidReq, 0)
		if n.qp.State() != StateErr {
			t.Errorf("%s: state %s", c.name, n.qp.State())
		}
		st := c.recv
		if st == 0 {
			st = WCWRFlushErr
		}
		wantWC(t, c.name, n.sink.recv, WC{ID: 1, Status: st, Opcode: WCRecv})
	}
}

func TestResponderLocalLengthError(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(100, 0x10000, 0)
	n.recv(t, 1, 0x10000, 100, key)
	n.recv(t, 2, 0x10000, 100, key)
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, make([]byte, 101), nil))
	wantAck(t, n.out.take(), 0, bth.SyndromeInvalidReq, 0)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Status: WCLocLenErr, Opcode: WCRecv}, WC{ID: 2, Status: WCWRFlushErr, Opcode: WCRecv})
	if c := n.qp.Counters(); c.RespLocalLengthErr != 1 || c.RespCQEError != 1 || n.qp.State() != StateErr {
		t.Errorf("counters %+v", *c)
	}
	// Requests after the error are dropped.
	n.qp.Receive(0, req(t, bth.OpSendOnly, 1, true, nil, nil))
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("answered in ERR: %v", describe(ps))
	}
}

func TestResponderRead(t *testing.T) {
	n := respNode(t, 0xfffffe)
	src, key := n.buf(3000, 0x20000, 7)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0xfffffe, true, nil, reth(0x20000, key, 3000)))
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, 0xfffffe, false, 1024}, pkt{bth.OpReadRespMiddle, 0xffffff, false, 1024},
		pkt{bth.OpReadRespLast, 0, false, 952})
	if ps[0].AETH().MSN() != 1 || ps[2].AETH().MSN() != 1 || ps[1].AETH() != nil || ps[0].AETH().Syndrome() != bth.ACKSyndrome(0) {
		t.Error("READ response AETHs")
	}
	got := append(append(append([]byte{}, ps[0].Payload()...), ps[1].Payload()...), ps[2].Payload()...)
	if !bytes.Equal(got, src) {
		t.Error("read data differs")
	}
	// ePSN moved past the three response PSNs.
	n.qp.Receive(0, req(t, bth.OpWriteOnly, 1, true, nil, reth(0, 0, 0)))
	wantAck(t, n.out.take(), 1, bth.ACKSyndrome(0), 2)
	// A duplicate of the whole READ is executed again (memory changed
	// meanwhile: the new contents are sent).
	src[0] = 0x55
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0xfffffe, true, nil, reth(0x20000, key, 3000)))
	ps = n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, 0xfffffe, false, 1024}, pkt{bth.OpReadRespMiddle, 0xffffff, false, 1024},
		pkt{bth.OpReadRespLast, 0, false, 952})
	if ps[0].Payload()[0] != 0x55 || ps[0].AETH().MSN() != 1 {
		t.Error("re-executed READ")
	}
	// A re-request from the middle answers from there.
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0xffffff, true, nil, reth(0x20000+1024, key, 3000-1024)))
	ps = n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, 0xffffff, false, 1024}, pkt{bth.OpReadRespLast, 0, false, 952})
	if !bytes.Equal(ps[1].Payload(), src[2048:]) {
		t.Error("partial re-read data differs")
	}
	if c := n.qp.Counters(); c.DuplicateRequest != 2 {
		t.Errorf("duplicate_request %d", c.DuplicateRequest)
	}
	// A zero-length READ gets one empty ONLY response.
	n.qp.Receive(0, req(t, bth.OpReadRequest, 2, true, nil, reth(0, 0, 0)))
	wantPkts(t, n.out.take(), pkt{bth.OpReadRespOnly, 2, false, 0})
}

func TestResponderAtomics(t *testing.T) {
	n := respNode(t, 0)
	mem, key := n.buf(16, 0x20000, 0)
	binary.NativeEndian.PutUint64(mem, 100)
	fa := func(psn bth.PSN) *bth.Packet {
		return req(t, bth.OpFetchAdd, psn, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey, h.SwapAdd = 0x20000, key, 5 })
	}
	cas := func(psn bth.PSN, cmp, swap uint64) *bth.Packet {
		return req(t, bth.OpCompareSwap, psn, true, nil, func(h *bth.Headers) {
			h.AtomicVA, h.AtomicRKey, h.Compare, h.SwapAdd = 0x20000, key, cmp, swap
		})
	}
	orig := func(ps []*bth.Packet, psn bth.PSN) uint64 {
		t.Helper()
		wantPkts(t, ps, pkt{bth.OpAtomicAck, psn, false, 0})
		return ps[0].AtomicAck().Orig()
	}
	n.qp.Receive(0, fa(0))
	if o := orig(n.out.take(), 0); o != 100 || binary.NativeEndian.Uint64(mem) != 105 {
		t.Errorf("fetch-add orig %d now %d", o, binary.NativeEndian.Uint64(mem))
	}
	n.qp.Receive(0, cas(1, 7, 9)) // fails: 105 != 7
	if o := orig(n.out.take(), 1); o != 105 || binary.NativeEndian.Uint64(mem) != 105 {
		t.Errorf("failed cas orig %d now %d", o, binary.NativeEndian.Uint64(mem))
	}
	n.qp.Receive(0, cas(2, 105, 9))
	if o := orig(n.out.take(), 2); o != 105 || binary.NativeEndian.Uint64(mem) != 9 {
		t.Errorf("cas orig %d now %d", o, binary.NativeEndian.Uint64(mem))
	}
	// Duplicates are answered from the saved results, not executed.
	n.qp.Receive(0, fa(0))
	if o := orig(n.out.take(), 0); o != 100 || binary.NativeEndian.Uint64(mem) != 9 {
		t.Errorf("duplicate fetch-add orig %d now %d", o, binary.NativeEndian.Uint64(mem))
	}
	n.qp.Receive(0, cas(2, 105, 9))
	if o := orig(n.out.take(), 2); o != 105 || binary.NativeEndian.Uint64(mem) != 9 {
		t.Errorf("duplicate cas orig %d", o)
	}
	if c := n.qp.Counters(); c.DuplicateRequest != 2 {
		t.Errorf("duplicate_request %d", c.DuplicateRequest)
	}
}

func TestResponderRdAtomicResources(t *testing.T) {
	// max_dest_rd_atomic 0: any READ is an invalid request.
	o := defaultConn()
	o.destRdAtomic = 0
	n := single(t, Caps{}, o)
	_, key := n.buf(4096, 0x20000, 0)
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 8)))
	wantAck(t, n.out.take(), 0, bth.SyndromeInvalidReq, 0)

	// max_dest_rd_atomic 1: a second READ while the first one's
	// responses are still queued is refused.
	o.destRdAtomic = 1
	n = single(t, Caps{}, o)
	_, key = n.buf(4096, 0x20000, 0)
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 2048)))
	n.qp.Receive(0, req(t, bth.OpReadRequest, 2, true, nil, reth(0x20000, key, 8)))
	if !n.qp.Busy() {
		t.Fatal("not busy with queued responses")
	}
	n.out.full = false
	n.qp.Pump(0)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpReadRespFirst, 0, false, 1024}, pkt{bth.OpReadRespLast, 1, false, 1024}, pkt{bth.OpAck, 2, false, 0})
	if ps[2].AETH().Syndrome() != bth.SyndromeInvalidReq || n.qp.State() != StateErr {
		t.Errorf("syndrome %#x state %s", ps[2].AETH().Syndrome(), n.qp.State())
	}
}

func TestResponderSRQ(t *testing.T) {
	srq := NewSRQ(4, 2)
	a := single(t, Caps{SRQ: srq}, defaultConn())
	buf, key := a.buf(4096, 0x10000, 0)
	if err := a.qp.PostRecv(&RecvWR{ID: 1}); err == nil {
		t.Error("PostRecv on a QP with an SRQ")
	}
	for i := uint64(1); i <= 3; i++ {
		if err := srq.PostRecv(&RecvWR{ID: i, SG: []SGE{{Addr: 0x10000 + 1000*(i-1), Length: 1000, LKey: key}}}); err != nil {
			t.Fatal(err)
		}
	}
	srq.SetLimit(2)
	a.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("abc"), nil))
	if srq.LimitReached() {
		t.Error("limit reached too early")
	}
	a.qp.Receive(0, req(t, bth.OpSendOnly, 1, true, []byte("def"), nil))
	if !srq.LimitReached() || srq.LimitReached() {
		t.Error("limit event not reported exactly once")
	}
	wantWC(t, "recv", a.sink.recv, WC{ID: 1, Opcode: WCRecv}, WC{ID: 2, Opcode: WCRecv})
	if string(buf[:3]) != "abc" || string(buf[1000:1003]) != "def" || srq.Len() != 1 {
		t.Errorf("srq data or length %d", srq.Len())
	}
	// Moving the QP to ERR does not flush the SRQ.
	at := Attr{State: StateErr}
	if err := a.qp.Modify(0, &at, AttrState); err != nil {
		t.Fatal(err)
	}
	if srq.Len() != 1 || len(a.sink.recv) != 2 {
		t.Errorf("srq flushed by a QP error: len %d", srq.Len())
	}
}

func TestRNRTimerCodeSent(t *testing.T) {
	o := defaultConn()
	o.minRNR = 3
	n := single(t, Caps{}, o)
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, nil, nil))
	wantAck(t, n.out.take(), 0, bth.RNRSyndrome(3), 0)
	// Changing MIN_RNR_TIMER in RTS takes effect.
	a := Attr{MinRNRTimer: 20}
	if err := n.qp.Modify(time.Second, &a, AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, nil, nil))
	wantAck(t, n.out.take(), 0, bth.RNRSyndrome(20), 0)
}

func TestResponderRemoteOperationalError(t *testing.T) {
	n := respNode(t, 0)
	// A receive whose buffer key is not valid on the responder.
	if err := n.qp.PostRecv(&RecvWR{ID: 1, SG: []SGE{{Addr: 0x10000, Length: 100, LKey: 55}}}); err != nil {
		t.Fatal(err)
	}
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, []byte("data"), nil))
	wantAck(t, n.out.take(), 0, bth.SyndromeRemoteOpError, 0)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Status: WCLocProtErr, Opcode: WCRecv})
	if n.qp.State() != StateErr {
		t.Errorf("state %s", n.qp.State())
	}
}

func TestResponderWriteOnlyImmRNR(t *testing.T) {
	n := respNode(t, 0)
	dst, key := n.buf(64, 0x20000, 0)
	p := req(t, bth.OpWriteOnlyImm, 0, true, []byte("abcd"), func(h *bth.Headers) {
		h.VA, h.RKey, h.DMALen, h.Imm = 0x20000, key, 4, 3
	})
	n.qp.Receive(0, p)
	wantAck(t, n.out.take(), 0, bth.RNRSyndrome(12), 0)
	if string(dst[:4]) == "abcd" {
		t.Error("data written before the receive was available")
	}
	n.recv(t, 1, 0x20000, 0, key)
	n.qp.Receive(0, p)
	wantAck(t, n.out.take(), 0, bth.ACKSyndrome(0), 1)
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecvRDMAImm})
	if string(dst[:4]) != "abcd" || n.sink.recv[0].Imm != 3 {
		t.Error("WRITE_ONLY_WITH_IMMEDIATE")
	}
}

func TestResponderForgottenDuplicates(t *testing.T) {
	// With one resource, a second READ replaces the first: a duplicate of
	// the first can no longer be answered and is dropped; so is a
	// duplicate atomic whose result was replaced.
	o := defaultConn()
	o.destRdAtomic = 1
	n := single(t, Caps{}, o)
	_, key := n.buf(64, 0x20000, 0)
	n.qp.Receive(0, req(t, bth.OpFetchAdd, 0, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey, h.SwapAdd = 0x20000, key, 1 }))
	n.qp.Receive(0, req(t, bth.OpReadRequest, 1, true, nil, reth(0x20000, key, 8)))
	n.out.take()
	n.qp.Receive(0, req(t, bth.OpFetchAdd, 0, true, nil, func(h *bth.Headers) { h.AtomicVA, h.AtomicRKey, h.SwapAdd = 0x20000, key, 1 }))
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("answered a forgotten atomic: %v", describe(ps))
	}
	n.qp.Receive(0, req(t, bth.OpReadRequest, 1, true, nil, reth(0x20000, key, 8)))
	wantPkts(t, n.out.take(), pkt{bth.OpReadRespOnly, 1, false, 8})
	if c := n.qp.Counters(); c.DuplicateRequest != 2 || c.DroppedPkts != 1 {
		t.Errorf("counters %+v", *c)
	}
}

// TestBatchAcks checks Caps.BatchAcks: the ACKs of a batch of requests
// wait in the QP, each replacing the one before, and go out as one ACK
// naming the last PSN when the owner pumps; a NAK is not held back.
func TestBatchAcks(t *testing.T) {
	o := defaultConn()
	o.rqPSN = 100
	n := single(t, Caps{BatchAcks: true}, o)
	_, key := n.buf(4096, 0x10000, 0)
	for i := range 3 {
		n.recv(t, uint64(i), 0x10000, 4096, key)
	}
	for i := range 3 {
		n.qp.Receive(0, req(t, bth.OpSendOnly, bth.PSN(100+i), true, []byte{1, 2, 3}, nil))
	}
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("ACKs sent before the batch ended: %v", describe(ps))
	}
	if !n.qp.Busy() {
		t.Fatal("a QP holding an ACK is not busy")
	}
	n.qp.Pump(0)
	wantAck(t, n.out.take(), 102, bth.ACKSyndrome(0), 3)
	if got := n.qp.Counters().AckCoalesced; got != 2 {
		t.Errorf("ack_coalesced %d, want 2", got)
	}
	// SendResponses sends a held ACK at once.
	n.recv(t, 9, 0x10000, 4096, key)
	n.qp.Receive(0, req(t, bth.OpSendOnly, 103, true, []byte{1}, nil))
	n.qp.SendResponses(0)
	wantAck(t, n.out.take(), 103, bth.ACKSyndrome(0), 4)
	// A NAK goes out as Receive returns.
	n.qp.Receive(0, req(t, bth.OpSendOnly, 110, true, []byte{1}, nil))
	wantAck(t, n.out.take(), 104, bth.SyndromePSNSeqErr, 4)

	// Without BatchAcks, every ACK goes out as Receive returns.
	m := single(t, Caps{}, o)
	_, key = m.buf(4096, 0x10000, 0)
	for i := range 2 {
		m.recv(t, uint64(i), 0x10000, 4096, key)
		m.qp.Receive(0, req(t, bth.OpSendOnly, bth.PSN(100+i), true, []byte{1}, nil))
		wantAck(t, m.out.take(), bth.PSN(100+i), bth.ACKSyndrome(0), uint32(i+1))
	}
}

// TestDuplicateReadEndsAnswer: a READ asked for again while its answer
// is still going out (the Output full) ends that answer: the duplicate's
// answer takes its place, from the duplicate's PSN, instead of queueing
// behind it, so asking again cannot pile answers up.
func TestDuplicateReadEndsAnswer(t *testing.T) {
	n := respNode(t, 0)
	_, key := n.buf(8192, 0x20000, 7)
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 8192))) // PSNs 0-7
	n.out.full = false
	n.qp.Pump(0)
	n.out.take() // as many as the Output took: all 8
	n.out.full = true
	n.qp.Receive(0, req(t, bth.OpReadRequest, 0, true, nil, reth(0x20000, key, 8192))) // asked again
	n.qp.Receive(0, req(t, bth.OpReadRequest, 3, true, nil, reth(0x20000+3*1024, key, 8192-3*1024)))
	n.qp.Receive(0, req(t, bth.OpReadRequest, 5, true, nil, reth(0x20000+5*1024, key, 8192-5*1024)))
	n.out.full = false
	n.qp.Pump(0)
	// Only the last request's answer: 5, 6, 7.
	wantPkts(t, n.out.take(), pkt{bth.OpReadRespFirst, 5, false, 1024}, pkt{bth.OpReadRespMiddle, 6, false, 1024},
		pkt{bth.OpReadRespLast, 7, false, 1024})
	if n.qp.resp.pending() {
		t.Fatal("responses still queued")
	}
	// A new READ after them is answered as usual.
	n.qp.Receive(0, req(t, bth.OpReadRequest, 8, true, nil, reth(0x20000, key, 100)))
	wantPkts(t, n.out.take(), pkt{bth.OpReadRespOnly, 8, false, 100})
}
