package qp

import (
	"net/netip"
	"testing"

	"github.com/uroce/uroce/bth"
)

// memRegion is a registered buffer in fakeMem.
type memRegion struct {
	buf    []byte
	va     uint64
	access Access
	valid  bool
}

// fakeMem is a memory region table for tests: key k names regions[k].
type fakeMem struct {
	regions []memRegion
}

// reg registers buf at virtual address va and returns its key.
func (m *fakeMem) reg(buf []byte, va uint64, access Access) uint32 {
	if len(m.regions) == 0 {
		m.regions = append(m.regions, memRegion{}) // key 0 is never valid
	}
	m.regions = append(m.regions, memRegion{buf: buf, va: va, access: access, valid: true})
	return uint32(len(m.regions) - 1)
}

func (m *fakeMem) lookup(key uint32, addr uint64, length uint32, need Access) ([]byte, bool) {
	if int(key) >= len(m.regions) {
		return nil, false
	}
	r := &m.regions[key]
	if !r.valid || r.access&need != need || addr < r.va || addr+uint64(length) > r.va+uint64(len(r.buf)) {
		return nil, false
	}
	off := addr - r.va
	return r.buf[off : off+uint64(length)], true
}

func (m *fakeMem) Local(lkey uint32, addr uint64, length uint32, need Access) ([]byte, bool) {
	return m.lookup(lkey, addr, length, need)
}

func (m *fakeMem) Remote(rkey uint32, va uint64, length uint32, need Access) ([]byte, bool) {
	return m.lookup(rkey, va, length, need)
}

func (m *fakeMem) Check(key uint32, addr uint64, length uint32, need Access, remote bool) bool {
	_, ok := m.lookup(key, addr, length, need)
	return ok
}

func (m *fakeMem) Flush(rkey uint32, va uint64, length uint32, need Access, whole bool) bool {
	if whole {
		if int(rkey) >= len(m.regions) {
			return false
		}
		r := &m.regions[rkey]
		return r.valid && r.access&need == need
	}
	_, ok := m.lookup(rkey, va, length, need)
	return ok
}

func (m *fakeMem) Invalidate(rkey uint32) bool {
	if int(rkey) >= len(m.regions) || !m.regions[rkey].valid {
		return false
	}
	m.regions[rkey].valid = false
	return true
}

// recOut records every packet a QP sends, encoded and parsed again.
type recOut struct {
	t      *testing.T
	frames [][]byte
	full   bool // refuse packets, as a full transmit ring does
}

func (o *recOut) Send(h *bth.Headers, payload []byte) bool {
	if o.full {
		return false
	}
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := bth.Encode(buf, h, payload)
	if err != nil {
		o.t.Fatalf("encode %v: %v", h.BTH.Opcode, err)
	}
	o.frames = append(o.frames, buf[:n])
	return true
}

// take returns the recorded packets, parsed, and forgets them.
func (o *recOut) take() []*bth.Packet {
	var ps []*bth.Packet
	for _, f := range o.frames {
		p := new(bth.Packet)
		if err := bth.Parse(f, p); err != nil {
			o.t.Fatalf("parse own packet: %v", err)
		}
		if !p.ICRCOK() {
			o.t.Fatalf("bad icrc on own packet")
		}
		ps = append(ps, p)
	}
	o.frames = nil
	return ps
}

// recSink records completions.
type recSink struct {
	send, recv []WC
}

func (s *recSink) Complete(wc *WC, recv bool) {
	if recv {
		s.recv = append(s.recv, *wc)
	} else {
		s.send = append(s.send, *wc)
	}
}

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

func pathTo(src, dst netip.Addr) bth.L2L3 {
	return bth.L2L3{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcIP: src, DstIP: dst}
}

// node is a QP with its recording environment.
type node struct {
	qp   *QP
	mem  *fakeMem
	out  *recOut
	sink *recSink
}

