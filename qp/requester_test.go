package qp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/uroce/uroce/bth"
)

func TestSegmentationByMTU(t *testing.T) {
	for m := MTU256; m <= MTU4096; m++ {
		mtu := m.Bytes()
		o := defaultConn()
		o.mtu, o.sqPSN = m, 1000
		n := single(t, Caps{SendWindow: -1}, o) // A bits on last packets only
		data, key := n.buf(3*mtu+5, 0x10000, 1)
		n.post(t, SendWR{ID: 1, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: uint32(len(data)), LKey: key}}})
		n.post(t, SendWR{ID: 2, Opcode: WRWriteWithImm, Imm: 0xabcd, RemoteAddr: 0x5000, RKey: 77,
			SG: []SGE{{Addr: 0x10000, Length: uint32(2 * mtu), LKey: key}}})
		n.post(t, SendWR{ID: 3, Opcode: WRSendWithInv, InvRKey: 0x4242, Flags: SendSolicited,
			SG: []SGE{{Addr: 0x10000, Length: uint32(mtu), LKey: key}}})
		n.post(t, SendWR{ID: 4, Opcode: WRWrite, RemoteAddr: 0x6000, RKey: 78})
		n.qp.Pump(0)
		ps := n.out.take()
		wantPkts(t, ps,
			pkt{bth.OpSendFirst, 1000, false, mtu},
			pkt{bth.OpSendMiddle, 1001, false, mtu},
			pkt{bth.OpSendMiddle, 1002, false, mtu},
			pkt{bth.OpSendLast, 1003, true, 5},
			pkt{bth.OpWriteFirst, 1004, false, mtu},
			pkt{bth.OpWriteLastImm, 1005, true, mtu},
			pkt{bth.OpSendOnlyInv, 1006, true, mtu},
			pkt{bth.OpWriteOnly, 1007, true, 0},
		)
		var got []byte
		for _, p := range ps[:4] {
			got = append(got, p.Payload()...)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("mtu %d: segmented payload differs", mtu)
		}
		if r := ps[4].RETH(); r.VA() != 0x5000 || r.RKey() != 77 || r.DMALen() != uint32(2*mtu) {
			t.Errorf("WRITE_FIRST RETH va %#x rkey %d len %d", r.VA(), r.RKey(), r.DMALen())
		}
		if ps[5].ImmDt().Value() != 0xabcd || ps[5].RETH() != nil {
			t.Errorf("WRITE_LAST_IMM imm %#x", ps[5].ImmDt().Value())
		}
		if ps[6].IETH().RKey() != 0x4242 || !ps[6].BTH().SE() {
			t.Errorf("SEND_ONLY_INV ieth %#x se %v", ps[6].IETH().RKey(), ps[6].BTH().SE())
		}
		if r := ps[7].RETH(); r.DMALen() != 0 || r.VA() != 0x6000 {
			t.Errorf("zero-length WRITE_ONLY RETH %#x %d", r.VA(), r.DMALen())
		}
		for _, p := range ps {
			if p.SrcPort() != bth.SourcePort(0, localQPN, peerQPN) || p.BTH().DestQP() != peerQPN || p.BTH().PKey() != 0xffff {
				t.Fatalf("sport %d destqp %#x pkey %#x", p.SrcPort(), p.BTH().DestQP(), p.BTH().PKey())
			}
		}
	}
}

func TestPeriodicAckRequest(t *testing.T) {
	o := defaultConn()
	o.mtu = MTU256
	n := single(t, Caps{SendWindow: -1}, o) // no window: maxAckEvery applies
	_, key := n.buf(200*256, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRWrite, SG: []SGE{{Addr: 0x10000, Length: 200 * 256, LKey: key}}})
	n.qp.Pump(0)
	ps := n.out.take()
	if len(ps) != 200 {
		t.Fatalf("%d packets", len(ps))
	}
	var acks []int
	for i, p := range ps {
		if p.BTH().AckReq() {
			acks = append(acks, i)
		}
	}
	if len(acks) != 4 || acks[0] != maxAckEvery-1 || acks[1] != 2*maxAckEvery-1 || acks[2] != 3*maxAckEvery-1 || acks[3] != 199 {
		t.Fatalf("A bit on packets %v", acks)
	}
}

