package qp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/internal/pcaptool/pcaptest"
)

// ceWrite is a WRITE from the peer whose IP header says congestion
// experienced (ecn 3) or not.
func ceWrite(t *testing.T, psn bth.PSN, ecn uint8, rkey uint32) *bth.Packet {
	h := hdr(bth.OpWriteOnly, psn)
	h.TrafficClass = 26<<2 | ecn
	h.VA, h.RKey, h.DMALen, h.BTH.AckReq = 0x1000, rkey, 8, true
	return craft(t, h, make([]byte, 8))
}

// TestCNPForCEMarkedPackets: a CE-marked request gets a CNP to the
// sending QP (BECN, PSN 0, UDP source port 0, the configured traffic
// class), at most one per interval; packets marked ECT only are
// executed as any other and get none.
func TestCNPForCEMarkedPackets(t *testing.T) {
	n := single(t, Caps{CNP: CNPConfig{TrafficClass: DefaultCNPTrafficClass}}, defaultConn())
	_, k := n.buf(64, 0x1000, 0)
	now := Time(time.Second)
	deliver(now, n.qp, []*bth.Packet{ceWrite(t, 0, 2, k), ceWrite(t, 1, 3, k), ceWrite(t, 2, 3, k)})
	var cnps []*bth.Packet
	acks := 0
	for _, p := range n.out.take() {
		switch p.Opcode() {
		case bth.OpCNP:
			cnps = append(cnps, p)
		case bth.OpAck:
			acks++
		}
	}
	if len(cnps) != 1 {
		t.Fatalf("%d CNPs for two CE-marked packets at once, want 1", len(cnps))
	}
	c := cnps[0]
	b := c.BTH()
	if !b.BECN() || b.FECN() || b.DestQP() != peerQPN || b.PSN() != 0 || b.AckReq() || b.PKey() != 0xffff ||
		c.SrcPort() != 0 || c.TrafficClass() != DefaultCNPTrafficClass || c.PayloadN != 0 ||
		c.SrcIP() != addrA || c.DstIP() != addrB {
		t.Errorf("CNP %+v sport %d tc %#x %v > %v", b.Fields(), c.SrcPort(), c.TrafficClass(), c.SrcIP(), c.DstIP())
	}
	if acks == 0 || n.qp.ctr.NPECNMarked != 2 || n.qp.ctr.NPCNPSent != 1 {
		t.Errorf("acks %d, marked %d, cnps sent %d; want acks, 2, 1", acks, n.qp.ctr.NPECNMarked, n.qp.ctr.NPCNPSent)
	}
	// After the interval, the next marked packet gets its own.
	deliver(now+DefaultCNPInterval, n.qp, []*bth.Packet{ceWrite(t, 3, 3, k)})
	if got := countOp(n.out.take(), bth.OpCNP); got != 1 || n.qp.ctr.NPCNPSent != 2 {
		t.Errorf("after the interval: %d CNPs (%d sent in all), want 1 (2)", got, n.qp.ctr.NPCNPSent)
	}
	// Off: counted, not answered.
	m := single(t, Caps{CNP: CNPConfig{Off: true}}, defaultConn())
	_, mk := m.buf(64, 0x1000, 0)
	deliver(now, m.qp, []*bth.Packet{ceWrite(t, 0, 3, mk)})
	if got := countOp(m.out.take(), bth.OpCNP); got != 0 || m.qp.ctr.NPECNMarked != 1 {
		t.Errorf("with CNPs off: %d CNPs, %d marked", got, m.qp.ctr.NPECNMarked)
	}
}