func newNode(t *testing.T, caps Caps) *node {
	t.Helper()
	n := &node{mem: &fakeMem{}, out: &recOut{t: t}, sink: &recSink{}}
	if caps.MaxSendWR == 0 {
		caps.MaxSendWR = 64
	}
	if caps.MaxRecvWR == 0 {
		caps.MaxRecvWR = 64
	}
	if caps.MaxSendSGE == 0 {
		caps.MaxSendSGE = 4
	}
	if caps.MaxRecvSGE == 0 {
		caps.MaxRecvSGE = 4
	}
	q, err := New(caps, Env{Mem: n.mem, Out: n.out, Sink: n.sink})
	if err != nil {
		t.Fatal(err)
	}
	n.qp = q
	return n
}

// connOpts are the attributes of a connected QP.
type connOpts struct {
	mtu             MTU
	sqPSN, rqPSN    bth.PSN
	timeout         uint8
	retry, rnrRetry uint8
	minRNR          uint8
	rdAtomic        uint8
	destRdAtomic    uint8
	access          Access
}

func defaultConn() connOpts {
	return connOpts{mtu: MTU1024, timeout: 14, retry: 7, rnrRetry: 7, minRNR: 12, rdAtomic: 4, destRdAtomic: 4,
		access: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
			AccessFlushGlobal | AccessFlushPersistent}
}

// connect brings q to RTS towards destQPN with o.
func connect(t *testing.T, q *QP, src, dst netip.Addr, destQPN uint32, o connOpts) {
	t.Helper()
	a := Attr{State: StateInit, PKeyIndex: 0, Port: 1, AccessFlags: o.access, QKey: 0x11111111}
	m := AttrState | AttrPKeyIndex | AttrPort
	if q.Type() == UD {
		m |= AttrQKey
	} else {
		m |= AttrAccessFlags
	}
	if err := q.Modify(0, &a, m); err != nil {
		t.Fatal(err)
	}
	a = Attr{State: StateRTR}
	m = AttrState
	if q.Type() != UD {
		a.AV.Path = pathTo(src, dst)
		a.PathMTU, a.DestQPN, a.RQPSN = o.mtu, destQPN, o.rqPSN
		m |= AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		if q.Type() == RC {
			a.MaxDestRdAtomic, a.MinRNRTimer = o.destRdAtomic, o.minRNR
			m |= AttrMaxDestRdAtomic | AttrMinRNRTimer
		}
	}
	if err := q.Modify(0, &a, m); err != nil {
		t.Fatal(err)
	}
	a = Attr{State: StateRTS, SQPSN: o.sqPSN}
	m = AttrState | AttrSQPSN
	if q.Type() == RC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = o.timeout, o.retry, o.rnrRetry, o.rdAtomic
		m |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	if err := q.Modify(0, &a, m); err != nil {
		t.Fatal(err)
	}
}

// deliver hands packets to a QP.
func deliver(now Time, q *QP, ps []*bth.Packet) {
	for _, p := range ps {
		q.Receive(now, p)
	}
}

// pattern fills b with a recognisable pattern.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

// Crafted packets come from a peer QP peerQPN at addrB to the QP under
// test, localQPN at addrA.
const (
	localQPN = 0x11
	peerQPN  = 0x12
)

// hdr returns headers of a packet from the peer.
func hdr(op bth.Opcode, psn bth.PSN) *bth.Headers {
	return &bth.Headers{L2L3: pathTo(addrB, addrA), BTH: bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: localQPN, PSN: psn}}
}

