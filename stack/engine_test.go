package stack

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/qp"
)

// TestEngineIngressChecks feeds crafted frames to a device through a pipe
// and checks what it delivers and counts.
func TestEngineIngressChecks(t *testing.T) {
	peer, l := pipe.New(pipe.Config{MTU: 1500})
	clock := NewFakeClock(0)
	d := openManual(t, l, macB, []netip.Addr{ipB}, clock)
	S := newSide(t, d, 1<<16, 64)
	ud := S.qp(t, UD)
	udReady(t, ud, 0x11111111, 0)
	for i := 0; i < 8; i++ {
		if err := ud.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{S.mr.SGE(uint64(i)*2048, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	if ud.QPN() != 0x11 {
		t.Fatalf("qpn %#x", ud.QPN())
	}
	send := func(f []byte) Counters {
		t.Helper()
		if peer.Transmit([][]byte{f}) != 1 {
			t.Fatal("pipe full")
		}
		for d.Step() {
		}
		return d.Counters()
	}
	good := testFrame(t, 1, 0x11, 100)
	c := send(good)
	if c.RcvdPkts != 1 || S.cq.Len() != 1 {
		t.Fatalf("good frame not delivered: %+v, cq %d", c, S.cq.Len())
	}
	bad := bytes.Clone(good)
	bad[len(bad)-10] ^= 4
	if c = send(bad); c.RcvICRCErr != 1 || c.RcvdPkts != 1 {
		t.Errorf("bad icrc: %+v", c)
	}
	// The ICRC covers the opcode: a reserved one is an ICRC error too.
	badOp := bytes.Clone(good)
	badOp[14+20+8] = 0x1f
	if c = send(badOp); c.RcvICRCErr != 2 {
		t.Errorf("reserved opcode with a stale icrc: %+v", c)
	}
	notOurs := bytes.Clone(good)
	notOurs[5] = 0x99 // destination MAC; not covered by the ICRC
	if c = send(notOurs); c.RcvNotOurs != 1 {
		t.Errorf("other mac: %+v", c)
	}
	h := bth.Headers{L2L3: bth.L2L3{DstMAC: macB, SrcMAC: macA, SrcIP: ipA, DstIP: netip.MustParseAddr("192.0.2.77")},
		BTH: bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: 0x11}, QKey: 0x11111111, SrcQP: 1}
	frame := func() []byte {
		b := make([]byte, 2000)
		n, err := bth.Encode(b, &h, []byte("payload!"))
		if err != nil {
			t.Fatal(err)
		}
		return b[:n]
	}
	if c = send(frame()); c.RcvNotOurs != 2 {
		t.Errorf("other ip: %+v", c)
	}
	h.DstIP = ipB
	h.BTH.DestQP = 0x999
	if c = send(frame()); c.RcvUnknownQPN != 1 {
		t.Errorf("unknown qpn: %+v", c)
	}
	h.BTH.DestQP = 1 // QP1 is reserved: nothing there yet
	if c = send(frame()); c.RcvUnknownQPN != 2 {
		t.Errorf("qp1: %+v", c)
	}
	// A QP being created is in the table (its number taken) before its
	// transport exists: what arrives for it then is dropped, not run.
	half := &QP{dev: d, init: QPInit{Type: UD, GSI: true}, heapIdx: -1}
	if err := d.qps.add(half); err != nil {
		t.Fatal(err)
	}
	if c = send(frame()); c.RcvUnknownQPN != 3 {
		t.Errorf("qp1 being created: %+v", c)
	}
	d.qps.remove(half)
	h.BTH.DestQP = 0x11
	h.BTH.Opcode = bth.OpSendOnly // RC to a UD QP
	if c = send(frame()); c.RcvUnsupported != 1 {
		t.Errorf("rc opcode to ud qp: %+v", c)
	}
	if c = send(good[:len(good)-20]); c.RcvMalformed != 1 {
		t.Errorf("truncated: %+v", c)
	}
	arp := make([]byte, 60)
	copy(arp, macB[:])
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if c = send(arp); c.RcvNotRoCE != 1 {
		t.Errorf("arp: %+v", c)
	}
	// Garbage never panics, and is never delivered: a mangled frame
	// reaches its QP only when every changed byte is one the ICRC does
	// not cover and the engine does not check (the source MAC, the
	// IPv4 TOS, TTL and header checksum, the UDP checksum, the BTH's
	// reserved byte), that is, when the transport sees the frame as
	// sent.
	uncovered := map[int]bool{6: true, 7: true, 8: true, 9: true, 10: true, 11: true,
		15: true, 22: true, 24: true, 25: true, 40: true, 41: true, 46: true}
	r := rand.New(rand.NewPCG(1, 2))
	delivered := 0
	for i := 0; i < 4000; i++ {
		f := bytes.Clone(good)
		for k := 0; k < 1+r.IntN(4); k++ {
			f[r.IntN(len(f))] = byte(r.Uint32())
		}
		if r.IntN(2) == 0 {
			f = f[:r.IntN(len(f)+1)]
		}
		asSent := len(f) == len(good)
		for j := 0; asSent && j < len(f); j++ {
			asSent = f[j] == good[j] || uncovered[j]
		}
		before := d.Counters().RcvdPkts
		if send(f).RcvdPkts != before {
			delivered++
			if !asSent {
				t.Fatalf("mangled frame delivered:\n% x\nfrom\n% x", f, good)
			}
		}
	}
	if delivered == 0 {
		t.Error("no frame mangled outside the ICRC's coverage was delivered")
	}
}

// TestEngineAddrCheck: a connected QP takes packets only from its peer's
// address (rdma_rxe's check_addr).
func TestEngineAddrCheck(t *testing.T) {
	s := newSimPair(t, 1500, nil)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	// A spoofed packet: right QPN and PSN, wrong source address.
	h := bth.Headers{L2L3: bth.L2L3{DstMAC: macB, SrcMAC: macA, SrcIP: netip.MustParseAddr("192.0.2.66"), DstIP: ipB},
		BTH: bth.BTHFields{Opcode: bth.OpWriteOnly, PKey: 0xffff, DestQP: qb.QPN(), PSN: 0}, VA: B.mr.Addr(), RKey: B.mr.RKey(), DMALen: 4}
	b := make([]byte, 200)
	n, _ := bth.Encode(b, &h, []byte{1, 2, 3, 4})
	pipeA := s.a.engines[0].link.(*pipe.End)
	pipeA.Transmit([][]byte{b[:n]})
	for s.b.Step() {
	}
	if c := s.b.Counters(); c.RcvAddrErr != 1 || B.buf[0] != 0 {
		t.Fatalf("spoofed write: addr errors %d, memory %v", c.RcvAddrErr, B.buf[:4])
	}
}

// TestEngineNoAllocs checks that steady-state RC traffic allocates
// nothing per packet, on either side.
func TestEngineNoAllocs(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	A, B := newSide(t, s.a, 1<<20, 256), newSide(t, s.b, 1<<20, 256)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	wrs := []SendWR{
		{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 65536)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}},
		{ID: 2, Op: OpRead, Flags: SendSignaled, SG: []SGE{A.mr.SGE(65536, 65536)}, Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}},
		{ID: 3, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 10000)}},
		{ID: 4, Op: OpFetchAdd, Flags: SendSignaled, SG: []SGE{A.mr.SGE(200000, 8)}, Remote: RemoteAddr{B.mr.Addr() + 8192, B.mr.RKey()}, CompareAdd: 1},
	}
	rwr := RecvWR{ID: 9, SG: []SGE{B.mr.SGE(300000, 10000)}}
	wcs := make([]WC, 16)
	round := func() {
		qb.PostRecv(&rwr)
		qa.PostSendBatch(wrs)
		got := 0
		for got < len(wrs) {
			s.a.Step()
			s.b.Step()
			s.clock.Advance(1000)
			got += A.cq.Poll(wcs)
			B.cq.Poll(wcs)
		}
	}
	for i := 0; i < 20; i++ {
		round()
	}
	sent := s.a.Counters().SentPkts + s.b.Counters().SentPkts
	allocs := testing.AllocsPerRun(100, round)
	pkts := float64(s.a.Counters().SentPkts+s.b.Counters().SentPkts-sent) / 101
	if allocs != 0 {
		t.Fatalf("%v allocations per round of %.0f packets", allocs, pkts)
	}
}

