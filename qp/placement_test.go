package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/uroce/uroce/bth"
)

// Memory placement: FLUSH and ATOMIC_WRITE (IBA 1.5 annex A19), as
// rdma_rxe executes and answers them.

// wantPlaced checks that ps is one RDMA READ response ONLY with no
// payload at psn, an ACK syndrome and MSN msn: the answer to a FLUSH or
// ATOMIC_WRITE.
func wantPlaced(t *testing.T, ps []*bth.Packet, psn bth.PSN, msn uint32) {
	t.Helper()
	wantPkts(t, ps, pkt{bth.OpReadRespOnly, psn, false, 0})
	a := ps[0].AETH()
	if a.Syndrome().Kind() != bth.AckKindACK || a.MSN() != msn {
		t.Fatalf("answer syndrome %#x msn %d, want an ACK, msn %d", a.Syndrome(), a.MSN(), msn)
	}
	if ps[0].BTH().PadCount() != 0 {
		t.Fatalf("answer pad %d", ps[0].BTH().PadCount())
	}
}

func atomicWrite(t *testing.T, psn bth.PSN, va uint64, key uint32, v uint64) *bth.Packet {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return req(t, bth.OpAtomicWrite, psn, true, b[:], reth(va, key, 8))
}

func flush(t *testing.T, psn bth.PSN, placement, level uint8, va uint64, key, n uint32) *bth.Packet {
	return req(t, bth.OpFlush, psn, true, nil, func(h *bth.Headers) {
		h.VA, h.RKey, h.DMALen = va, key, n
		h.FETH = bth.FETHValue(placement, level)
	})
}

func TestResponderAtomicWrite(t *testing.T) {
	n := respNode(t, 0)
	mem, key := n.buf(64, 0x20000, 0)
	before := bytes.Clone(mem)
	n.qp.Receive(0, atomicWrite(t, 0, 0x20008, key, 0x1122334455667788))
	wantPlaced(t, n.out.take(), 0, 1)
	if v := binary.NativeEndian.Uint64(mem[8:]); v != 0x1122334455667788 {
		t.Fatalf("target holds %#x", v)
	}
	if !bytes.Equal(mem[:8], before[:8]) || !bytes.Equal(mem[16:], before[16:]) {
		t.Fatal("bytes around the target changed")
	}
	// A duplicate is answered again, with the saved MSN, and not
	// executed again: what was stored since stays.
	n.qp.Receive(0, atomicWrite(t, 1, 0x20010, key, 7))
	wantPlaced(t, n.out.take(), 1, 2)
	binary.NativeEndian.PutUint64(mem[8:], 42)
	n.qp.Receive(0, atomicWrite(t, 0, 0x20008, key, 0x1122334455667788))
	wantPlaced(t, n.out.take(), 0, 1)
	if v := binary.NativeEndian.Uint64(mem[8:]); v != 42 {
		t.Fatalf("duplicate executed again: target holds %#x", v)
	}
	if c := n.qp.Counters(); c.DuplicateRequest != 1 {
		t.Errorf("duplicate_request %d", c.DuplicateRequest)
	}
	if n.qp.State() != StateRTS {
		t.Fatalf("state %s", n.qp.State())
	}
}

func TestResponderFlush(t *testing.T) {
	n := respNode(t, 0)
	b := make([]byte, 4096)
	key := n.mem.reg(b, 0x20000, AccessLocalWrite|AccessRemoteWrite|AccessFlushGlobal|AccessFlushPersistent)
	g, p := uint8(FlushGlobal), uint8(FlushPersistent)
	n.qp.Receive(0, flush(t, 0, g, uint8(FlushRange), 0x20100, key, 256))
	wantPlaced(t, n.out.take(), 0, 1)
	n.qp.Receive(0, flush(t, 1, g|p, uint8(FlushRange), 0x20000, key, 4096))
	wantPlaced(t, n.out.take(), 1, 2)
	// A whole-region FLUSH ignores the address and length.
	n.qp.Receive(0, flush(t, 2, p, uint8(FlushMR), 0, key, 0))
	wantPlaced(t, n.out.take(), 2, 3)
	// Duplicates are answered again.
	n.qp.Receive(0, flush(t, 1, g|p, uint8(FlushRange), 0x20000, key, 4096))
	wantPlaced(t, n.out.take(), 1, 2)
	// A WRITE then a FLUSH of it: both in order, one answer each.
	n.qp.Receive(0, req(t, bth.OpWriteOnly, 3, true, []byte("placed"), reth(0x20200, key, 6)))
	n.qp.Receive(0, flush(t, 4, g, uint8(FlushRange), 0x20200, key, 6))
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpAck, 3, false, 0}, pkt{bth.OpReadRespOnly, 4, false, 0})
	if string(b[0x200:0x206]) != "placed" {
		t.Fatalf("write landed as %q", b[0x200:0x206])
	}
	if n.qp.State() != StateRTS {
		t.Fatalf("state %s", n.qp.State())
	}
}

