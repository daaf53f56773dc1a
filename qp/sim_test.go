package qp

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// The simulation wires two RC QPs through a lossy in-test channel and
// runs a random mix of every operation in both directions. Each run is
// determined by its seed: a failure prints it, and
//
//	go test ./qp -run TestSimulation -seed N     (or QP_SIM_SEED=N)
//
// replays exactly that run.

var (
	simSeed  = flag.Uint64("seed", 0, "replay one simulation seed (0: the default set)")
	simTrace = flag.Bool("simtrace", false, "log every packet of the simulation")
)

// faults are the channel's per-frame probabilities. At high loss rates
// a packet can be lost retry_cnt+1 times in a row, which correctly ends
// in WCRetryExcErr; such runs set infinite (rdma_rxe's retry_cnt 7).
type faults struct {
	drop, dup, reorder float64
	infinite           bool
}

// frame is a packet in flight.
type frame struct {
	at   Time
	seq  uint64
	data []byte
}

// channel carries frames one way with seeded faults.
type channel struct {
	rng      *rand.Rand
	f        faults
	inflight []frame
	seq      uint64
	lat      time.Duration
}

func (c *channel) put(now Time, data []byte) {
	if c.rng.Float64() < c.f.drop {
		return
	}
	n := 1
	if c.rng.Float64() < c.f.dup {
		n = 2
	}
	for i := 0; i < n; i++ {
		at := now + c.lat
		if i > 0 || c.rng.Float64() < c.f.reorder {
			at += time.Duration(c.rng.IntN(8)) * c.lat
		}
		c.seq++
		c.inflight = append(c.inflight, frame{at: at, seq: c.seq, data: data})
	}
}

