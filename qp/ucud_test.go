package qp

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/bth"
)

func ucNode(t *testing.T, rqPSN bth.PSN) *node {
	o := defaultConn()
	o.rqPSN = rqPSN
	return single(t, Caps{Type: UC}, o)
}

func TestUCSendAndWrite(t *testing.T) {
	a, b := pair(t, UC, defaultConn(), defaultConn())
	src := make([]byte, 3000)
	pattern(src, 1)
	ls := a.mem.reg(src, 0x1000, 0)
	dst := make([]byte, 8192)
	ld := b.mem.reg(dst, 0x8000, AccessLocalWrite|AccessRemoteWrite)
	if err := b.qp.PostRecv(&RecvWR{ID: 5, SG: []SGE{{Addr: 0x8000, Length: 4096, LKey: ld}}}); err != nil {
		t.Fatal(err)
	}
	a.post(t, SendWR{ID: 1, Opcode: WRSendWithImm, Imm: 77, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 3000, LKey: ls}}})
	a.post(t, SendWR{ID: 2, Opcode: WRWrite, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 3000, LKey: ls}}, RemoteAddr: 0x9000, RKey: ld})
	a.qp.Pump(0)
	ps := a.out.take()
	wantPkts(t, ps, pkt{bth.OpSendFirst.On(bth.TransportUC), 0, false, 1024}, pkt{bth.OpSendMiddle.On(bth.TransportUC), 1, false, 1024},
		pkt{bth.OpSendLastImm.On(bth.TransportUC), 2, false, 952},
		pkt{bth.OpWriteFirst.On(bth.TransportUC), 3, false, 1024}, pkt{bth.OpWriteMiddle.On(bth.TransportUC), 4, false, 1024},
		pkt{bth.OpWriteLast.On(bth.TransportUC), 5, false, 952})
	// UC requests complete once sent.
	wantWC(t, "send", a.sink.send, WC{ID: 1, Opcode: WCSend}, WC{ID: 2, Opcode: WCRDMAWrite})
	deliver(0, b.qp, ps)
	if out := b.out.take(); len(out) != 0 {
		t.Fatalf("UC responder sent %v", describe(out))
	}
	wantWC(t, "recv", b.sink.recv, WC{ID: 5, Opcode: WCRecv})
	if wc := b.sink.recv[0]; wc.Imm != 77 || wc.Flags != WCWithImm || wc.ByteLen != 3000 {
		t.Errorf("wc %+v", wc)
	}
	if !bytes.Equal(dst[:3000], src) || !bytes.Equal(dst[0x1000:0x1000+3000], src) {
		t.Error("data differs")
	}
}

func TestUCGapDropsMessage(t *testing.T) {
	n := ucNode(t, 0)
	dst, key := n.buf(8192, 0x10000, 0)
	n.recv(t, 1, 0x10000, 4096, key)
	n.recv(t, 2, 0x11000, 4096, key)
	uc := func(op bth.Opcode) bth.Opcode { return op.On(bth.TransportUC) }
	n.qp.Receive(0, req(t, uc(bth.OpSendFirst), 0, false, make([]byte, 1024), nil))
	// PSN 1 is lost: the LAST is dropped and nothing completes.
	n.qp.Receive(0, req(t, uc(bth.OpSendLast), 2, false, make([]byte, 10), nil))
	if len(n.sink.recv) != 0 {
		t.Fatalf("broken message completed: %+v", n.sink.recv)
	}
	// A MIDDLE and a LAST after the gap are dropped too.
	n.qp.Receive(0, req(t, uc(bth.OpSendMiddle), 3, false, make([]byte, 1024), nil))
	n.qp.Receive(0, req(t, uc(bth.OpSendLast), 4, false, make([]byte, 10), nil))
	// The next message start is accepted, into the same receive WQE.
	msg := []byte("hello")
	n.qp.Receive(0, req(t, uc(bth.OpSendOnly), 5, false, msg, nil))
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecv})
	if n.sink.recv[0].ByteLen != 5 || !bytes.Equal(dst[:5], msg) {
		t.Errorf("wc %+v data %q", n.sink.recv[0], dst[:5])
	}
	// A gap inside a WRITE: the message start after it writes normally.
	_, wk := n.buf(4096, 0x40000, 0)
	n.qp.Receive(0, req(t, uc(bth.OpWriteFirst), 6, false, make([]byte, 1024), reth(0x40000, wk, 2048)))
	n.qp.Receive(0, req(t, uc(bth.OpSendOnly), 8, false, []byte("x"), nil))
	wantWC(t, "recv", n.sink.recv, WC{ID: 1, Opcode: WCRecv}, WC{ID: 2, Opcode: WCRecv})
	if c := n.qp.Counters(); c.OutOfSequence != 2 || c.DroppedPkts != 3 {
		t.Errorf("counters %+v", *c)
	}
	if n.qp.State() != StateRTS {
		t.Errorf("state %s", n.qp.State())
	}
	// Access errors are dropped silently on UC.
	n.qp.Receive(0, req(t, uc(bth.OpWriteOnly), 9, false, make([]byte, 8), reth(0x40000, wk+9, 8)))
	if n.qp.State() != StateRTS || len(n.out.take()) != 0 {
		t.Errorf("UC access error: state %s", n.qp.State())
	}
}