// callLink records how many frames each Transmit call carries.
type callLink struct {
	Link
	calls []int
}

func (l *callLink) Transmit(frames [][]byte) int {
	n := l.Link.Transmit(frames)
	l.calls = append(l.calls, n)
	return n
}

// TestResponsesLeaveDuringReceiveBatch: a receive batch of requests,
// each asking for an ACK, is answered every 16 frames or 16 KiB (one
// coalesced ACK each time), not once at the end of the batch.
func TestResponsesLeaveDuringReceiveBatch(t *testing.T) {
	for _, c := range []struct {
		n, size int
		calls   int // responder's transmit calls, one ACK each
	}{
		{40, 64, 3},   // 16 + 16 + 8 frames
		{10, 4096, 3}, // 4 + 4 + 2 frames of 4 KiB
	} {
		clock := NewFakeClock(0)
		pa, pb := pipe.New(pipe.Config{MTU: 9000})
		lb := &callLink{Link: pb}
		da := openManualWin(t, pa, macA, []netip.Addr{ipA}, clock, -1) // all in one batch
		db := openManual(t, lb, macB, []netip.Addr{ipB}, clock)
		A, B := newSide(t, da, 1<<16, 64), newSide(t, db, 1<<16, 64)
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite) // path MTU 4096, the pipe's
		var wrs []SendWR
		for i := 0; i < c.n; i++ {
			wrs = append(wrs, SendWR{ID: uint64(i), Op: OpWrite, SG: []SGE{A.mr.SGE(0, uint32(c.size))},
				Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}})
		}
		wrs[c.n-1].Flags = SendSignaled
		if _, err := qa.PostSendBatch(wrs); err != nil {
			t.Fatal(err)
		}
		da.Step()
		if n := qa.Counters().SentPkts; n != uint64(c.n) {
			t.Fatalf("%d requests sent in one step", n)
		}
		db.Step()
		if len(lb.calls) != c.calls {
			t.Fatalf("%d-byte requests: responder transmitted %v frames per call, want %d calls of one",
				c.size, lb.calls, c.calls)
		}
		for _, k := range lb.calls {
			if k != 1 {
				t.Fatalf("%d-byte requests: responder transmitted %v frames per call", c.size, lb.calls)
			}
		}
		da.Step()
		if wc := pollN(t, &simPair{clock: clock, a: da, b: db}, A.cq, 1); wc[0].Status != 0 {
			t.Fatalf("write: %v", wc[0].Status)
		}
	}
}