// TestCNPForUD: a CE-marked datagram gets a CNP to its source QP, at
// the address it came from.
func TestCNPForUD(t *testing.T) {
	n := single(t, Caps{Type: UD, CNP: CNPConfig{TrafficClass: DefaultCNPTrafficClass}}, defaultConn())
	_, key := n.buf(256, 0x2000, 0)
	n.recv(t, 1, 0x2000, 256, key)
	h := hdr(bth.OpUDSendOnly, 5)
	h.QKey, h.SrcQP = 0x11111111, 0x4321
	h.TrafficClass = 3
	deliver(0, n.qp, []*bth.Packet{craft(t, h, make([]byte, 16))})
	ps := n.out.take()
	if len(ps) != 1 || ps[0].Opcode() != bth.OpCNP {
		t.Fatalf("%d packets, want one CNP", len(ps))
	}
	c := ps[0]
	if c.BTH().DestQP() != 0x4321 || c.SrcIP() != addrA || c.DstIP() != addrB ||
		[6]byte(c.Frame[0:6]) != h.SrcMAC || [6]byte(c.Frame[6:12]) != h.DstMAC {
		t.Errorf("CNP to qp %#x, %v > %v, macs % x", c.BTH().DestQP(), c.SrcIP(), c.DstIP(), c.Frame[:12])
	}
	if len(n.sink.recv) != 1 || n.sink.recv[0].Status != WCSuccess {
		t.Errorf("the datagram was not received: %+v", n.sink.recv)
	}
}

func countOp(ps []*bth.Packet, op bth.Opcode) int {
	k := 0
	for _, p := range ps {
		if p.Opcode() == op {
			k++
		}
	}
	return k
}

// TestCNPMatchesConnectX builds the CNP a QP sends with the addresses,
// QPN and IP ID of the one a ConnectX sent in the reference capture, and
// compares the frames byte for byte (ICRC and IP checksum included).
func TestCNPMatchesConnectX(t *testing.T) {
	path := filepath.Join("..", "..", "shared", "pcaps", "public", "scapy_roce_uts__hw_hex_vectors.pcap")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("reference capture %s absent", path)
	}
	var want []byte
	var cx bth.Packet
	for _, fr := range pcaptest.ReadFrames(t, path) {
		if bth.Parse(fr, &cx) == nil && cx.Opcode() == bth.OpCNP {
			want = fr[:cx.End]
			break
		}
	}
	if want == nil {
		t.Fatal("no CNP in the ConnectX capture")
	}
	f := cx.Frame
	src, dst := cx.DstIP(), cx.SrcIP() // the QP that answers is the CNP's source
	n := newNode(t, Caps{Type: RC, QPN: 0x200, CNP: CNPConfig{TrafficClass: DefaultCNPTrafficClass}})
	o := defaultConn()
	connect(t, n.qp, dst, src, cx.BTH().DestQP(), o)
	n.qp.path.SrcMAC, n.qp.path.DstMAC = [6]byte(f[6:12]), [6]byte(f[0:6])
	n.qp.path.SrcIP, n.qp.path.DstIP = cx.SrcIP(), cx.DstIP()
	n.qp.ipid = uint16(f[cx.L3+4])<<8 | uint16(f[cx.L3+5]) - 1
	// A CE-marked request from the peer, as the engine would deliver it.
	h := &bth.Headers{L2L3: bth.L2L3{SrcMAC: [6]byte(f[0:6]), DstMAC: [6]byte(f[6:12]), SrcIP: cx.DstIP(),
		DstIP: cx.SrcIP(), TrafficClass: 3}, BTH: bth.BTHFields{Opcode: bth.OpSendOnly, PKey: 0xffff, DestQP: 0x200}}
	n.qp.Receive(0, craft(t, h, nil))
	for _, p := range n.out.take() {
		if p.Opcode() == bth.OpCNP {
			if !bytes.Equal(p.Frame[:p.End], want) {
				t.Fatalf("CNP differs from ConnectX's:\n got % x\nwant % x", p.Frame[:p.End], want)
			}
			return
		}
	}
	t.Fatal("no CNP sent")
}

// cnpPkt is a CNP from the peer to the QP under test.
func cnpPkt(t *testing.T) *bth.Packet {
	h := hdr(bth.OpCNP, 0)
	h.BTH.BECN = true
	return craft(t, h, nil)
}

// ucSender is a UC QP at 10 Gbit/s with DCQCN p, with n 4 KiB WRITEs
// posted: UC has no ACKs and no send window, so only the pacer holds it.
func ucSender(t *testing.T, p *dcqcn.Params, n int) *node {
	nd := single(t, Caps{Type: UC, DCQCN: p, LineRate: 10_000_000_000, MaxSendWR: n}, defaultConn())
	_, key := nd.buf(4096, 0x1000, 1)
	for i := 0; i < n; i++ {
		nd.post(t, SendWR{ID: uint64(i), Opcode: WRWrite, SG: []SGE{{Addr: 0x1000, Length: 4096, LKey: key}},
			RemoteAddr: 0x9000, RKey: 0x55})
	}
	return nd
}