// craft encodes h and payload and parses the frame, as the engine would.
func craft(t *testing.T, h *bth.Headers, payload []byte) *bth.Packet {
	t.Helper()
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := bth.Encode(buf, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	p := new(bth.Packet)
	if err := bth.Parse(buf[:n], p); err != nil {
		t.Fatal(err)
	}
	return p
}

func ackPkt(t *testing.T, psn bth.PSN, syn bth.Syndrome, msn uint32) *bth.Packet {
	h := hdr(bth.OpAck, psn)
	h.Syndrome, h.MSN = syn, msn
	return craft(t, h, nil)
}

// single is a QP under test (QPN localQPN) connected to a crafted peer.
func single(t *testing.T, caps Caps, o connOpts) *node {
	t.Helper()
	caps.QPN = localQPN
	if caps.Type == 0 {
		caps.Type = RC
	}
	n := newNode(t, caps)
	connect(t, n.qp, addrA, addrB, peerQPN, o)
	n.unlimited()
	return n
}

// unlimited makes n's requester take its peer for a responder that
// advertises no end-to-end credits (code 31, as rdma_rxe and the
// crafted ACKs do), as it learns from the first answer: requests go
// without a credit probe first. credit_test.go starts from a new QP's
// credits.
func (n *node) unlimited() { n.qp.cred.unlimited = true }

// buf registers a buffer of size bytes filled with a pattern and
// returns it with its key; va is its address.
func (n *node) buf(size int, va uint64, seed byte) ([]byte, uint32) {
	b := make([]byte, size)
	pattern(b, seed)
	return b, n.mem.reg(b, va, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
}

// post posts a send WR or fails the test.
func (n *node) post(t *testing.T, wr SendWR) {
	t.Helper()
	if err := n.qp.PostSend(0, &wr); err != nil {
		t.Fatal(err)
	}
}

// recv posts a receive WR of one SGE or fails the test.
func (n *node) recv(t *testing.T, id uint64, va uint64, length uint32, key uint32) {
	t.Helper()
	if err := n.qp.PostRecv(&RecvWR{ID: id, SG: []SGE{{Addr: va, Length: length, LKey: key}}}); err != nil {
		t.Fatal(err)
	}
}

// pkt describes a sent packet for comparisons.
type pkt struct {
	op  bth.Opcode
	psn bth.PSN
	ack bool
	n   int
}

func describe(ps []*bth.Packet) []pkt {
	var d []pkt
	for _, p := range ps {
		d = append(d, pkt{p.Opcode(), p.BTH().PSN(), p.BTH().AckReq(), p.PayloadN})
	}
	return d
}

// wantPkts checks the opcodes, PSNs, A bits and payload sizes of ps.
func wantPkts(t *testing.T, ps []*bth.Packet, want ...pkt) {
	t.Helper()
	got := describe(ps)
	if len(got) != len(want) {
		t.Fatalf("got %d packets %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("packet %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// wantWC checks the IDs and statuses of completions.
func wantWC(t *testing.T, what string, wcs []WC, want ...WC) {
	t.Helper()
	if len(wcs) != len(want) {
		t.Fatalf("%s: got %d completions %+v, want %d", what, len(wcs), wcs, len(want))
	}
	for i, w := range want {
		g := wcs[i]
		if g.ID != w.ID || g.Status != w.Status || g.Opcode != w.Opcode {
			t.Errorf("%s %d: got id %d %v op %d, want id %d %v op %d", what, i, g.ID, g.Status, g.Opcode, w.ID, w.Status, w.Opcode)
		}
	}
}

// dropsPastGap makes n's requester take its peer for a responder that
// drops the requests following a gap (as rdma_rxe does), as it learns
// on the first loss: go-back-N then resends everything at once.
func (n *node) dropsPastGap() { n.qp.gentle.peerKeeps = -1 }

// testStash lends up to max buffers and counts those out.
type testStash struct {
	max, out int
	free     [][]byte
}

func (s *testStash) Get(n int) []byte {
	if s.out >= s.max {
		return nil
	}
	s.out++
	if k := len(s.free); k > 0 && cap(s.free[k-1]) >= n {
		b := s.free[k-1]
		s.free = s.free[:k-1]
		return b[:cap(b)]
	}
	return make([]byte, max(n, 4200))
}

func (s *testStash) Put(b []byte) {
	s.out--
	s.free = append(s.free, b)
}