func udPair(t *testing.T, mtu MTU) (*node, *node) {
	a := newNode(t, Caps{Type: UD, QPN: 0x21, PortMTU: mtu})
	b := newNode(t, Caps{Type: UD, QPN: 0x22, PortMTU: mtu})
	connect(t, a.qp, addrA, addrB, 0, defaultConn())
	connect(t, b.qp, addrB, addrA, 0, defaultConn())
	return a, b
}

func TestUDSendReceive(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		a, b := udPair(t, MTU1024)
		src, dst := addrA, addrB
		if v6 {
			src, dst = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
		}
		ah := &AddressVector{Path: pathTo(src, dst)}
		data, key := a.buf(1024, 0x1000, 3)
		a.post(t, SendWR{ID: 1, Opcode: WRSendWithImm, Imm: 9, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 1024, LKey: key}},
			AH: ah, RemoteQPN: 0x22, RemoteQKey: 0x11111111})
		a.post(t, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 10, LKey: key}},
			AH: ah, RemoteQPN: 0x22, RemoteQKey: 0x80000000}) // high bit: the QP's own Q_Key
		a.post(t, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 10, LKey: key}},
			AH: ah, RemoteQPN: 0x22, RemoteQKey: 0x5})
		a.qp.Pump(0)
		ps := a.out.take()
		wantPkts(t, ps, pkt{bth.OpUDSendOnlyImm, 0, false, 1024}, pkt{bth.OpUDSendOnly, 1, false, 10}, pkt{bth.OpUDSendOnly, 2, false, 10})
		for _, p := range ps {
			if p.DETH().SrcQP() != 0x21 || p.BTH().DestQP() != 0x22 || p.SrcPort() != bth.UDSourcePort(0x21) {
				t.Errorf("deth srcqp %#x destqp %#x sport %d", p.DETH().SrcQP(), p.BTH().DestQP(), p.SrcPort())
			}
		}
		if ps[0].DETH().QKey() != 0x11111111 || ps[1].DETH().QKey() != 0x11111111 || ps[2].DETH().QKey() != 5 {
			t.Error("Q_Keys")
		}
		wantWC(t, "send", a.sink.send, WC{ID: 1}, WC{ID: 2}, WC{ID: 3})

		buf, rk := b.buf(2048, 0x8000, 0)
		b.recv(t, 7, 0x8000, 2048, rk)
		b.recv(t, 8, 0x8000, 2048, rk)
		deliver(0, b.qp, ps)
		wantWC(t, "recv", b.sink.recv, WC{ID: 7, Opcode: WCRecv}, WC{ID: 8, Opcode: WCRecv})
		wc := b.sink.recv[0]
		if wc.ByteLen != grhLen+1024 || wc.Flags != WCWithGRH|WCWithImm || wc.Imm != 9 || wc.SrcQP != 0x21 {
			t.Errorf("wc %+v", wc)
		}
		if b.qp.Counters().QKeyViolation != 1 {
			t.Errorf("qkey_violation %d", b.qp.Counters().QKeyViolation)
		}
		// The GRH slot: the IPv6 header, or 20 zero bytes and the IPv4 header.
		f := ps[1].Frame
		if v6 {
			if !bytes.Equal(buf[:40], f[ps[1].L3:ps[1].L3+40]) {
				t.Error("IPv6 GRH slot")
			}
		} else if !bytes.Equal(buf[:20], make([]byte, 20)) || !bytes.Equal(buf[20:40], f[ps[1].L3:ps[1].L3+20]) {
			t.Error("IPv4 GRH slot")
		}
		if !bytes.Equal(buf[40:50], data[:10]) {
			t.Error("payload")
		}
	}
}