// sentBytes pumps q every µs from now to end and returns the request
// bytes on the wire, as the pacer counts them.
func sentBytes(q *QP, out *recOut, now, end Time) (int, Time) {
	sent := 0
	for ; now < end; now += Time(time.Microsecond) {
		q.Tick(now)
		q.Pump(now)
		for _, f := range out.frames {
			var p bth.Packet
			if bth.Parse(f, &p) == nil && p.Info.Request {
				sent += p.PayloadN + wireOverhead
			}
		}
		out.frames = nil
	}
	return sent, now
}

// TestDCQCNPaces: a CNP cuts the QP's rate (rp_cnp_handled), a second
// one within the monitor period does not (rp_cnp_ignored), and the QP's
// requests then leave at the cut rate: held (not Busy, a Deadline) while
// the pacer has nothing for them. With the increase timer and byte
// counter off the rate stays, and a millisecond carries what the rate
// allows, plus the burst.
func TestDCQCNPaces(t *testing.T) {
	p := dcqcn.Defaults()
	p.TimeReset, p.ByteReset = 1_000_000, 0 // no increase within the test
	n := ucSender(t, &p, 1000)
	q := n.qp
	now := Time(time.Second)
	deliver(now, q, []*bth.Packet{cnpPkt(t), cnpPkt(t)})
	rate, limited := q.Rate()
	if !limited || rate >= 10_000_000_000 || rate < 5_000_000_000 || q.ctr.RPCNPHandled != 1 || q.ctr.RPCNPIgnored != 1 {
		t.Fatalf("after two CNPs: rate %d limited %v, handled %d ignored %d", rate, limited, q.ctr.RPCNPHandled, q.ctr.RPCNPIgnored)
	}
	sent, _ := sentBytes(q, n.out, now, now+Time(time.Millisecond))
	want := float64(rate)/8*1e-3 + dcqcn.DefaultBurst
	if got := float64(sent); got < want*0.98 || got > want+4200 {
		t.Errorf("%d bytes in 1 ms at %d bit/s, want %.0f", sent, rate, want)
	}
	if q.Busy() {
		t.Error("a held QP is Busy")
	}
	if d, ok := q.Deadline(); !ok || d <= now+Time(time.Millisecond)-Time(time.Microsecond) {
		t.Errorf("held QP: deadline %v %v", d, ok)
	}
}

// TestDCQCNRecovers: with the default parameters a QP cut by one CNP
// gets back to the line rate by timer and byte counter, and is no longer
// paced; without DCQCN a CNP is counted and changes nothing.
func TestDCQCNRecovers(t *testing.T) {
	n := ucSender(t, nil, 2000)
	now := Time(time.Second)
	deliver(now, n.qp, []*bth.Packet{cnpPkt(t)})
	if _, limited := n.qp.Rate(); limited || n.qp.ctr.CNPRcvd != 1 || n.qp.ctr.RPCNPHandled != 0 {
		t.Fatalf("without DCQCN: limited %v, %d CNPs, %d handled", limited, n.qp.ctr.CNPRcvd, n.qp.ctr.RPCNPHandled)
	}

	p := dcqcn.Defaults()
	n = ucSender(t, &p, 2000)
	q := n.qp
	deliver(now, q, []*bth.Packet{cnpPkt(t)})
	if _, limited := q.Rate(); !limited {
		t.Fatal("not limited after a CNP")
	}
	sent, end := 0, now
	for i := 0; i < 100; i++ {
		var k int
		k, end = sentBytes(q, n.out, end, end+Time(100*time.Microsecond))
		sent += k
		if _, limited := q.Rate(); !limited {
			break
		}
	}
	if rate, limited := q.Rate(); limited {
		t.Fatalf("still limited at %d bit/s %v after the CNP, %d bytes sent", rate, end-now, sent)
	}
}