func TestResponderPlacementErrors(t *testing.T) {
	g, p := uint8(FlushGlobal), uint8(FlushPersistent)
	rng, whole := uint8(FlushRange), uint8(FlushMR)
	cases := []struct {
		name   string
		access Access // the QP's rights, 0: defaultConn's
		pkt    func(t *testing.T, key, wkey, gkey uint32) *bth.Packet
		syn    bth.Syndrome
	}{
		{"atomic write misaligned", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return atomicWrite(t, 0, 0x20004, key, 1)
		}, bth.SyndromeInvalidReq},
		{"atomic write of 16 bytes", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return req(t, bth.OpAtomicWrite, 0, true, make([]byte, 16), reth(0x20000, key, 16))
		}, bth.SyndromeInvalidReq},
		{"atomic write length 8, 4 bytes", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return req(t, bth.OpAtomicWrite, 0, true, make([]byte, 4), reth(0x20000, key, 8))
		}, bth.SyndromeInvalidReq},
		{"atomic write bad rkey", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return atomicWrite(t, 0, 0x20000, key+100, 1)
		}, bth.SyndromeRemoteAccess},
		{"atomic write outside the region", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return atomicWrite(t, 0, 0x21000, key, 1)
		}, bth.SyndromeRemoteAccess},
		{"atomic write to a region without remote write", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return atomicWrite(t, 0, 0x30000, gkey, 1)
		}, bth.SyndromeRemoteAccess},
		{"atomic write on a qp without remote write", AccessRemoteRead | AccessFlushGlobal, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return atomicWrite(t, 0, 0x20000, key, 1)
		}, bth.SyndromeInvalidReq},
		{"flush on a qp without flush rights", AccessRemoteWrite | AccessFlushGlobal, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return flush(t, 0, p, rng, 0x20000, key, 8)
		}, bth.SyndromeInvalidReq},
		{"flush of a region without the placement type", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return flush(t, 0, g|p, whole, 0, gkey, 0)
		}, bth.SyndromeRemoteAccess},
		{"flush of a region without flush rights", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return flush(t, 0, g, rng, 0x40000, wkey, 8)
		}, bth.SyndromeRemoteAccess},
		{"flush outside the region", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return flush(t, 0, g, rng, 0x20f00, key, 512)
		}, bth.SyndromeRemoteAccess},
		{"flush bad rkey, no bytes", 0, func(t *testing.T, key, wkey, gkey uint32) *bth.Packet {
			return flush(t, 0, g, rng, 0x20000, 0, 0)
		}, bth.SyndromeRemoteAccess},
	}
	for _, c := range cases {
		o := defaultConn()
		if c.access != 0 {
			o.access = c.access
		}
		n := single(t, Caps{}, o)
		all := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal | AccessFlushPersistent
		key := n.mem.reg(make([]byte, 4096), 0x20000, all)
		gkey := n.mem.reg(make([]byte, 4096), 0x30000, AccessFlushGlobal)
		wkey := n.mem.reg(make([]byte, 4096), 0x40000, AccessLocalWrite|AccessRemoteWrite)
		n.qp.Receive(0, c.pkt(t, key, wkey, gkey))
		ps := n.out.take()
		if len(ps) != 1 || ps[0].Opcode() != bth.OpAck || ps[0].AETH().Syndrome() != c.syn || ps[0].BTH().PSN() != 0 {
			t.Errorf("%s: sent %v, want a NAK %#x at 0", c.name, describe(ps), c.syn)
			continue
		}
		if n.qp.State() != StateErr {
			t.Errorf("%s: state %s", c.name, n.qp.State())
		}
	}
}