func TestReadConsumesResponsePSNs(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 50
	n := single(t, Caps{}, o)
	_, key := n.buf(4096, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, SG: []SGE{{Addr: 0x10000, Length: 2500, LKey: key}}, RemoteAddr: 0x7000, RKey: 9})
	n.post(t, SendWR{ID: 2, Opcode: WRFetchAdd, SG: []SGE{{Addr: 0x10000, Length: 8, LKey: key}}, RemoteAddr: 0x8000, RKey: 10, CompareAdd: 5})
	n.post(t, SendWR{ID: 3, Opcode: WRCompareSwap, SG: []SGE{{Addr: 0x10008, Length: 8, LKey: key}}, RemoteAddr: 0x8008, RKey: 10, CompareAdd: 1, Swap: 2})
	n.post(t, SendWR{ID: 4, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
	n.qp.Pump(0)
	ps := n.out.take()
	wantPkts(t, ps,
		pkt{bth.OpReadRequest, 50, true, 0},
		pkt{bth.OpFetchAdd, 53, true, 0},
		pkt{bth.OpCompareSwap, 54, true, 0},
		pkt{bth.OpSendOnly, 55, true, 10},
	)
	if r := ps[0].RETH(); r.VA() != 0x7000 || r.RKey() != 9 || r.DMALen() != 2500 {
		t.Errorf("READ RETH %#x %d %d", r.VA(), r.RKey(), r.DMALen())
	}
	if a := ps[1].AtomicETH(); a.VA() != 0x8000 || a.RKey() != 10 || a.SwapAdd() != 5 {
		t.Errorf("FETCH_ADD %#x %d %d", a.VA(), a.RKey(), a.SwapAdd())
	}
	if a := ps[2].AtomicETH(); a.VA() != 0x8008 || a.SwapAdd() != 2 || a.Compare() != 1 {
		t.Errorf("CMP_SWAP %#x swap %d compare %d", a.VA(), a.SwapAdd(), a.Compare())
	}
}

func TestMaxRdAtomicAndFence(t *testing.T) {
	o := defaultConn()
	o.rdAtomic = 2
	n := single(t, Caps{}, o)
	_, key := n.buf(4096, 0x10000, 1)
	rd := func(id uint64) SendWR {
		return SendWR{ID: id, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 100, LKey: key}}, RemoteAddr: 0x7000, RKey: 9}
	}
	n.post(t, rd(1))
	n.post(t, rd(2))
	n.post(t, rd(3))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 0, true, 0}, pkt{bth.OpReadRequest, 1, true, 0})
	if n.qp.Busy() {
		t.Error("busy while max_rd_atomic is used up")
	}
	resp := hdr(bth.OpReadRespOnly, 0)
	resp.Syndrome = bth.SyndromeACKNoCredits
	n.qp.Receive(0, craft(t, resp, make([]byte, 100)))
	if !n.qp.Busy() {
		t.Error("not busy after a READ completed")
	}
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 2, true, 0})
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCRDMARead})

	// A fenced SEND waits for the outstanding READs.
	n.post(t, SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled | SendFence, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("fenced send went out: %v", describe(ps))
	}
	for _, psn := range []bth.PSN{1, 2} {
		resp := hdr(bth.OpReadRespOnly, psn)
		n.qp.Receive(0, craft(t, resp, make([]byte, 100)))
	}
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpSendOnly, 3, true, 10})
	n.qp.Receive(0, ackPkt(t, 3, bth.SyndromeACKNoCredits, 4))
	wantWC(t, "all", n.sink.send, WC{ID: 1, Opcode: WCRDMARead}, WC{ID: 2, Opcode: WCRDMARead},
		WC{ID: 3, Opcode: WCRDMARead}, WC{ID: 4, Opcode: WCSend})
}

