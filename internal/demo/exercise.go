package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/uroce/uroce/stack"
)

// Op is one operation of the workload.
type Op int

// The operations, in the order Exercise runs them.
const (
	RCSend     Op = iota // RC SEND to posted receives
	RCWrite              // RC RDMA WRITE
	RCWriteImm           // RC RDMA WRITE with immediate (a receive completion each)
	RCRead               // RC RDMA READ
	RCCmpSwap            // RC atomic compare and swap
	RCFetchAdd           // RC atomic fetch and add
	UCWrite              // UC RDMA WRITE
	UDSend               // UD SEND (with immediate, to number the datagrams)
)

// AllOps are all the operations, in order.
var AllOps = []Op{RCSend, RCWrite, RCWriteImm, RCRead, RCCmpSwap, RCFetchAdd, UCWrite, UDSend}

var opNames = [...]string{"RC SEND/RECV", "RC WRITE", "RC WRITE_WITH_IMM", "RC READ", "RC CMP_SWAP",
	"RC FETCH_ADD", "UC WRITE", "UD SEND"}

func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// reliable reports whether the operation runs on RC.
func (o Op) reliable() bool { return o <= RCFetchAdd }

// atomic reports whether the operation is an 8-byte atomic.
func (o Op) atomic() bool { return o == RCCmpSwap || o == RCFetchAdd }

// Workload says what Exercise runs.
type Workload struct {
	// Ops are the operations (default AllOps).
	Ops []Op
	// Size is the message size in bytes (default 65536). Atomics move 8
	// bytes; UD datagrams are cut to the path MTU.
	Size int
	// Count is the number of messages of each operation (default 1000).
	Count int
	// Window is the number of RC operations in flight (default 16).
	Window int
	// Latency is the number of RC operations, one at a time, timed from
	// post to completion before the throughput run (default
	// min(Count, 200); negative: none).
	Latency int
	// IPv6 runs over the devices' first global IPv6 GIDs instead of their
	// first IPv4 ones.
	IPv6 bool
	// Lossy says faults are injected: UC and UD messages may then be lost
	// (they are counted); without it, a lost message is an error.
	Lossy bool
	// LossWait is how long a UC or UD receiver waits for missing messages
	// when nothing arrives (default 200 ms).
	LossWait time.Duration
	// Stall fails the run when an operation makes no progress for this
	// long (default 20 s).
	Stall time.Duration
	// Timeout is the RC QPs' local ACK timeout code: 4.096 µs × 2^Timeout
	// (default 12, 16.8 ms). Shorter recovers faster from lost tails but
	// fires spuriously when the engines are starved of CPU time.
	Timeout uint8
	// Seed seeds the message contents.
	Seed uint64
	// Progress, if set, is called with each operation's result as soon as
	// it is done.
	Progress func(OpResult)
}

func (w *Workload) defaults() error {
	if w.Ops == nil {
		w.Ops = AllOps
	}
	if w.Size == 0 {
		w.Size = 65536
	}
	if w.Count == 0 {
		w.Count = 1000
	}
	if w.Window == 0 {
		w.Window = 16
	}
	if w.Latency == 0 {
		w.Latency = min(w.Count, 200)
	}
	if w.Timeout == 0 {
		w.Timeout = 12
	}
	if w.LossWait <= 0 {
		w.LossWait = 200 * time.Millisecond
	}
	if w.Stall <= 0 {
		w.Stall = 20 * time.Second
	}
	switch {
	case w.Size < 1 || w.Size > 1<<30:
		return fmt.Errorf("message size %d: want 1 byte to 1 GiB", w.Size)
	case w.Count < 1:
		return fmt.Errorf("message count %d: want at least 1", w.Count)
	case w.Window < 1 || w.Window > 128:
		return fmt.Errorf("window %d: want 1 to 128", w.Window)
	}
	for _, o := range w.Ops {
		if o < RCSend || o > UDSend {
			return fmt.Errorf("unknown operation %d", int(o))
		}
	}
	return nil
}

// Latency sums up the times of operations run one at a time.
type Latency struct {
	N                     int
	Min, Median, P99, Max time.Duration
	samples               []time.Duration
}

func latencyOf(s []time.Duration) Latency {
	if len(s) == 0 {
		return Latency{}
	}
	slices.Sort(s)
	p99 := (len(s)*99 + 99) / 100
	return Latency{N: len(s), Min: s[0], Median: s[len(s)/2], P99: s[min(p99, len(s))-1], Max: s[len(s)-1], samples: s}
}

// OpResult is what one operation did.
type OpResult struct {
	Op       Op
	Size     int   // bytes per message
	Messages int   // messages delivered and verified (throughput run)
	Lost     int   // UC and UD messages that did not arrive intact
	Extra    int   // UD datagrams that arrived twice (duplicated frames)
	Bytes    int64 // verified bytes of the throughput run
	Elapsed  time.Duration
	Latency  Latency // RC only
}

// Gbps returns the throughput of the verified bytes in Gbit/s.
func (r OpResult) Gbps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9
}

// ErrData reports data that did not arrive as sent.
var ErrData = errors.New("data differs from what was sent")

// Exercise runs the workload from device a to device b, which must reach
// each other (an interface pair, or a pipe), and checks every byte that
// arrives. Each operation gets fresh QPs, destroyed afterwards.
func Exercise(ctx context.Context, a, b *stack.Device, w Workload) ([]OpResult, error) {
	if err := w.defaults(); err != nil {
		return nil, fmt.Errorf("exercise: %w", err)
	}
	s, err := newSession(a, b, &w)
	if err != nil {
		return nil, fmt.Errorf("exercise: %w", err)
	}
	defer s.close()
	var out []OpResult
	for _, op := range w.Ops {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r, err := s.run(ctx, op)
		if err != nil {
			return out, fmt.Errorf("%v: %w", op, err)
		}
		out = append(out, r)
		if w.Progress != nil {
			w.Progress(r)
		}
	}
	return out, nil
}