// TestSendWindowConfig: Config.SendWindow bounds the packets an RC QP
// has in flight (0: qp.DefaultSendWindow bytes, negative: no bound), and
// the window moves as ACKs come back.
func TestSendWindowConfig(t *testing.T) {
	// The port's MTU is 1024 (a 1500-byte link), the path MTU too.
	for _, c := range []struct{ win, first int }{{8, 8}, {0, qp.DefaultSendWindow >> 10}, {-1, 100}, {1, 1}} {
		clock := NewFakeClock(0)
		pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 512})
		da := openManualWin(t, pa, macA, []netip.Addr{ipA}, clock, c.win)
		db := openManual(t, pb, macB, []netip.Addr{ipB}, clock)
		A, B := newSide(t, da, 1<<20, 64), newSide(t, db, 1<<20, 64)
		qa, qb := A.qp(t, RC), B.qp(t, RC)
		connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
		const size = 100 * 1024 // 100 packets at path MTU 1024
		if err := qa.PostSend(&SendWR{ID: 1, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, size)},
			Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}); err != nil {
			t.Fatal(err)
		}
		da.Step()
		if n := qa.Counters().SentPkts; n != uint64(c.first) {
			t.Errorf("window %d: %d packets in the first step, want %d", c.win, n, c.first)
		}
		s := &simPair{clock: clock, a: da, b: db}
		if wc := pollN(t, s, A.cq, 1); wc[0].Status != 0 {
			t.Fatalf("window %d: write %v", c.win, wc[0].Status)
		}
		if n := qa.Counters().SentPkts; n != 100 {
			t.Errorf("window %d: %d packets sent in all", c.win, n)
		}
	}
}

// TestEngineNoAllocsLossy: recovering from loss (NAKs, loss probes, kept
// requests, go-back-N) allocates nothing per packet either, once the
// buffers for kept requests exist.
func TestEngineNoAllocsLossy(t *testing.T) {
	s := newSimPair(t, 9000, &fault.Config{Seed: 3, Drop: 0.05})
	A, B := newSide(t, s.a, 1<<20, 256), newSide(t, s.b, 1<<20, 256)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	var wrs []SendWR
	for i := 0; i < 8; i++ {
		wrs = append(wrs, SendWR{ID: uint64(i), Op: OpWrite, SG: []SGE{A.mr.SGE(uint64(i)<<16, 65536)},
			Remote: RemoteAddr{B.mr.Addr() + uint64(i)<<16, B.mr.RKey()}})
	}
	wrs[7].Flags = SendSignaled
	wcs := make([]WC, 16)
	round := func() {
		if _, err := qa.PostSendBatch(wrs); err != nil {
			panic(err)
		}
		for A.cq.Poll(wcs) == 0 {
			wa, wb := s.a.Step(), s.b.Step()
			if wa || wb {
				s.clock.Advance(1000)
				continue
			}
			d, ok := s.a.NextDeadline()
			if db, okb := s.b.NextDeadline(); okb && (!ok || db < d) {
				d, ok = db, true
			}
			if !ok {
				panic("stuck")
			}
			s.clock.Set(max(d, s.clock.Now()+1))
		}
	}
	for i := 0; i < 100; i++ {
		round()
	}
	r0 := qa.Counters().RetransmittedPkts
	allocs := testing.AllocsPerRun(100, round)
	if r := qa.Counters().RetransmittedPkts - r0; r == 0 {
		t.Fatal("no loss recovered while measuring")
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per round of eight lossy 64 KiB WRITEs", allocs)
	}
}