func TestPSNWrap(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 0xfffffe
	o.mtu = MTU256
	n := single(t, Caps{}, o)
	n.dropsPastGap()
	_, key := n.buf(1000, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 1000, LKey: key}}})
	n.post(t, SendWR{ID: 2, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 512, LKey: key}}, RemoteAddr: 0x7000, RKey: 9})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(),
		pkt{bth.OpSendFirst, 0xfffffe, false, 256},
		pkt{bth.OpSendMiddle, 0xffffff, false, 256},
		pkt{bth.OpSendMiddle, 0, false, 256},
		pkt{bth.OpSendLast, 1, true, 232},
		pkt{bth.OpReadRequest, 2, true, 0},
	)
	// A NAK across the wrap goes back to 0xffffff.
	n.qp.Receive(0, ackPkt(t, 0xffffff, bth.SyndromePSNSeqErr, 0))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(),
		pkt{bth.OpSendMiddle, 0xffffff, false, 256},
		pkt{bth.OpSendMiddle, 0, false, 256},
		pkt{bth.OpSendLast, 1, true, 232},
		pkt{bth.OpReadRequest, 2, true, 0},
	)
	n.qp.Receive(0, ackPkt(t, 1, bth.SyndromeACKNoCredits, 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1, Opcode: WCSend})
	for i, op := range []bth.Opcode{bth.OpReadRespFirst, bth.OpReadRespLast} {
		n.qp.Receive(0, craft(t, hdr(op, bth.PSN(2+i)), make([]byte, 256)))
	}
	wantWC(t, "read", n.sink.send, WC{ID: 1, Opcode: WCSend}, WC{ID: 2, Opcode: WCRDMARead})
	if n.qp.Busy() {
		t.Error("busy after everything completed")
	}
	if _, ok := n.qp.Deadline(); ok {
		t.Error("ACK timer still armed")
	}
}

func TestGatherMultiSGEAndInline(t *testing.T) {
	o := defaultConn()
	o.mtu = MTU256
	n := single(t, Caps{MaxInline: 64}, o)
	a, ka := n.buf(100, 0x10000, 1)
	b, kb := n.buf(300, 0x20000, 2)
	c, kc := n.buf(7, 0x30000, 3)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 100, LKey: ka}, {Addr: 0x20000, Length: 300, LKey: kb}, {Addr: 0x30000, Length: 7, LKey: kc}}})
	n.post(t, SendWR{ID: 2, Opcode: WRSend, Flags: SendInline, SG: []SGE{{Addr: 0x30000, Length: 7, LKey: kc}, {Addr: 0x10000, Length: 10, LKey: ka}}})
	c[0] ^= 0xff // inline data was copied at post time
	n.qp.Pump(0)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpSendFirst, 0, false, 256}, pkt{bth.OpSendLast, 1, true, 151}, pkt{bth.OpSendOnly, 2, true, 17})
	want := append(append(append([]byte{}, a...), b...), c...)
	if got := append(append([]byte{}, ps[0].Payload()...), ps[1].Payload()...); !bytes.Equal(got, want) {
		t.Error("gathered payload differs")
	}
	c[0] ^= 0xff
	if got := ps[2].Payload(); !bytes.Equal(got, append(append([]byte{}, c...), a[:10]...)) {
		t.Error("inline payload differs")
	}
}

func TestOutputFullKeepsPacket(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(3000, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: key}}})
	n.out.full = true
	n.qp.Pump(0)
	if !n.qp.Busy() {
		t.Fatal("not busy with a refused packet")
	}
	if _, ok := n.qp.Deadline(); ok {
		t.Error("ACK timer armed before anything was sent")
	}
	n.out.full = false
	n.qp.Pump(5)
	wantPkts(t, n.out.take(), pkt{bth.OpSendFirst, 0, false, 1024}, pkt{bth.OpSendMiddle, 1, false, 1024}, pkt{bth.OpSendLast, 2, true, 952})
	if d, ok := n.qp.Deadline(); !ok || d != 5+ackTimeoutDur(14) {
		t.Errorf("deadline %v %v", d, ok)
	}
	if n.qp.Counters().SentPkts != 3 || n.qp.Counters().RetransmittedPkts != 0 {
		t.Errorf("counters %+v", *n.qp.Counters())
	}
}