// The requests on the wire, byte for byte from the BTH on, as rdma_rxe
// builds them (rxe_req.c init_req_packet, rxe_hdr.h feth_init): the A
// bit set, no SE, pad 0, the default P_Key; FLUSH: FETH (selectivity in
// bits 5-4, placement in 3-0) then RETH, no payload; ATOMIC_WRITE: RETH
// with length 8, then the 8 bytes.
func TestRequesterPlacementPackets(t *testing.T) {
	o := defaultConn()
	o.sqPSN = 0x123456
	n := single(t, Caps{MaxInline: 16}, o)
	src, lkey := n.buf(64, 0x10000, 0)
	copy(src, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	n.post(t, SendWR{ID: 1, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: 0x1122334455667788, RKey: 0xa1b2c3d4,
		FlushType: FlushPersistent, FlushLevel: FlushMR, FlushLen: 0x1000})
	n.post(t, SendWR{ID: 2, Opcode: WRAtomicWrite, Flags: SendSignaled, RemoteAddr: 0x20008, RKey: 0x55,
		SG: []SGE{{Addr: 0x10000, Length: 8, LKey: lkey}}})
	n.post(t, SendWR{ID: 3, Opcode: WRAtomicWrite, Flags: SendSignaled | SendInline, RemoteAddr: 0x20010, RKey: 0x55,
		Inline: []byte{9, 10, 11, 12, 13, 14, 15, 16}})
	n.qp.Pump(0)
	ps := n.out.take()
	wantPkts(t, ps, pkt{bth.OpFlush, 0x123456, true, 0}, pkt{bth.OpAtomicWrite, 0x123457, true, 8},
		pkt{bth.OpAtomicWrite, 0x123458, true, 8})
	want := [][]byte{
		{0x1c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, peerQPN, 0x80, 0x12, 0x34, 0x56,
			0x00, 0x00, 0x00, 0x12,
			0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xa1, 0xb2, 0xc3, 0xd4, 0x00, 0x00, 0x10, 0x00},
		{0x1d, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, peerQPN, 0x80, 0x12, 0x34, 0x57,
			0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x08, 0x00, 0x00, 0x00, 0x55, 0x00, 0x00, 0x00, 0x08,
			1, 2, 3, 4, 5, 6, 7, 8},
		{0x1d, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, peerQPN, 0x80, 0x12, 0x34, 0x58,
			0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x10, 0x00, 0x00, 0x00, 0x55, 0x00, 0x00, 0x00, 0x08,
			9, 10, 11, 12, 13, 14, 15, 16},
	}
	for i, p := range ps {
		got := p.Frame[p.BTHOff : p.End-bth.ICRCLen]
		if !bytes.Equal(got, want[i]) {
			t.Errorf("packet %d:\n got % x\nwant % x", i, got, want[i])
		}
	}
	// Answered as rdma_rxe answers: an RDMA READ response ONLY of no
	// bytes each; the completions carry rdma-core's opcodes.
	for k := range 3 {
		h := hdr(bth.OpReadRespOnly, 0x123456+bth.PSN(k))
		h.Syndrome, h.MSN = bth.Syndrome(0x1f), uint32(k+1)
		n.qp.Receive(0, craft(t, h, nil))
	}
	wantWC(t, "send", n.sink.send, WC{ID: 1, Opcode: WCFlush}, WC{ID: 2, Opcode: WCAtomicWrite, ByteLen: 8},
		WC{ID: 3, Opcode: WCAtomicWrite, ByteLen: 8})
	if WCFlush != 8 || WCAtomicWrite != 9 || AccessFlushGlobal != 1<<8 || AccessFlushPersistent != 1<<9 {
		t.Error("values differ from rdma-core's")
	}
}

func TestRequesterPlacementChecks(t *testing.T) {
	n := single(t, Caps{MaxInline: 16}, defaultConn())
	_, lkey := n.buf(64, 0x10000, 0)
	bad := []SendWR{
		{Opcode: WRAtomicWrite, SG: []SGE{{Addr: 0x10000, Length: 4, LKey: lkey}}},
		{Opcode: WRAtomicWrite, Flags: SendInline, Inline: make([]byte, 16)},
		{Opcode: WRFlush, FlushType: 0},
		{Opcode: WRFlush, FlushType: 4},
		{Opcode: WRFlush, FlushType: FlushGlobal, FlushLevel: 2},
		{Opcode: WRFlush, FlushType: FlushGlobal, SG: []SGE{{Addr: 0x10000, Length: 4, LKey: lkey}}},
	}
	for i := range bad {
		if err := n.qp.PostSend(0, &bad[i]); err == nil {
			t.Errorf("%d: %+v posted", i, bad[i])
		}
	}
	u := single(t, Caps{Type: UC}, defaultConn())
	if err := u.qp.PostSend(0, &SendWR{Opcode: WRFlush, FlushType: FlushGlobal}); err == nil {
		t.Error("flush posted on a uc qp")
	}
}

// A FLUSH or ATOMIC_WRITE holds a max_rd_atomic credit until answered;
// a NAK fails it with the status the syndrome gives.
func TestRequesterPlacementCreditsAndNAK(t *testing.T) {
	o := defaultConn()
	o.rdAtomic = 1
	n := single(t, Caps{}, o) // ATOMIC_WRITE's inline data needs no max_inline
	n.post(t, SendWR{ID: 1, Opcode: WRFlush, Flags: SendSignaled, RKey: 5, FlushType: FlushGlobal, FlushLevel: FlushMR})
	n.post(t, SendWR{ID: 2, Opcode: WRAtomicWrite, Flags: SendSignaled | SendInline, RemoteAddr: 0x20000, RKey: 5,
		Inline: make([]byte, 8)})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpFlush, 0, true, 0})
	// A stray atomic ACK answers nothing.
	h := hdr(bth.OpAtomicAck, 0)
	h.Syndrome, h.MSN = 0x1f, 1
	n.qp.Receive(0, craft(t, h, nil))
	n.qp.Pump(0)
	if len(n.sink.send) != 0 || len(n.out.take()) != 0 {
		t.Fatalf("completions %v", n.sink.send)
	}
	h = hdr(bth.OpReadRespOnly, 0)
	h.Syndrome, h.MSN = 0x1f, 1
	n.qp.Receive(0, craft(t, h, nil))
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpAtomicWrite, 1, true, 8})
	n.qp.Receive(0, ackPkt(t, 1, bth.SyndromeRemoteAccess, 1))
	wantWC(t, "send", n.sink.send, WC{ID: 1, Opcode: WCFlush}, WC{ID: 2, Status: WCRemAccessErr, Opcode: WCAtomicWrite, ByteLen: 8})
}

