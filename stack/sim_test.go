package stack

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

	"github.com/uroce/uroce/internal/fifo"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/qp"
)

// The randomized simulation: two Manual devices on a fake clock, joined
// by a pipe that loses, duplicates, reorders and corrupts frames both
// ways, run RC, UC and UD work of every kind on several QPs at once.
// Every signaled work request must complete exactly once, in order per
// QP, successfully; every byte written, read or sent, and every atomic
// result, must be right; RC receives arrive exactly once and in order.
//
// UROCE_SIM_SEED=n replays one seed; -long (or UROCE_SIM_LONG=1) runs
// more seeds and more work.

var simLong = flag.Bool("long", false, "run the long simulations and stress tests")

func longTests() bool { return *simLong || os.Getenv("UROCE_SIM_LONG") != "" }

const (
	simChunk  = 32 << 10 // bytes per memory chunk; also the largest message
	simChunks = 512
)

// simNode is one device in the simulation.
type simNode struct {
	name   string
	dev    *Device
	pd     *PD
	buf    []byte
	mr     *MR
	scq    *CQ
	rcq    *CQ
	srq    *SRQ
	free   []int
	quar   fifo.Queue[quarantined]
	byQPN  map[uint32]*simEnd
	srqBuf map[uint64]int // SRQ receive id -> chunk
}

type quarantined struct {
	chunk int
	until Time
}

// simEnd is one QP of a connection (or a UD QP).
type simEnd struct {
	conn  *simConn
	side  int
	node  *simNode
	qp    *QP
	sent  []*simOp // posted, not yet completed, in order
	inQ   int      // posted and not known to be retired
	exp   []*simOp // RC: messages from the peer that consume a receive here, in order
	recvs map[uint64]int
	nrecv int // receives posted on its own queue
	atom  struct {
		chunk int // the 8-byte counter the peer's atomics work on, here
		val   uint64
	}
	unsig int // unsignaled requests since the last signaled one
}

type simConn struct {
	typ    QPType
	useSRQ bool
	mtu    int
	ends   [2]*simEnd
}

type simOp struct {
	id       uint64
	end      *simEnd // the requester
	op       Opcode
	signaled bool
	n        int
	local    int // chunk at the requester: source, READ target, atomic result
	remote   int // chunk at the responder: WRITE target, READ source; -1 if none
	expect   uint64
	inv      *MR
	waits    int // events before the chunks are freed
	ah       *AH
	received int // UD/UC: times received
}

type sim struct {
	t       *testing.T
	r       *rand.Rand
	s       *simPair
	nodes   [2]*simNode
	conns   []*simConn
	ops     map[uint64]*simOp
	nextID  uint64
	posted  int
	total   int
	pending int // signaled ops and RC receives outstanding
	wcs     []WC
}

func patternFill(b []byte, id uint64) {
	x := id*0x9e3779b97f4a7c15 + 1
	for i := range b {
		x = x*6364136223846793005 + 1442695040888963407
		b[i] = byte(x >> 56)
	}
	if len(b) >= 8 {
		binary.BigEndian.PutUint64(b, id)
	}
}

func patternOK(b []byte, id uint64) bool {
	want := make([]byte, len(b))
	patternFill(want, id)
	return bytes.Equal(b, want)
}

func (n *simNode) chunk(i int) []byte { return n.buf[i*simChunk : (i+1)*simChunk] }

func (n *simNode) alloc(now Time) int {
	for n.quar.Len() > 0 && n.quar.Peek().until <= now {
		n.free = append(n.free, n.quar.Pop().chunk)
	}
	if len(n.free) == 0 {
		return -1
	}
	c := n.free[len(n.free)-1]
	n.free = n.free[:len(n.free)-1]
	return c
}

// release quarantines a chunk: a stray late frame (UC accepts a stale
// message start) must not land in a chunk already reused.
func (n *simNode) release(c int, now Time) {
	n.quar.Push(quarantined{c, now + 5*time.Millisecond})
}