func TestLocalErrorsOnSend(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	_, key := n.buf(100, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 100, LKey: key}}})
	n.post(t, SendWR{ID: 2, Opcode: WRSend, SG: []SGE{{Addr: 0x10000, Length: 200, LKey: key}}}) // out of bounds
	n.post(t, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
	n.qp.Pump(0)
	if n.qp.State() != StateErr {
		t.Fatalf("state %s", n.qp.State())
	}
	wantWC(t, "send", n.sink.send, WC{ID: 1, Status: WCWRFlushErr}, WC{ID: 2, Status: WCLocProtErr}, WC{ID: 3, Status: WCWRFlushErr})

	// A READ into memory without local write permission.
	n = single(t, Caps{}, defaultConn())
	ro := n.mem.reg(make([]byte, 64), 0x10000, 0)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, SG: []SGE{{Addr: 0x10000, Length: 64, LKey: ro}}, RemoteAddr: 1, RKey: 1})
	n.qp.Pump(0)
	wantWC(t, "read", n.sink.send, WC{ID: 1, Status: WCLocProtErr, Opcode: WCRDMARead})

	// max_rd_atomic 0 forbids READs.
	o := defaultConn()
	o.rdAtomic = 0
	n = single(t, Caps{}, o)
	_, key = n.buf(100, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRRead, SG: []SGE{{Addr: 0x10000, Length: 8, LKey: key}}})
	n.qp.Pump(0)
	wantWC(t, "read", n.sink.send, WC{ID: 1, Status: WCLocQPOpErr, Opcode: WCRDMARead})
}