// side is one device's objects.
type side struct {
	dev      *stack.Device
	pd       *stack.PD
	scq, rcq *stack.CQ
	buf      []byte
	mr       *stack.MR
	gid      int
}

// session holds both sides and the message contents.
type session struct {
	w      *Workload
	a, b   *side
	slots  int // message slots per side
	stride int // bytes per slot
	atomic int // offset of the atomic target word
	base   []byte
	ud     int // UD datagram size
	wc     []stack.WC
}

const (
	grh     = 40 // UD receive buffers start with the GRH slot
	cqDepth = 1024
	qkey    = 0x11111111
)

func newSession(a, b *stack.Device, w *Workload) (*session, error) {
	s := &session{w: w, slots: max(2*w.Window, 32), wc: make([]stack.WC, 64)}
	s.stride = (w.Size + grh + 63) &^ 63
	s.atomic = s.slots * s.stride
	mtu := min(a.Query().ActiveMTU.Bytes(), b.Query().ActiveMTU.Bytes())
	s.ud = min(w.Size, mtu)
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x6a09e667f3bcc909))
	s.base = make([]byte, w.Size+4096)
	for i := range s.base {
		s.base[i] = byte(rng.Uint32())
	}
	var err error
	if s.a, err = newSide(a, s.atomic+64, w.IPv6); err != nil {
		return nil, err
	}
	if s.b, err = newSide(b, s.atomic+64, w.IPv6); err != nil {
		s.a.close()
		return nil, err
	}
	return s, nil
}

func newSide(d *stack.Device, size int, v6 bool) (*side, error) {
	gid := -1
	for i, g := range d.GIDs() {
		if i > 0 && (g.Is4In6() && !v6 || v6 && !g.Is4In6() && !g.IsLinkLocalUnicast()) {
			gid = i
			break
		}
	}
	if gid < 0 {
		fam := "IPv4"
		if v6 {
			fam = "global IPv6"
		}
		return nil, fmt.Errorf("device %s has no %s address", d.Query().Name, fam)
	}
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	s := &side{dev: d, pd: pd, gid: gid, buf: make([]byte, size)}
	if s.scq, err = d.CreateCQ(cqDepth); err == nil {
		s.rcq, err = d.CreateCQ(cqDepth)
	}
	if err == nil {
		s.mr, err = pd.RegisterMR(s.buf, stack.AccessLocalWrite|stack.AccessRemoteWrite|stack.AccessRemoteRead|stack.AccessRemoteAtomic)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *side) close() {
	if s.mr != nil {
		s.mr.Deregister()
	}
	for _, cq := range []*stack.CQ{s.scq, s.rcq} {
		if cq != nil {
			cq.Destroy()
		}
	}
	s.pd.Dealloc()
}

func (s *session) close() {
	s.a.close()
	s.b.close()
}

// pattern returns the contents of message i: a window into a random block
// that moves with i.
func (s *session) pattern(i, n int) []byte {
	off := (i*61 + 7) % 4096
	return s.base[off : off+n]
}

// slot returns the offset of slot k.
func (s *session) slot(k int) int { return (k % s.slots) * s.stride }

func (s *session) gid(sd *side) netip.Addr {
	g, _ := sd.dev.GID(sd.gid)
	return g
}

// connect creates a QP of type t on each side and brings them to RTS.
func (s *session) connect(t stack.QPType) (qa, qb *stack.QP, err error) {
	mk := func(sd *side) (*stack.QP, error) {
		return sd.pd.CreateQP(stack.QPInit{Type: t, SendCQ: sd.scq, RecvCQ: sd.rcq, MaxSendWR: 256, MaxRecvWR: 256})
	}
	if qa, err = mk(s.a); err != nil {
		return nil, nil, err
	}
	if qb, err = mk(s.b); err != nil {
		qa.Destroy()
		return nil, nil, err
	}
	fail := func(e error) (*stack.QP, *stack.QP, error) {
		qa.Destroy()
		qb.Destroy()
		return nil, nil, e
	}
	access := stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic
	for _, c := range []struct {
		q, peer *stack.QP
		me, you *side
		psn     stack.PSN
	}{{qa, qb, s.a, s.b, 0x100}, {qb, qa, s.b, s.a, 0xfffff0}} {
		if err := c.q.ToInit(stack.InitAttr{AccessFlags: access, QKey: qkey}); err != nil {
			return fail(err)
		}
		var rtr stack.RTRAttr
		if t != stack.UD {
			rtr = stack.RTRAttr{DestQPN: c.peer.QPN(), AH: stack.AHAttr{DGID: s.gid(c.you), SGIDIndex: c.me.gid},
				RQPSN: 0x100 ^ 0xfffff0 ^ c.psn, MaxDestRdAtomic: 16, MinRNRTimer: 1}
		}
		if err := c.q.ToRTR(rtr); err != nil {
			return fail(err)
		}
		if err := c.q.ToRTS(stack.RTSAttr{SQPSN: c.psn, Timeout: s.w.Timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
			return fail(err)
		}
	}
	return qa, qb, nil
}

// run runs one operation.
func (s *session) run(ctx context.Context, op Op) (OpResult, error) {
	switch op {
	case UCWrite:
		return s.runUC(ctx)
	case UDSend:
		return s.runUD(ctx)
	}
	return s.runRC(ctx, op)
}