func TestSimulation(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	ops := 1500
	if longTests() {
		seeds = nil
		for i := uint64(1); i <= 200; i++ {
			seeds = append(seeds, i)
		}
		ops = 5000
	}
	if v := os.Getenv("UROCE_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("UROCE_SIM_SEED=%q: %v", v, err)
		}
		seeds = []uint64{s}
	}
	if v := os.Getenv("UROCE_SIM_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("UROCE_SIM_OPS=%q: %v", v, err)
		}
		ops = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replay: UROCE_SIM_SEED=%d UROCE_SIM_OPS=%d go test -run 'TestSimulation' ./stack", seed, ops)
				}
			})
			fc := fault.Config{Seed: seed, Drop: 0.05, Dup: 0.01, Reorder: 0.01, Corrupt: 0.001}
			if v := os.Getenv("UROCE_SIM_FAULTS"); v != "" {
				// drop,dup,reorder,corrupt probabilities, e.g. 0.05,0,0,0
				if _, err := fmt.Sscanf(v, "%g,%g,%g,%g", &fc.Drop, &fc.Dup, &fc.Reorder, &fc.Corrupt); err != nil {
					t.Fatalf("UROCE_SIM_FAULTS=%q: %v", v, err)
				}
			}
			runSim(t, seed, ops, &fc)
		})
	}
}

// TestSimulationLossless runs the same work without faults: nothing may
// be retransmitted.
func TestSimulationLossless(t *testing.T) {
	sm := runSim(t, 99, 300, nil)
	for _, n := range sm.nodes {
		if c := n.dev.Counters(); c.QP.RetransmittedPkts != 0 || c.QP.LocalAckTimeoutErr != 0 {
			t.Errorf("%s: %d retransmissions, %d timeouts without loss", n.name, c.QP.RetransmittedPkts, c.QP.LocalAckTimeoutErr)
		}
	}
}

func runSim(t *testing.T, seed uint64, total int, faults *fault.Config) *sim {
	r := rand.New(rand.NewPCG(seed, 0x51))
	mtu := []int{1500, 9000}[r.IntN(2)]
	window := []int{0, 0, -1, 8, 32, 200}[r.IntN(6)]
	sm := &sim{t: t, r: r, s: newSimPairWin(t, mtu, faults, window), ops: map[uint64]*simOp{}, total: total, wcs: make([]WC, 32)}
	for i, d := range []*Device{sm.s.a, sm.s.b} {
		n := &simNode{name: string(rune('A' + i)), dev: d, buf: make([]byte, simChunk*simChunks),
			byQPN: map[uint32]*simEnd{}, srqBuf: map[uint64]int{}}
		var err error
		if n.pd, err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if n.mr, err = n.pd.RegisterMR(n.buf, accessAll); err != nil {
			t.Fatal(err)
		}
		if n.scq, err = d.CreateCQ(4096); err != nil {
			t.Fatal(err)
		}
		if n.rcq, err = d.CreateCQ(4096); err != nil {
			t.Fatal(err)
		}
		if n.srq, err = n.pd.CreateSRQ(SRQInit{MaxWR: 256, MaxSGE: 2}); err != nil {
			t.Fatal(err)
		}
		for c := simChunks - 1; c >= 0; c-- {
			n.free = append(n.free, c)
		}
		sm.nodes[i] = n
	}
	nRC, nUC, nUD := 2+r.IntN(3), 1+r.IntN(2), 1+r.IntN(2)
	for i := 0; i < nRC+nUC+nUD; i++ {
		typ := RC
		if i >= nRC {
			typ = UC
		}
		if i >= nRC+nUC {
			typ = UD
		}
		sm.addConn(typ)
	}
	t.Logf("seed %d: link mtu %d, send window %d, %d RC, %d UC, %d UD", seed, mtu, window, nRC, nUC, nUD)

	steps := 0
	for {
		steps++
		if steps > 20_000_000 {
			t.Fatalf("no end after %d steps: %d of %d posted, %d outstanding", steps, sm.posted, total, sm.pending)
		}
		if sm.posted < total && r.IntN(4) == 0 {
			sm.postRandom()
		}
		sm.replenish()
		sm.poll()
		if t.Failed() {
			return sm
		}
		wa, wb := sm.s.a.Step(), sm.s.b.Step()
		if wa || wb {
			sm.s.clock.Advance(time.Microsecond)
			continue
		}
		if sm.posted < total {
			sm.s.clock.Advance(time.Microsecond)
			continue
		}
		if sm.pending == 0 {
			break
		}
		da, oka := sm.s.a.NextDeadline()
		db, okb := sm.s.b.NextDeadline()
		switch {
		case oka && okb:
			sm.s.clock.Set(min(da, db))
		case oka:
			sm.s.clock.Set(da)
		case okb:
			sm.s.clock.Set(db)
		default:
			sm.dump()
			t.Fatalf("stuck: idle with %d completions outstanding", sm.pending)
		}
	}
	// Everything completed: check the QPs and counters.
	for _, c := range sm.conns {
		for _, e := range c.ends {
			if st := e.qp.State(); st != StateRTS {
				t.Errorf("%s qp %#x (%v) in %v", e.node.name, e.qp.QPN(), c.typ, st)
			}
		}
	}
	if faults != nil {
		for i, n := range sm.nodes {
			peer := []*fault.Link{sm.s.fb, sm.s.fa}[i]
			c := n.dev.Counters()
			if c.RcvICRCErr != peer.Stats().Corrupted {
				t.Errorf("%s: rcv_icrc_err %d, peer corrupted %d frames", n.name, c.RcvICRCErr, peer.Stats().Corrupted)
			}
		}
		ca, cb := sm.s.a.Counters(), sm.s.b.Counters()
		t.Logf("A: sent %d rcvd %d icrc %d retrans %d timeouts %d seqnak %d dup %d rnr %d; faults %+v",
			ca.SentPkts, ca.RcvdPkts, ca.RcvICRCErr, ca.QP.RetransmittedPkts, ca.QP.LocalAckTimeoutErr,
			ca.QP.PacketSeqErr, ca.QP.DuplicateRequest, ca.QP.SendRNRErr, sm.s.fa.Stats())
		t.Logf("B: sent %d rcvd %d icrc %d retrans %d timeouts %d seqnak %d dup %d rnr %d",
			cb.SentPkts, cb.RcvdPkts, cb.RcvICRCErr, cb.QP.RetransmittedPkts, cb.QP.LocalAckTimeoutErr,
			cb.QP.PacketSeqErr, cb.QP.DuplicateRequest, cb.QP.SendRNRErr)
	}
	t.Logf("%d ops in %d steps, %v simulated", sm.posted, steps, sm.s.clock.Now()-time.Second)
	return sm
}