// due removes and returns the frames due at now, in arrival order.
func (c *channel) due(now Time) [][]byte {
	var out [][]byte
	for {
		best := -1
		for i, f := range c.inflight {
			if f.at <= now && (best < 0 || f.at < c.inflight[best].at ||
				(f.at == c.inflight[best].at && f.seq < c.inflight[best].seq)) {
				best = i
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, c.inflight[best].data)
		c.inflight = append(c.inflight[:best], c.inflight[best+1:]...)
	}
}

func (c *channel) next() (Time, bool) {
	var t Time
	ok := false
	for _, f := range c.inflight {
		if !ok || f.at < t {
			t, ok = f.at, true
		}
	}
	return t, ok
}

// linkOut is an Output that encodes frames for a channel.
type linkOut struct {
	name string
	t    *testing.T
	now  *Time
	ch   *channel
	err  error
}

func (o *linkOut) Send(h *bth.Headers, payload []byte) bool {
	if *simTrace {
		o.t.Logf("%v %s %-28v psn %d a %v syn %#x msn %d len %d", *o.now, o.name, h.BTH.Opcode, h.BTH.PSN, h.BTH.AckReq, h.Syndrome, h.MSN, len(payload))
	}
	buf := make([]byte, h.FrameLen(len(payload)))
	if _, err := bth.Encode(buf, h, payload); err != nil && o.err == nil {
		o.err = err
	}
	o.ch.put(*o.now, buf)
	return true
}

// Memory layout of a simulated node (virtual addresses).
const (
	vaSrc   = 0x1000_0000 // local data source (pattern)
	vaWrite = 0x2000_0000 // target of the peer's WRITEs
	vaRSrc  = 0x3000_0000 // source of the peer's READs (pattern)
	vaRDst  = 0x4000_0000 // destination of local READs
	vaRecv  = 0x5000_0000 // receive buffers
	vaAtom  = 0x6000_0000 // two words the peer's atomics work on
	vaARes  = 0x7000_0000 // local atomic results
	srcSize = 1 << 20
	recvBuf = 64 << 10
	nRecv   = 16
)

// op is one planned work request.
type op struct {
	wr      WROpcode
	signal  bool
	fence   bool
	length  uint32
	srcOff  uint32 // in the local source (SEND, WRITE) or the peer's READ source
	dstOff  uint32 // in the peer's WRITE area or the local READ area
	imm     uint32
	add     uint64 // FETCH_ADD operand
	resSlot uint32 // atomic result slot
}

// simNode is one side of the simulation.
type simNode struct {
	name     string
	qp       *QP
	mem      *fakeMem
	src      []byte
	wr, rsrc []byte
	rdst     []byte
	recv     []byte
	atom     []byte
	ares     []byte
	keys     struct{ src, wr, rsrc, rdst, recv, atom, ares uint32 }
	plan     []op
	posted   int
	expectWC []uint64 // signaled send WR IDs in post order not yet completed
	peer     *simNode
	// inbound messages expected by this node's receive side, in order.
	expectRecv []op
	recvFree   []uint64 // receive slots waiting to be posted again
	recvSeq    uint64
	fail       func(format string, args ...any)
	wrEnd      uint32 // bytes this node's WRITEs need at the peer
}

// setPeer joins n to its peer and sizes the area the peer writes into.
func (n *simNode) setPeer(p *simNode) {
	n.peer = p
	n.wr = make([]byte, p.wrEnd+1)
	n.keys.wr = n.mem.reg(n.wr, vaWrite, AccessLocalWrite|AccessRemoteWrite)
}

func (n *simNode) Complete(wc *WC, recv bool) {
	if recv {
		n.recvDone(wc)
		return
	}
	if wc.Status == WCWRFlushErr {
		return // reported with the error that caused it
	}
	if wc.Status != WCSuccess {
		n.fail("%s: send wr %d (%v) completed with %v", n.name, wc.ID, n.plan[wc.ID].wr, wc.Status)
		return
	}
	if len(n.expectWC) == 0 || n.expectWC[0] != wc.ID {
		n.fail("%s: send completion %d out of order (want %v)", n.name, wc.ID, n.expectWC[:min(3, len(n.expectWC))])
		return
	}
	n.expectWC = n.expectWC[1:]
	o := &n.plan[wc.ID]
	switch o.wr {
	case WRRead:
		want := n.peer.rsrc[o.srcOff : o.srcOff+o.length]
		if !bytes.Equal(n.rdst[o.dstOff:o.dstOff+o.length], want) {
			n.fail("%s: read wr %d data differs", n.name, wc.ID)
		}
	case WRWrite, WRWriteWithImm:
		if !bytes.Equal(n.peer.wr[o.dstOff:o.dstOff+o.length], n.src[o.srcOff:o.srcOff+o.length]) {
			n.fail("%s: write wr %d data differs at the peer", n.name, wc.ID)
		}
	}
}

func (n *simNode) recvDone(wc *WC) {
	if wc.Status == WCWRFlushErr {
		return
	}
	if wc.Status != WCSuccess {
		n.fail("%s: receive %d completed with %v", n.name, wc.ID, wc.Status)
		return
	}
	if len(n.expectRecv) == 0 {
		n.fail("%s: unexpected receive completion %+v", n.name, *wc)
		return
	}
	o := n.expectRecv[0]
	n.expectRecv = n.expectRecv[1:]
	slot := wc.ID % nRecv
	switch o.wr {
	case WRWriteWithImm:
		if wc.Opcode != WCRecvRDMAImm || wc.Imm != o.imm || wc.ByteLen != o.length {
			n.fail("%s: write-with-imm completion %+v, want imm %d len %d", n.name, *wc, o.imm, o.length)
		}
	default:
		got := n.recv[slot*recvBuf : slot*recvBuf+uint64(wc.ByteLen)]
		want := n.peer.src[o.srcOff : o.srcOff+o.length]
		if wc.Opcode != WCRecv || !bytes.Equal(got, want) {
			n.fail("%s: received message differs (len %d, want %d)", n.name, wc.ByteLen, o.length)
		}
		if o.wr == WRSendWithImm && (wc.Flags&WCWithImm == 0 || wc.Imm != o.imm) {
			n.fail("%s: send-with-imm completion %+v", n.name, *wc)
		}
	}
	n.recvFree = append(n.recvFree, wc.ID)
}

func (n *simNode) postRecv(id uint64) {
	slot := id % nRecv
	err := n.qp.PostRecv(&RecvWR{ID: id, SG: []SGE{{Addr: vaRecv + slot*recvBuf, Length: recvBuf, LKey: n.keys.recv}}})
	if err != nil {
		n.fail("%s: post recv: %v", n.name, err)
	}
}

// postMore posts planned work while the send queue has room.
func (n *simNode) postMore(now Time) {
	for n.posted < len(n.plan) {
		id := uint64(n.posted)
		o := &n.plan[id]
		wr := SendWR{ID: id, Opcode: o.wr, Imm: o.imm}
		if o.signal {
			wr.Flags |= SendSignaled
		}
		if o.fence {
			wr.Flags |= SendFence
		}
		var sg [1]SGE
		switch o.wr {
		case WRRead:
			sg[0] = SGE{Addr: vaRDst + uint64(o.dstOff), Length: o.length, LKey: n.keys.rdst}
			wr.RemoteAddr, wr.RKey = vaRSrc+uint64(o.srcOff), n.peer.keys.rsrc
		case WRFetchAdd:
			sg[0] = SGE{Addr: vaARes + 8*uint64(o.resSlot), Length: 8, LKey: n.keys.ares}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = vaAtom, n.peer.keys.atom, o.add
		case WRCompareSwap:
			sg[0] = SGE{Addr: vaARes + 8*uint64(o.resSlot), Length: 8, LKey: n.keys.ares}
			wr.RemoteAddr, wr.RKey = vaAtom+8, n.peer.keys.atom
			wr.CompareAdd, wr.Swap = o.add, o.add+1
		default:
			sg[0] = SGE{Addr: vaSrc + uint64(o.srcOff), Length: o.length, LKey: n.keys.src}
			wr.RemoteAddr, wr.RKey = vaWrite+uint64(o.dstOff), n.peer.keys.wr
		}
		wr.SG = sg[:]
		if err := n.qp.PostSend(now, &wr); err != nil {
			return // queue full: later
		}
		if o.signal {
			n.expectWC = append(n.expectWC, id)
		}
		if o.wr == WRSend || o.wr == WRSendWithImm || o.wr == WRWriteWithImm {
			n.peer.expectRecv = append(n.peer.expectRecv, *o)
		}
		n.posted++
	}
}

// planWork draws count operations.
func planWork(rng *rand.Rand, count int, mtu int) ([]op, uint32, uint32) {
	plan := make([]op, count)
	var wrEnd, rdEnd, resSlots uint32
	var faSum, cas uint64
	for i := range plan {
		o := &plan[i]
		o.wr = WROpcode(rng.IntN(int(WRFetchAdd) + 1))
		if o.wr == WRSendWithInv {
			o.wr = WRSend
		}
		o.signal = rng.IntN(4) != 0 || i == count-1
		o.fence = rng.IntN(20) == 0
		switch r := rng.IntN(20); {
		case r == 0:
			o.length = 0
		case r < 2:
			o.length = uint32(rng.IntN(recvBuf) + 1)
		default:
			o.length = uint32(rng.IntN(3*mtu) + 1)
		}
		o.srcOff = uint32(rng.IntN(srcSize - int(o.length) + 1))
		o.imm = rng.Uint32()
		switch o.wr {
		case WRWrite, WRWriteWithImm:
			o.dstOff = wrEnd
			wrEnd += o.length
		case WRRead:
			o.dstOff = rdEnd
			rdEnd += o.length
		case WRFetchAdd:
			o.length = 8
			o.add = uint64(rng.IntN(1000))
			o.resSlot = resSlots
			resSlots++
			o.dstOff = uint32(faSum) // expected original value (low 32 bits suffice here)
			faSum += o.add
		case WRCompareSwap:
			o.length = 8
			o.add = cas
			cas++
			o.resSlot = resSlots
			resSlots++
		}
	}
	return plan, wrEnd, rdEnd
}

func newSimNode(t *testing.T, name string, qpn uint32, rng *rand.Rand, count, mtu, win int, inf bool, stash Stash, out Output, fail func(string, ...any)) *simNode {
	n := &simNode{name: name, mem: &fakeMem{}, fail: fail}
	var rdEnd uint32
	n.plan, n.wrEnd, rdEnd = planWork(rng, count, mtu)
	n.src = make([]byte, srcSize)
	n.rsrc = make([]byte, srcSize)
	for i := range n.src {
		n.src[i] = byte(rng.Uint32())
		n.rsrc[i] = byte(rng.Uint32())
	}
	n.rdst = make([]byte, rdEnd+1)
	n.recv = make([]byte, nRecv*recvBuf)
	n.atom = make([]byte, 16)
	n.ares = make([]byte, 8*count)
	n.keys.src = n.mem.reg(n.src, vaSrc, 0)
	n.keys.rsrc = n.mem.reg(n.rsrc, vaRSrc, AccessRemoteRead)
	n.keys.rdst = n.mem.reg(n.rdst, vaRDst, AccessLocalWrite)
	n.keys.recv = n.mem.reg(n.recv, vaRecv, AccessLocalWrite)
	n.keys.atom = n.mem.reg(n.atom, vaAtom, AccessLocalWrite|AccessRemoteAtomic)
	n.keys.ares = n.mem.reg(n.ares, vaARes, AccessLocalWrite)
	q, err := New(Caps{Type: RC, QPN: qpn, MaxSendWR: 32, MaxRecvWR: nRecv, MaxSendSGE: 1, MaxRecvSGE: 1, InfiniteRetry7: inf, SendWindow: win},
		Env{Mem: n.mem, Out: out, Sink: n, Stash: stash})
	if err != nil {
		t.Fatal(err)
	}
	n.qp = q
	return n
}

// simulate runs one seeded simulation and returns an error describing
// the first failure.
func simulate(t *testing.T, seed uint64, f faults, count int) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mtus := []MTU{MTU256, MTU512, MTU1024, MTU2048, MTU4096}
	mtu := mtus[rng.IntN(len(mtus))]
	var firstErr error
	fail := func(format string, args ...any) {
		if firstErr == nil {
			firstErr = fmt.Errorf(format, args...)
		}
	}
	var now Time
	ab := &channel{rng: rand.New(rand.NewPCG(seed, 1)), f: f, lat: time.Microsecond}
	ba := &channel{rng: rand.New(rand.NewPCG(seed, 2)), f: f, lat: time.Microsecond}
	outA, outB := &linkOut{name: "A>", t: t, now: &now, ch: ab}, &linkOut{name: "<B", t: t, now: &now, ch: ba}
	win := []int{0, -1, 3000, 8 << 10}[rng.IntN(4)] // send window: default, none, small
	// Responders keep requests past a gap, in a pool of 0, a few or
	// plenty of buffers.
	var sa, sb Stash
	if k := rng.IntN(3); k > 0 {
		pa, pb := &testStash{max: 4}, &testStash{max: 4}
		if k == 2 {
			pa.max, pb.max = 1000, 1000
		}
		sa, sb = pa, pb
		defer func() {
			if pa.out != 0 || pb.out != 0 {
				fail("stash buffers not returned: %d, %d", pa.out, pb.out)
			}
		}()
	}
	a := newSimNode(t, "A", 0x11, rng, count, mtu.Bytes(), win, f.infinite, sa, outA, fail)
	b := newSimNode(t, "B", 0x12, rng, count, mtu.Bytes(), win, f.infinite, sb, outB, fail)
	a.setPeer(b)
	b.setPeer(a)
	o := defaultConn()
	o.mtu, o.timeout, o.minRNR = mtu, 8, 1
	o.sqPSN, o.rqPSN = bth.PSN(rng.IntN(1<<24)), bth.PSN(rng.IntN(1<<24))
	if rng.IntN(2) == 0 {
		o.sqPSN = 0xffffff - bth.PSN(rng.IntN(100)) // wrap early
	}
	ob := o
	ob.sqPSN, ob.rqPSN = o.rqPSN, o.sqPSN
	connect(t, a.qp, addrA, addrB, 0x12, o)
	connect(t, b.qp, addrB, addrA, 0x11, ob)
	for _, n := range []*simNode{a, b} {
		for i := 0; i < nRecv; i++ {
			n.postRecv(n.recvSeq)
			n.recvSeq++
		}
	}
	var p bth.Packet
	for step := 0; step < 2_000_000 && firstErr == nil; step++ {
		for _, n := range []*simNode{a, b} {
			n.postMore(now)
			// Give receives back, sometimes late (RNR NAKs follow).
			for len(n.recvFree) > 0 && rng.IntN(8) != 0 {
				n.recvFree = n.recvFree[1:]
				n.postRecv(n.recvSeq)
				n.recvSeq++
			}
			n.qp.Pump(now)
		}
		moved := false
		for _, d := range []struct {
			ch *channel
			to *QP
		}{{ab, b.qp}, {ba, a.qp}} {
			for _, fr := range d.ch.due(now) {
				moved = true
				if err := bth.Parse(fr, &p); err != nil {
					return fmt.Errorf("parse: %w", err)
				}
				if !p.ICRCOK() {
					return fmt.Errorf("bad icrc")
				}
				if *simTrace {
					t.Logf("%v deliver to %#x %v psn %d (ePSN %d rcur %d msn %d)", now, d.to.qpn, p.Opcode(), p.BTH().PSN(), d.to.ePSN, d.to.resp.rcur, d.to.resp.msn)
				}
				d.to.Receive(now, &p)
			}
		}
		if outA.err != nil || outB.err != nil {
			return fmt.Errorf("encode: %v %v", outA.err, outB.err)
		}
		if a.qp.State() != StateRTS || b.qp.State() != StateRTS {
			return fmt.Errorf("state A %s B %s (first error: %v)", a.qp.State(), b.qp.State(), firstErr)
		}
		done := a.posted == count && b.posted == count && len(a.expectWC) == 0 && len(b.expectWC) == 0
		if done {
			break
		}
		if moved || a.qp.Busy() || b.qp.Busy() || len(a.recvFree)+len(b.recvFree) > 0 {
			continue
		}
		// Idle: jump to the next event.
		next, ok := Time(0), false
		for _, c := range []func() (Time, bool){ab.next, ba.next, a.qp.Deadline, b.qp.Deadline} {
			if t, k := c(); k && (!ok || t < next) {
				next, ok = t, true
			}
		}
		if !ok {
			return fmt.Errorf("stuck: A posted %d/%d waiting %d, B posted %d/%d waiting %d",
				a.posted, count, len(a.expectWC), b.posted, count, len(b.expectWC))
		}
		if next > now {
			now = next
		}
		a.qp.Tick(now)
		b.qp.Tick(now)
	}
	if firstErr != nil {
		return firstErr
	}
	for _, n := range []*simNode{a, b} {
		if n.posted != count || len(n.expectWC) != 0 {
			return fmt.Errorf("%s: unfinished: posted %d/%d, %d completions missing", n.name, n.posted, count, len(n.expectWC))
		}
		if len(n.peer.expectRecv) != 0 {
			return fmt.Errorf("%s: %d messages never arrived", n.peer.name, len(n.peer.expectRecv))
		}
		// Every WRITE and READ, signaled or not, landed; every atomic ran
		// exactly once, in order.
		faSum := uint64(0)
		var cas uint64
		for id, o := range n.plan {
			switch o.wr {
			case WRWrite, WRWriteWithImm:
				if !bytes.Equal(n.peer.wr[o.dstOff:o.dstOff+o.length], n.src[o.srcOff:o.srcOff+o.length]) {
					return fmt.Errorf("%s: write %d data differs", n.name, id)
				}
			case WRRead:
				if !bytes.Equal(n.rdst[o.dstOff:o.dstOff+o.length], n.peer.rsrc[o.srcOff:o.srcOff+o.length]) {
					return fmt.Errorf("%s: read %d data differs", n.name, id)
				}
			case WRFetchAdd:
				if got := binary.NativeEndian.Uint64(n.ares[8*o.resSlot:]); got != faSum {
					return fmt.Errorf("%s: fetch-add %d returned %d, want %d", n.name, id, got, faSum)
				}
				faSum += o.add
			case WRCompareSwap:
				if got := binary.NativeEndian.Uint64(n.ares[8*o.resSlot:]); got != cas {
					return fmt.Errorf("%s: compare-swap %d returned %d, want %d", n.name, id, got, cas)
				}
				cas++
			}
		}
		if got := binary.NativeEndian.Uint64(n.peer.atom); got != faSum {
			return fmt.Errorf("%s: fetch-add total %d, want %d", n.name, got, faSum)
		}
		if got := binary.NativeEndian.Uint64(n.peer.atom[8:]); got != cas {
			return fmt.Errorf("%s: compare-swap word %d, want %d", n.name, got, cas)
		}
	}
	return nil
}