func TestUDErrors(t *testing.T) {
	a, b := udPair(t, MTU256)
	ah := &AddressVector{Path: pathTo(addrA, addrB)}
	_, key := a.buf(1024, 0x1000, 3)
	a.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 257, LKey: key}}, AH: ah, RemoteQPN: 0x22})
	a.post(t, SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 1, LKey: key}}, AH: ah, RemoteQPN: 0x22})
	a.qp.Pump(0)
	if len(a.out.take()) != 0 || a.qp.State() != StateSQE {
		t.Fatalf("oversized UD message: state %s", a.qp.State())
	}
	wantWC(t, "send", a.sink.send, WC{ID: 1, Status: WCLocLenErr}, WC{ID: 2, Status: WCWRFlushErr})
	// SQE -> RTS resumes.
	at := Attr{State: StateRTS, CurState: StateSQE}
	if err := a.qp.Modify(0, &at, AttrState|AttrCurState); err != nil {
		t.Fatal(err)
	}
	a.post(t, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x1000, Length: 100, LKey: key}}, AH: ah, RemoteQPN: 0x22, RemoteQKey: 0x11111111})
	a.qp.Pump(0)
	ps := a.out.take()
	if len(ps) != 1 {
		t.Fatal("no packet after SQE -> RTS")
	}
	// No receive posted: dropped and counted; no RNR for UD.
	b.qp.Receive(0, ps[0])
	if b.qp.Counters().DroppedPkts != 1 || len(b.out.take()) != 0 {
		t.Error("UD without a receive")
	}
	// A receive too small for GRH + payload: local length error.
	_, rk := b.buf(100, 0x8000, 0)
	b.recv(t, 1, 0x8000, 100, rk)
	b.recv(t, 2, 0x8000, 100, rk)
	b.qp.Receive(0, ps[0])
	wantWC(t, "recv", b.sink.recv, WC{ID: 1, Status: WCLocLenErr, Opcode: WCRecv}, WC{ID: 2, Status: WCWRFlushErr, Opcode: WCRecv})
}

func TestCNPCounted(t *testing.T) {
	for _, typ := range []Type{RC, UC, UD} {
		n := single(t, Caps{Type: typ}, defaultConn())
		h := hdr(bth.OpCNP, 0)
		h.BTH.BECN = true
		n.qp.Receive(0, craft(t, h, nil))
		if c := n.qp.Counters(); c.CNPRcvd != 1 || c.DroppedPkts != 0 {
			t.Errorf("%s: counters %+v", typ, *c)
		}
	}
}

func TestForeignPacketsDropped(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	// A UC packet to an RC QP, a wrong P_Key, an RC response nobody asked for.
	n.qp.Receive(0, req(t, bth.OpSendOnly.On(bth.TransportUC), 0, true, nil, nil))
	n.qp.Receive(0, req(t, bth.OpSendOnly, 0, true, nil, func(h *bth.Headers) { h.BTH.PKey = 0x1234 }))
	n.qp.Receive(0, ackPkt(t, 0, bth.SyndromeACKNoCredits, 0))
	if c := n.qp.Counters(); c.DroppedPkts != 3 || len(n.out.take()) != 0 {
		t.Errorf("counters %+v", *c)
	}
	n.qp.Receive(0, nil)
	n.qp.Receive(0, &bth.Packet{})
}