func (sm *sim) addConn(typ QPType) {
	r := sm.r
	c := &simConn{typ: typ, useSRQ: typ == RC && r.IntN(2) == 0}
	act := sm.s.a.Query().ActiveMTU
	pm := MTU(1 + r.IntN(int(act)))
	c.mtu = pm.Bytes()
	if typ == UD {
		c.mtu = act.Bytes()
	}
	gid := 1 + r.IntN(2)
	for i, n := range sm.nodes {
		init := QPInit{Type: typ, SendCQ: n.scq, RecvCQ: n.rcq, MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 3, MaxRecvSGE: 2}
		if c.useSRQ {
			init.SRQ = n.srq
		}
		q, err := n.pd.CreateQP(init)
		if err != nil {
			sm.t.Fatal(err)
		}
		e := &simEnd{conn: c, side: i, node: n, qp: q, recvs: map[uint64]int{}}
		e.atom.chunk = n.alloc(0)
		e.atom.val = r.Uint64()
		binary.NativeEndian.PutUint64(n.chunk(e.atom.chunk), e.atom.val)
		n.byQPN[q.QPN()] = e
		c.ends[i] = e
	}
	psn := func() PSN {
		if r.IntN(3) == 0 {
			return PSN(0xffffff - r.IntN(200))
		}
		return PSN(r.IntN(1 << 24))
	}
	a, b := c.ends[0].qp, c.ends[1].qp
	if typ == UD {
		for _, q := range []*QP{a, b} {
			udReady(sm.t, q, 0x1111, psn())
		}
	} else {
		pa, pb := psn(), psn()
		for i, q := range []*QP{a, b} {
			peer := []*QP{b, a}[i]
			dgid, _ := sm.nodes[1-i].dev.GID(gid)
			if err := q.ToInit(InitAttr{AccessFlags: accessRemote}); err != nil {
				sm.t.Fatal(err)
			}
			if err := q.ToRTR(RTRAttr{DestQPN: peer.QPN(), AH: AHAttr{DGID: dgid, SGIDIndex: gid},
				RQPSN: []PSN{pb, pa}[i], PathMTU: pm, MaxDestRdAtomic: 4, MinRNRTimer: 1}); err != nil {
				sm.t.Fatal(err)
			}
			if err := q.ToRTS(RTSAttr{SQPSN: []PSN{pa, pb}[i], Timeout: 8, RetryCnt: 7, RNRRetry: 7,
				MaxRdAtomic: uint8(1 + r.IntN(4))}); err != nil {
				sm.t.Fatal(err)
			}
		}
	}
	sm.conns = append(sm.conns, c)
}