// Two QPs: an ATOMIC_WRITE, a FLUSH of it and a READ of it back.
func TestPlacementOverWire(t *testing.T) {
	mem := &fakeMem{}
	src := make([]byte, 64)
	dst := make([]byte, 4096)
	ks := mem.reg(src, 0x100000, AccessLocalWrite)
	kd := mem.reg(dst, 0x200000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessFlushGlobal|AccessFlushPersistent)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, RC, MTU1024, mem, sa, sb)
	binary.NativeEndian.PutUint64(src, 0xfeedfacecafebeef)
	sg := [1]SGE{{Addr: 0x100000, Length: 8, LKey: ks}}
	back := [1]SGE{{Addr: 0x100000 + 8, Length: 8, LKey: ks}}
	aw := SendWR{ID: 1, Opcode: WRAtomicWrite, Flags: SendSignaled, RemoteAddr: 0x200040, RKey: kd}
	fl := SendWR{ID: 2, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: 0x200040, RKey: kd,
		FlushType: FlushGlobal | FlushPersistent, FlushLen: 8}
	rd := SendWR{ID: 3, Opcode: WRRead, Flags: SendSignaled, RemoteAddr: 0x200040, RKey: kd}
	var now Time
	round := func() {
		now++
		aw.SG, rd.SG = sg[:], back[:]
		for _, wr := range []*SendWR{&aw, &fl, &rd} {
			if err := w.a.PostSend(now, wr); err != nil {
				panic(err)
			}
		}
		w.run(now)
	}
	round()
	if sa.bad != 0 || sa.send != 3 || sa.last.Opcode != WCRDMARead {
		t.Fatalf("completions %+v", sa)
	}
	if v := binary.NativeEndian.Uint64(dst[0x40:]); v != 0xfeedfacecafebeef {
		t.Fatalf("target holds %#x", v)
	}
	if !bytes.Equal(src[8:16], src[:8]) {
		t.Fatalf("read back % x", src[8:16])
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.1f allocations per round (ATOMIC_WRITE, FLUSH, READ)", allocs)
	}
	if sa.bad+sb.bad != 0 || sa.send != 3*202 {
		t.Fatalf("completions: %+v %+v", sa, sb)
	}
}