// TestDCQCNAsksEveryPacket: a paced RC QP asks for an ACK on every
// packet, so that its loss probe does not resend what only waits for
// the pacer.
func TestDCQCNAsksEveryPacket(t *testing.T) {
	p := dcqcn.Defaults()
	n := single(t, Caps{DCQCN: &p, LineRate: 10_000_000_000}, defaultConn())
	_, key := n.buf(8192, 0x1000, 1)
	now := Time(time.Second)
	deliver(now, n.qp, []*bth.Packet{cnpPkt(t)})
	n.post(t, SendWR{ID: 1, Opcode: WRWrite, SG: []SGE{{Addr: 0x1000, Length: 8192, LKey: key}}, RemoteAddr: 0x9000, RKey: 0x55})
	k := 0
	for i := 0; i < 1000 && k < 8; i++ {
		n.qp.Pump(now)
		for _, p := range n.out.take() {
			if !p.BTH().AckReq() {
				t.Fatalf("paced packet %d (%v) without the A bit", k, p.Opcode())
			}
			k++
		}
		now += Time(time.Microsecond)
		n.qp.Tick(now)
	}
	if k != 8 {
		t.Fatalf("%d packets of 8 sent", k)
	}
}

// TestZeroAllocsPaced: a QP that DCQCN holds below its line rate posts,
// paces, sends and completes without allocating, and so does a READ
// whose responder DCQCN holds.
func TestZeroAllocsPaced(t *testing.T) {
	mem := &fakeMem{}
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	ks := mem.reg(src, 0x100000, AccessLocalWrite)
	kd := mem.reg(dst, 0x200000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	sa, sb := &countSink{}, &countSink{}
	w := newWire(t, RC, MTU4096, mem, sa, sb)
	p := dcqcn.Defaults()
	p.TimeReset, p.ByteReset = 1_000_000, 0 // the rate stays cut
	w.a.caps.DCQCN, w.a.caps.LineRate, w.a.cc.on = &p, 10_000_000_000, true
	now := Time(time.Second)
	w.a.Receive(now, cnpPkt(t))
	if _, limited := w.a.Rate(); !limited {
		t.Fatal("not limited")
	}
	sg := [1]SGE{{Addr: 0x100000, Length: 16 << 10, LKey: ks}}
	write := SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, RemoteAddr: 0x200000, RKey: kd}
	done := sa.send
	round := func() {
		write.SG = sg[:]
		if err := w.a.PostSend(now, &write); err != nil {
			panic(err)
		}
		for sa.send == done {
			now += Time(time.Microsecond)
			w.a.Tick(now)
			w.run(now)
		}
		done = sa.send
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per paced WRITE", n)
	}
	// READs whose responses b paces.
	w.b.caps.DCQCN, w.b.caps.LineRate, w.b.cc.on = &p, 10_000_000_000, true
	w.b.Receive(now, cnpPkt(t))
	if _, limited := w.b.Rate(); !limited {
		t.Fatal("responder not limited")
	}
	write.Opcode = WRRead
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%v allocations per READ with paced responses", n)
	}
	if sa.bad != 0 {
		t.Fatalf("%d failed completions", sa.bad)
	}
	if sent := w.b.Counters().SentPkts; sent < 100*4 {
		t.Fatalf("responder sent %d packets", sent)
	}
}

// TestCNPFlood: a flood of CNPs (100,000 in 100 ms) is counted, cuts the
// rate at most once per monitor period and never below rpg_min_rate, and
// the QP still sends, at that rate.
func TestCNPFlood(t *testing.T) {
	p := dcqcn.Defaults()
	n := ucSender(t, &p, 100)
	q := n.qp
	c := cnpPkt(t)
	now := Time(time.Second)
	for i := 0; i < 100_000; i++ {
		q.Receive(now, c)
		now += Time(time.Microsecond)
	}
	rate, limited := q.Rate()
	cuts, ignored := q.ctr.RPCNPHandled, q.ctr.RPCNPIgnored
	if q.ctr.CNPRcvd != 100_000 || cuts+ignored != 100_000 || cuts > 100_000/4+1 || !limited || rate < 1_000_000 {
		t.Fatalf("%d CNPs: %d cuts, %d ignored, rate %d limited %v", q.ctr.CNPRcvd, cuts, ignored, rate, limited)
	}
	if sent, _ := sentBytes(q, n.out, now, now+Time(100*time.Millisecond)); sent == 0 {
		t.Fatal("nothing sent after the flood")
	}
}