// postRandom posts one random work request on a random QP.
func (sm *sim) postRandom() {
	r := sm.r
	c := sm.conns[r.IntN(len(sm.conns))]
	e := c.ends[r.IntN(2)]
	peer := c.ends[1-e.side]
	if e.inQ >= 32 {
		return
	}
	now := sm.s.clock.Now()
	var kinds []Opcode
	switch c.typ {
	case RC:
		kinds = []Opcode{OpSend, OpSendWithImm, OpSendWithInv, OpWrite, OpWriteWithImm, OpRead, OpCompareSwap, OpFetchAdd}
	case UC:
		kinds = []Opcode{OpSend, OpSendWithImm, OpWrite, OpWriteWithImm}
	case UD:
		kinds = []Opcode{OpSend, OpSendWithImm}
	}
	o := &simOp{id: sm.nextID + 1, end: e, op: kinds[r.IntN(len(kinds))], remote: -1, local: -1}
	switch r.IntN(10) {
	case 0:
		o.n = 0
	case 1, 2:
		o.n = r.IntN(simChunk + 1)
	default:
		o.n = r.IntN(3 * c.mtu)
	}
	if c.typ == UD {
		o.n = r.IntN(c.mtu + 1)
	}
	if c.typ != RC && o.n < 8 {
		o.n = 8 // UC and UD receivers identify messages by their first bytes
	}
	if o.n > simChunk {
		o.n = simChunk
	}
	if o.op == OpCompareSwap || o.op == OpFetchAdd {
		o.n = 8
	}
	o.signaled = e.unsig >= 3 || r.IntN(5) != 0 || sm.posted == sm.total-1
	o.local = e.node.alloc(now)
	if o.local < 0 {
		return
	}
	needRemote := o.op == OpWrite || o.op == OpWriteWithImm || o.op == OpRead
	if needRemote {
		if o.remote = peer.node.alloc(now); o.remote < 0 {
			e.node.release(o.local, now)
			return
		}
	}
	wr := SendWR{ID: o.id, Op: o.op, Imm: uint32(o.id)}
	if o.signaled {
		wr.Flags |= SendSignaled
	}
	if r.IntN(8) == 0 {
		wr.Flags |= SendFence
	}
	lbuf := e.node.chunk(o.local)[:o.n]
	switch o.op {
	case OpRead:
		clear(lbuf)
		patternFill(peer.node.chunk(o.remote)[:o.n], o.id)
	case OpCompareSwap, OpFetchAdd:
		clear(lbuf)
	default:
		patternFill(lbuf, o.id)
	}
	// Scatter/gather: split the local buffer in up to three pieces.
	base := uint64(o.local * simChunk)
	if o.n >= 3 && o.op != OpCompareSwap && o.op != OpFetchAdd && r.IntN(3) == 0 {
		a := 1 + r.IntN(o.n-2)
		b := a + 1 + r.IntN(o.n-a-1)
		wr.SG = []SGE{e.node.mr.SGE(base, uint32(a)), e.node.mr.SGE(base+uint64(a), uint32(b-a)), e.node.mr.SGE(base+uint64(b), uint32(o.n-b))}
	} else if o.n > 0 || r.IntN(2) == 0 {
		wr.SG = []SGE{e.node.mr.SGE(base, uint32(o.n))}
	}
	if needRemote {
		wr.Remote = RemoteAddr{peer.node.mr.Addr() + uint64(o.remote*simChunk), peer.node.mr.RKey()}
	}
	switch o.op {
	case OpCompareSwap, OpFetchAdd:
		wr.Remote = RemoteAddr{peer.node.mr.Addr() + uint64(peer.atom.chunk*simChunk), peer.node.mr.RKey()}
		o.expect = peer.atom.val
		if o.op == OpFetchAdd {
			wr.CompareAdd = r.Uint64() >> r.IntN(64)
			peer.atom.val += wr.CompareAdd
		} else {
			wr.CompareAdd = peer.atom.val
			if r.IntN(2) == 0 {
				wr.CompareAdd = r.Uint64()
			}
			wr.Swap = r.Uint64()
			if wr.CompareAdd == peer.atom.val {
				peer.atom.val = wr.Swap
			}
		}
	case OpSendWithInv:
		mr, err := peer.node.pd.RegisterMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite)
		if err != nil {
			sm.t.Fatal(err)
		}
		o.inv = mr
		wr.InvRKey = mr.RKey()
	}
	if c.typ == UD {
		dgid, _ := peer.node.dev.GID(1)
		ah, err := e.node.pd.CreateAH(AHAttr{DGID: dgid, SGIDIndex: 1})
		if err != nil {
			sm.t.Fatal(err)
		}
		o.ah = ah
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, peer.qp.QPN(), 0x1111
	}
	if err := e.qp.PostSend(&wr); err != nil {
		sm.t.Fatalf("post %v on %s qp %#x: %v", o.op, e.node.name, e.qp.QPN(), err)
	}
	sm.nextID++
	sm.posted++
	e.inQ++
	if o.signaled {
		e.unsig = 0
		sm.pending++
	} else {
		e.unsig++
	}
	o.waits = 1
	consumes := o.op == OpSend || o.op == OpSendWithImm || o.op == OpSendWithInv || o.op == OpWriteWithImm
	if consumes && c.typ == RC {
		peer.exp = append(peer.exp, o)
		sm.pending++
		o.waits++
	}
	e.sent = append(e.sent, o)
	sm.ops[o.id] = o
}