func TestPostSendErrors(t *testing.T) {
	n := single(t, Caps{MaxSendWR: 2, MaxSendSGE: 1, MaxInline: 16}, defaultConn())
	two := []SGE{{Length: 1}, {Length: 1}}
	if err := n.qp.PostSend(0, &SendWR{SG: two}); !errors.Is(err, ErrTooManySGE) {
		t.Errorf("too many sges: %v", err)
	}
	if err := n.qp.PostSend(0, &SendWR{Opcode: WRSend, Flags: SendInline, SG: []SGE{{Length: 17}}}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("inline too long: %v", err)
	}
	if err := n.qp.PostSend(0, &SendWR{Opcode: WRFetchAdd, SG: []SGE{{Length: 4}}}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("atomic of 4 bytes: %v", err)
	}
	if err := n.qp.PostSend(0, &SendWR{Opcode: 99}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("bad opcode: %v", err)
	}
	if err := n.qp.PostSend(0, &SendWR{Opcode: WRSend, SG: []SGE{{Length: maxMessage + 1}}}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("message too long: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := n.qp.PostSend(0, &SendWR{Opcode: WRSend}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.qp.PostSend(0, &SendWR{Opcode: WRSend}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("queue full: %v", err)
	}
	u := newNode(t, Caps{Type: UC, QPN: 0x30})
	connect(t, u.qp, addrA, addrB, 0x31, defaultConn())
	for _, op := range []WROpcode{WRRead, WRCompareSwap, WRFetchAdd, WRSendWithInv} {
		if err := u.qp.PostSend(0, &SendWR{Opcode: op, SG: []SGE{{Length: 8}}}); !errors.Is(err, ErrInvalidWR) {
			t.Errorf("UC %s: %v", op, err)
		}
	}
	d := newNode(t, Caps{Type: UD, QPN: 0x32})
	connect(t, d.qp, addrA, addrB, 0, defaultConn())
	for _, op := range []WROpcode{WRWrite, WRRead, WRWriteWithImm} {
		if err := d.qp.PostSend(0, &SendWR{Opcode: op, AH: &AddressVector{}}); !errors.Is(err, ErrInvalidWR) {
			t.Errorf("UD %s: %v", op, err)
		}
	}
	if err := d.qp.PostSend(0, &SendWR{Opcode: WRSend}); !errors.Is(err, ErrInvalidWR) {
		t.Errorf("UD without AH: %v", err)
	}
}

func TestUnsignaledAndSignalAll(t *testing.T) {
	for _, all := range []bool{false, true} {
		n := single(t, Caps{SignalAll: all}, defaultConn())
		_, key := n.buf(100, 0x10000, 1)
		for i := uint64(1); i <= 3; i++ {
			fl := SendSignaled
			if i == 2 {
				fl = 0
			}
			n.post(t, SendWR{ID: i, Opcode: WRWrite, Flags: fl, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
		}
		n.qp.Pump(0)
		n.out.take()
		n.qp.Receive(0, ackPkt(t, 1, bth.SyndromeACKNoCredits, 2))
		want := []WC{{ID: 1, Opcode: WCRDMAWrite}}
		if all {
			want = append(want, WC{ID: 2, Opcode: WCRDMAWrite})
		}
		wantWC(t, "first two", n.sink.send, want...)
		n.qp.Receive(0, ackPkt(t, 2, bth.SyndromeACKNoCredits, 3))
		want = append(want, WC{ID: 3, Opcode: WCRDMAWrite})
		wantWC(t, "all", n.sink.send, want...)
	}
}

// TestReadWindow: READs wait while their responses outstanding would
// pass the READ window, one READ always goes (even one larger than the
// window), the window frees as READs complete, a negative window leaves
// max_rd_atomic alone as the bound, and the default is
// DefaultReadWindow.
func TestReadWindow(t *testing.T) {
	o := defaultConn()
	o.rdAtomic = 8
	rd := func(id uint64, key uint32, length uint32) SendWR {
		return SendWR{ID: id, Opcode: WRRead, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: length, LKey: key}},
			RemoteAddr: 0x7000, RKey: 9}
	}
	n := single(t, Caps{ReadWindow: 3000}, o)
	_, key := n.buf(8192, 0x10000, 1)
	for id := uint64(1); id <= 4; id++ {
		n.post(t, rd(id, key, 1024))
	}
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 0, true, 0}, pkt{bth.OpReadRequest, 1, true, 0})
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespOnly, 0), make([]byte, 1024)))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 2, true, 0})
	for _, psn := range []bth.PSN{1, 2} {
		n.qp.Receive(0, craft(t, hdr(bth.OpReadRespOnly, psn), make([]byte, 1024)))
	}
	// The last READ alone; then one past the window, alone too.
	n.post(t, rd(5, key, 5000))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 3, true, 0})
	n.qp.Receive(0, craft(t, hdr(bth.OpReadRespOnly, 3), make([]byte, 1024)))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 4, true, 0})
	wantWC(t, "reads", n.sink.send, WC{ID: 1, Opcode: WCRDMARead}, WC{ID: 2, Opcode: WCRDMARead},
		WC{ID: 3, Opcode: WCRDMARead}, WC{ID: 4, Opcode: WCRDMARead})

	n = single(t, Caps{ReadWindow: -1}, o)
	_, key = n.buf(8192, 0x10000, 1)
	for id := uint64(1); id <= 4; id++ {
		n.post(t, rd(id, key, 1024))
	}
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 4 {
		t.Errorf("no READ window: %d READs went, want 4", len(ps))
	}

	n = single(t, Caps{}, o)
	_, key = n.buf(DefaultReadWindow, 0x10000, 1)
	for id := uint64(1); id <= 3; id++ {
		n.post(t, rd(id, key, DefaultReadWindow/2))
	}
	n.qp.Pump(0)
	if ps := n.out.take(); len(ps) != 2 {
		t.Errorf("default READ window: %d READs of half of it went, want 2", len(ps))
	}
}