// respBytes pumps q every µs from now to end and returns the READ
// response bytes on the wire, as the pacer counts them, and the PSN
// after the last response.
func respBytes(t *testing.T, q *QP, out *recOut, now, end Time) (int, bth.PSN) {
	sent, next := 0, bth.PSN(0)
	for ; now < end; now += Time(time.Microsecond) {
		q.Tick(now)
		q.Pump(now)
		for _, p := range out.take() {
			if op := p.Opcode(); op < bth.OpReadRespFirst || op > bth.OpReadRespOnly {
				t.Fatalf("%v (PSN %d, %v) sent among READ responses", p.Opcode(), p.BTH().PSN(), describe([]*bth.Packet{p}))
			}
			sent += p.PayloadN + wireOverhead
			next = p.BTH().PSN().Next()
		}
	}
	return sent, next
}

// TestDCQCNPacesReadResponses: READ responses are data the QP sends, as
// its requests are: after a CNP they leave at the cut rate, the QP held
// (not Busy, a Deadline) while the pacer has nothing for them, and an
// ACK queued behind them waits its turn; before the CNP a READ is
// answered at once.
func TestDCQCNPacesReadResponses(t *testing.T) {
	p := dcqcn.Defaults()
	p.TimeReset, p.ByteReset = 1_000_000, 0 // no increase within the test
	o := defaultConn()
	o.mtu, o.rqPSN = MTU4096, 100
	n := single(t, Caps{DCQCN: &p, LineRate: 10_000_000_000}, o)
	q := n.qp
	_, key := n.buf(8<<20, 0x100000, 1)
	now := Time(time.Second)

	q.Receive(now, req(t, bth.OpReadRequest, 100, true, nil, reth(0x100000, key, 64<<10)))
	if sent, next := respBytes(t, q, n.out, now, now+Time(time.Microsecond)); next != 116 || sent != 64<<10+16*wireOverhead {
		t.Fatalf("unpaced: %d bytes up to PSN %d in 1 µs, want all 16 packets", sent, next)
	}

	deliver(now, q, []*bth.Packet{cnpPkt(t)})
	rate, limited := q.Rate()
	if !limited || rate >= 10_000_000_000 {
		t.Fatalf("after a CNP: rate %d limited %v", rate, limited)
	}
	q.Receive(now, req(t, bth.OpReadRequest, 116, true, nil, reth(0x100000, key, 8<<20)))
	n.recv(t, 1, 0x100000, 64, key)
	q.Receive(now, req(t, bth.OpSendOnly, 2164, true, []byte{1}, nil))
	sent, next := respBytes(t, q, n.out, now, now+Time(time.Millisecond))
	want := float64(rate)/8*1e-3 + dcqcn.DefaultBurst
	if got := float64(sent); got < want*0.98 || got > want+4200 {
		t.Errorf("%d bytes of READ responses in 1 ms at %d bit/s, want %.0f", sent, rate, want)
	}
	if next <= 116 || next >= 2164 {
		t.Fatalf("responses up to PSN %d after 1 ms", next)
	}
	if q.Busy() {
		t.Error("a QP whose READ responses are held is Busy")
	}
	if d, ok := q.Deadline(); !ok || d <= now+Time(time.Millisecond)-Time(time.Microsecond) {
		t.Errorf("held QP: deadline %v %v", d, ok)
	}
	// The rest, then the SEND's ACK after the last response.
	end := now + Time(time.Millisecond)
	for i := 0; i < 100_000 && q.resp.pending(); i++ {
		end += Time(time.Microsecond)
		q.Tick(end)
		q.Pump(end)
		ps := n.out.take()
		if len(ps) > 0 && ps[len(ps)-1].Opcode() == bth.OpAck {
			if got := ps[len(ps)-1].BTH().PSN(); got != 2164 {
				t.Fatalf("ACK of PSN %d, want 2164", got)
			}
			if len(ps) < 2 || ps[len(ps)-2].Opcode() != bth.OpReadRespLast {
				t.Fatalf("the ACK is not right after the last READ response: %v", describe(ps))
			}
		}
	}
	if q.resp.pending() {
		t.Fatal("responses still queued")
	}
}