// replenish keeps receives posted, lagging at random to provoke RNR.
func (sm *sim) replenish() {
	if sm.r.IntN(3) != 0 {
		return
	}
	now := sm.s.clock.Now()
	for _, c := range sm.conns {
		for _, e := range c.ends {
			n := e.node
			if c.useSRQ {
				continue
			}
			for e.nrecv < 8 {
				ch := n.alloc(now)
				if ch < 0 {
					return
				}
				sm.nextID++
				wr := RecvWR{ID: sm.nextID, SG: []SGE{n.mr.SGE(uint64(ch*simChunk), simChunk)}}
				if err := e.qp.PostRecv(&wr); err != nil {
					sm.t.Fatalf("post recv: %v", err)
				}
				e.recvs[wr.ID] = ch
				e.nrecv++
			}
		}
	}
	for _, n := range sm.nodes {
		for n.srq.Len() < 24 {
			ch := n.alloc(now)
			if ch < 0 {
				return
			}
			sm.nextID++
			wr := RecvWR{ID: sm.nextID, SG: []SGE{n.mr.SGE(uint64(ch*simChunk), simChunk)}}
			if err := n.srq.PostRecv(&wr); err != nil {
				sm.t.Fatalf("post srq recv: %v", err)
			}
			n.srqBuf[wr.ID] = ch
		}
	}
}

func (sm *sim) done(o *simOp) {
	o.waits--
	if o.waits > 0 {
		return
	}
	now := sm.s.clock.Now()
	e := o.end
	e.node.release(o.local, now)
	if o.remote >= 0 {
		e.conn.ends[1-e.side].node.release(o.remote, now)
	}
	if o.inv != nil {
		o.inv.Deregister()
	}
	if o.ah != nil {
		o.ah.Destroy()
	}
	if e.conn.typ == RC {
		delete(sm.ops, o.id)
	}
}