func simSeeds(t *testing.T, def []uint64) []uint64 {
	if *simSeed != 0 {
		return []uint64{*simSeed}
	}
	if s := os.Getenv("QP_SIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("QP_SIM_SEED: %v", err)
		}
		return []uint64{v}
	}
	return def
}

func TestSimulation(t *testing.T) {
	cases := []struct {
		name  string
		f     faults
		count int
	}{
		{"clean", faults{}, 300},
		{"lossy", faults{drop: 0.05, dup: 0.01, reorder: 0.01}, 300},
		{"hostile", faults{drop: 0.15, dup: 0.1, reorder: 0.1, infinite: true}, 150},
	}
	def := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		def = def[:2]
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, seed := range simSeeds(t, def) {
				if err := simulate(t, seed, c.f, c.count); err != nil {
					t.Fatalf("seed %d: %v\nreplay: go test ./qp -run 'TestSimulation/%s' -seed %d", seed, err, c.name, seed)
				}
			}
		})
	}
}

// TestSimulationUC sends SENDs and WRITE_WITH_IMMs over a lossy UC
// connection: whatever arrives must be a subsequence of what was sent,
// in order and intact; broken messages complete nothing.
func TestSimulationUC(t *testing.T) {
	for _, seed := range simSeeds(t, []uint64{1, 2, 3, 4}) {
		if err := simulateUC(t, seed); err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./qp -run TestSimulationUC -seed %d", seed, err, seed)
		}
	}
}