// retire verifies a request whose send side is complete.
func (sm *sim) retire(o *simOp) {
	t := sm.t
	e := o.end
	peer := e.conn.ends[1-e.side]
	e.inQ--
	if e.conn.typ == RC {
		switch o.op {
		case OpWrite, OpWriteWithImm:
			if !patternOK(peer.node.chunk(o.remote)[:o.n], o.id) {
				t.Errorf("RC write %d (%d bytes) from %s: remote data wrong", o.id, o.n, e.node.name)
			}
		case OpRead:
			if !patternOK(e.node.chunk(o.local)[:o.n], o.id) {
				t.Errorf("RC read %d (%d bytes) by %s: data wrong", o.id, o.n, e.node.name)
			}
		case OpCompareSwap, OpFetchAdd:
			if got := binary.NativeEndian.Uint64(e.node.chunk(o.local)); got != o.expect {
				t.Errorf("%v %d by %s: original value %#x, want %#x", o.op, o.id, e.node.name, got, o.expect)
			}
		}
	}
	sm.done(o)
}

var wantWCOp = [...]qp.WCOpcode{OpSend: qp.WCSend, OpSendWithImm: qp.WCSend, OpSendWithInv: qp.WCSend,
	OpWrite: qp.WCRDMAWrite, OpWriteWithImm: qp.WCRDMAWrite, OpRead: qp.WCRDMARead,
	OpCompareSwap: qp.WCCompSwap, OpFetchAdd: qp.WCFetchAdd}

func (sm *sim) poll() {
	t := sm.t
	for _, n := range sm.nodes {
		if n.scq.Err() != nil || n.rcq.Err() != nil {
			t.Fatalf("%s: cq overrun", n.name)
		}
		for k := n.scq.Poll(sm.wcs); k > 0; k = n.scq.Poll(sm.wcs) {
			for i := range sm.wcs[:k] {
				sm.sendWC(n, &sm.wcs[i])
			}
		}
		for k := n.rcq.Poll(sm.wcs); k > 0; k = n.rcq.Poll(sm.wcs) {
			for i := range sm.wcs[:k] {
				sm.recvWC(n, &sm.wcs[i])
			}
		}
	}
}

func (sm *sim) sendWC(n *simNode, wc *WC) {
	t := sm.t
	e := n.byQPN[wc.QPN]
	if e == nil {
		t.Fatalf("%s: send completion for unknown qp %#x", n.name, wc.QPN)
	}
	if wc.Status != qp.WCSuccess {
		sm.dumpTrace()
		t.Fatalf("%s qp %#x (%v): wr %d completed with %v", n.name, wc.QPN, e.conn.typ, wc.ID, wc.Status)
	}
	// Unsignaled requests before it are complete too.
	for len(e.sent) > 0 && !e.sent[0].signaled {
		sm.retire(e.sent[0])
		e.sent = e.sent[1:]
	}
	if len(e.sent) == 0 || e.sent[0].id != wc.ID {
		want := "none"
		if len(e.sent) > 0 {
			want = strconv.FormatUint(e.sent[0].id, 10)
		}
		t.Fatalf("%s qp %#x (%v): completion of wr %d, expected wr %s (duplicate or out of order)", n.name, wc.QPN, e.conn.typ, wc.ID, want)
	}
	o := e.sent[0]
	e.sent = e.sent[1:]
	if wc.Opcode != wantWCOp[o.op] {
		t.Errorf("wr %d: completion opcode %v, want %v", o.id, wc.Opcode, wantWCOp[o.op])
	}
	sm.pending--
	sm.retire(o)
}

func (sm *sim) recvWC(n *simNode, wc *WC) {
	t := sm.t
	e := n.byQPN[wc.QPN]
	if e == nil {
		t.Fatalf("%s: receive completion for unknown qp %#x", n.name, wc.QPN)
	}
	if wc.Status != qp.WCSuccess {
		t.Fatalf("%s qp %#x (%v): receive %d completed with %v", n.name, wc.QPN, e.conn.typ, wc.ID, wc.Status)
	}
	var ch int
	var ok bool
	if e.conn.useSRQ {
		ch, ok = n.srqBuf[wc.ID]
		delete(n.srqBuf, wc.ID)
	} else {
		ch, ok = e.recvs[wc.ID]
		delete(e.recvs, wc.ID)
		e.nrecv--
	}
	if !ok {
		t.Fatalf("%s qp %#x: completion of unknown receive %d", n.name, wc.QPN, wc.ID)
	}
	defer n.release(ch, sm.s.clock.Now())
	buf := n.chunk(ch)
	peer := e.conn.ends[1-e.side]
	switch e.conn.typ {
	case RC:
		if len(e.exp) == 0 {
			t.Fatalf("%s qp %#x: unexpected receive completion %+v", n.name, wc.QPN, *wc)
		}
		o := e.exp[0]
		e.exp = e.exp[1:]
		sm.checkRecv(n, e, o, wc, buf)
		sm.pending--
		sm.done(o)
	case UC, UD:
		data := buf[:wc.ByteLen]
		if e.conn.typ == UD {
			if wc.Flags&qp.WCWithGRH == 0 || wc.ByteLen < 40 || wc.SrcQP != peer.qp.QPN() {
				t.Fatalf("%s ud qp %#x: bad completion %+v", n.name, wc.QPN, *wc)
			}
			data = buf[40:wc.ByteLen]
		}
		var id uint64
		if wc.Opcode == qp.WCRecvRDMAImm {
			id = uint64(wc.Imm)
		} else if len(data) >= 8 {
			id = binary.BigEndian.Uint64(data)
		}
		o := sm.ops[id]
		if o == nil || o.end != peer {
			t.Fatalf("%s %v qp %#x: received a message (id %d, %d bytes) nobody sent to it", n.name, e.conn.typ, wc.QPN, id, len(data))
		}
		o.received++
		sm.checkRecv(n, e, o, wc, buf)
	}
}

func (sm *sim) checkRecv(n *simNode, e *simEnd, o *simOp, wc *WC, buf []byte) {
	t := sm.t
	switch o.op {
	case OpWriteWithImm:
		if wc.Opcode != qp.WCRecvRDMAImm || wc.Flags&qp.WCWithImm == 0 || wc.Imm != uint32(o.id) || int(wc.ByteLen) != o.n {
			t.Errorf("%s: write-with-imm %d: completion %+v", n.name, o.id, *wc)
		}
		if !patternOK(n.chunk(o.remote)[:o.n], o.id) {
			t.Errorf("%s: write-with-imm %d (%d bytes): data wrong at receive time", n.name, o.id, o.n)
		}
	default:
		data := buf[:wc.ByteLen]
		if e.conn.typ == UD {
			data = buf[40:wc.ByteLen]
		}
		if wc.Opcode != qp.WCRecv || len(data) != o.n || !patternOK(data, o.id) {
			t.Errorf("%s %v: send %d (%v, %d bytes): completion %+v, data ok %v", n.name, e.conn.typ, o.id, o.op, o.n, *wc,
				len(data) == o.n && patternOK(data, o.id))
		}
		if (o.op == OpSendWithImm) != (wc.Flags&qp.WCWithImm != 0) || (o.op == OpSendWithImm && wc.Imm != uint32(o.id)) {
			t.Errorf("%s: send %d (%v): imm flag/value wrong: %+v", n.name, o.id, o.op, *wc)
		}
		if o.op == OpSendWithInv {
			if wc.Flags&qp.WCWithInv == 0 || wc.InvRKey != o.inv.RKey() || o.inv.Valid() {
				t.Errorf("%s: send-with-inv %d: completion %+v, region still valid %v", n.name, o.id, *wc, o.inv.Valid())
			}
		}
	}
}

func (sm *sim) dump() {
	for _, c := range sm.conns {
		for _, e := range c.ends {
			a, _ := e.qp.Query()
			sent := len(e.sent)
			var first uint64
			if sent > 0 {
				first = e.sent[0].id
			}
			sm.t.Logf("%s %v qp %#x: state %v, %d awaiting completion (first %d), %d receives expected, sq psn %#x rq psn %#x, counters %+v",
				e.node.name, c.typ, e.qp.QPN(), a.State, sent, first, len(e.exp), a.SQPSN, a.RQPSN, e.qp.Counters())
		}
	}
}

func (sm *sim) dumpTrace() {
	tr := sm.s.trace
	if len(tr) > 100000 {
		tr = tr[len(tr)-100000:]
	}
	for _, l := range tr {
		sm.t.Log(l)
	}
}