func simulateUC(t *testing.T, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	mtu := MTU(rng.IntN(5)) + MTU256
	var now Time
	ch := &channel{rng: rand.New(rand.NewPCG(seed, 8)), f: faults{drop: 0.03}, lat: time.Microsecond}
	out := &linkOut{name: "A>", t: t, now: &now, ch: ch}
	memA, memB := &fakeMem{}, &fakeMem{}
	src := make([]byte, srcSize)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	ks := memA.reg(src, vaSrc, 0)
	const count = 400
	type msg struct {
		write       bool
		off, length uint32
		imm         uint32
	}
	msgs := make([]msg, count)
	recvBufB := make([]byte, nRecv*recvBuf)
	kr := memB.reg(recvBufB, vaRecv, AccessLocalWrite)
	wbuf := make([]byte, count*3*4096)
	kw := memB.reg(wbuf, vaWrite, AccessLocalWrite|AccessRemoteWrite)
	var got []WC
	sinkB := &recSink{}
	a, err := New(Caps{Type: UC, QPN: 0x11, MaxSendWR: 16}, Env{Mem: memA, Out: out, Sink: &recSink{}})
	if err != nil {
		return err
	}
	b, err := New(Caps{Type: UC, QPN: 0x12, MaxRecvWR: nRecv}, Env{Mem: memB, Out: &recOut{t: t}, Sink: sinkB})
	if err != nil {
		return err
	}
	o := defaultConn()
	o.mtu, o.sqPSN, o.rqPSN = mtu, 0xfffff0, 0xfffff0
	connect(t, a, addrA, addrB, 0x12, o)
	connect(t, b, addrB, addrA, 0x11, o)
	var recvID uint64
	postRecv := func() {
		slot := recvID % nRecv
		if err := b.PostRecv(&RecvWR{ID: recvID, SG: []SGE{{Addr: vaRecv + slot*recvBuf, Length: recvBuf, LKey: kr}}}); err != nil {
			t.Fatal(err)
		}
		recvID++
	}
	for i := 0; i < nRecv; i++ {
		postRecv()
	}
	posted := 0
	var p bth.Packet
	for step := 0; step < 100000 && (posted < count || len(ch.inflight) > 0); step++ {
		for posted < count {
			m := &msgs[posted]
			m.write = rng.IntN(2) == 0
			m.length = uint32(rng.IntN(3*mtu.Bytes()) + 1)
			m.off = uint32(rng.IntN(srcSize - int(m.length)))
			m.imm = uint32(posted)
			wr := SendWR{ID: uint64(posted), Opcode: WRSendWithImm, Imm: m.imm, SG: []SGE{{Addr: vaSrc + uint64(m.off), Length: m.length, LKey: ks}}}
			if m.write {
				wr.Opcode, wr.RemoteAddr, wr.RKey = WRWriteWithImm, vaWrite+uint64(posted)*3*4096, kw
			}
			if a.PostSend(now, &wr) != nil {
				break
			}
			posted++
		}
		a.Pump(now)
		now += time.Microsecond
		for _, fr := range ch.due(now) {
			if err := bth.Parse(fr, &p); err != nil {
				return err
			}
			b.Receive(now, &p)
		}
		for len(sinkB.recv) > 0 {
			wc := sinkB.recv[0]
			sinkB.recv = sinkB.recv[1:]
			got = append(got, wc)
			if wc.Status != WCSuccess {
				return fmt.Errorf("receive completed with %v", wc.Status)
			}
			m := msgs[wc.Imm]
			var data []byte
			if m.write {
				if wc.Opcode != WCRecvRDMAImm {
					return fmt.Errorf("message %d: opcode %d", wc.Imm, wc.Opcode)
				}
				data = wbuf[uint64(wc.Imm)*3*4096:][:m.length]
			} else {
				slot := wc.ID % nRecv
				data = recvBufB[slot*recvBuf:][:wc.ByteLen]
			}
			if wc.ByteLen != m.length || !bytes.Equal(data, src[m.off:m.off+m.length]) {
				return fmt.Errorf("message %d arrived damaged (len %d, want %d)", wc.Imm, wc.ByteLen, m.length)
			}
			if len(got) > 1 && got[len(got)-2].Imm >= wc.Imm {
				return fmt.Errorf("message %d arrived after %d", wc.Imm, got[len(got)-2].Imm)
			}
			postRecv()
		}
	}
	if posted != count {
		return fmt.Errorf("posted %d of %d", posted, count)
	}
	t.Logf("seed %d: %d of %d messages arrived, %d gaps", seed, len(got), count, b.Counters().OutOfSequence)
	if len(got) < count/2 || len(got) == count && b.Counters().OutOfSequence > 0 {
		return fmt.Errorf("%d of %d messages arrived with %d gaps", len(got), count, b.Counters().OutOfSequence)
	}
	return nil
}
