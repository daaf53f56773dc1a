package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/daemon"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 0xa}
	macB = [6]byte{2, 0, 0, 0, 0, 0xb}
	ipA  = netip.MustParseAddr("192.0.2.1")
	ipB  = netip.MustParseAddr("192.0.2.2")
)

// pair is two devices joined by the in-memory pipe, each served by a
// daemon on a socket of its own.
type pair struct {
	a, b   *stack.Device
	sa, sb *daemon.Server
}

func newPair(t *testing.T) *pair {
	t.Helper()
	return newPairLimits(t, stack.Limits{})
}

// newPairLimits is newPair with device limits for b.
func newPairLimits(t *testing.T, lim stack.Limits) *pair {
	t.Helper()
	return newPairWith(t, lim, nil)
}

// newPairWith is newPairLimits with a's link wrapped by wrapA (when not
// nil: a fault link).
func newPairWith(t *testing.T, lim stack.Limits, wrapA func(stack.Link) stack.Link) *pair {
	t.Helper()
	pa, lb := pipe.New(pipe.Config{MTU: 9000})
	var la stack.Link = pa
	if wrapA != nil {
		la = wrapA(pa)
	}
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	p := &pair{}
	var err error
	if p.a, err = stack.Open(context.Background(), stack.Config{Link: la, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb, IdleSpin: spin}); err != nil {
		t.Fatal(err)
	}
	if p.b, err = stack.Open(context.Background(), stack.Config{Link: lb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, IdleSpin: spin,
		Limits: lim}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p.sa = serve(t, p.a, filepath.Join(dir, "a.sock"))
	p.sb = serve(t, p.b, filepath.Join(dir, "b.sock"))
	t.Cleanup(func() {
		p.sa.Shutdown()
		p.sb.Shutdown()
		p.a.Close()
		p.b.Close()
	})
	return p
}

func serve(t testing.TB, d *stack.Device, sock string) *daemon.Server {
	t.Helper()
	s, err := daemon.Listen(daemon.Config{Device: d, Socket: sock, Netdev: "pipe"})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	return s
}

func open(t testing.TB, s *daemon.Server) *client.Device {
	t.Helper()
	d, err := client.Open(context.Background(), s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// end is one side's objects.
type end struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	buf []byte
	mr  verbs.MR
}

func newEnd(t testing.TB, dev verbs.Device, size int) *end {
	t.Helper()
	e := &end{dev: dev}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if e.buf, err = dev.AllocBuffer(size); err != nil {
		t.Fatal(err)
	}
	acc := stack.AccessLocalWrite | stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic
	if e.mr, err = e.pd.RegisterMR(e.buf, acc); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *end) qp(t testing.TB, typ stack.QPType) verbs.QP {
	t.Helper()
	q, err := e.pd.CreateQP(verbs.QPInit{Type: typ, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 64, MaxRecvWR: 64,
		MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 128})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func connect(t testing.TB, qa, qb verbs.QP, ga, gb netip.Addr) {
	t.Helper()
	acc := stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic |
		stack.AccessFlushGlobal | stack.AccessFlushPersistent
	for _, x := range []struct {
		q, peer verbs.QP
		gid     netip.Addr
	}{{qa, qb, gb}, {qb, qa, ga}} {
		if err := x.q.ToInit(stack.InitAttr{AccessFlags: acc, QKey: 0x1111}); err != nil {
			t.Fatal(err)
		}
		if x.q.Type() == stack.UD {
			if err := x.q.ToRTR(stack.RTRAttr{}); err != nil {
				t.Fatal(err)
			}
			if err := x.q.ToRTS(stack.RTSAttr{SQPSN: 5}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := x.q.ToRTR(stack.RTRAttr{DestQPN: x.peer.QPN(), AH: stack.AHAttr{DGID: x.gid, SGIDIndex: 1},
			RQPSN: 100, MaxDestRdAtomic: 8, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := x.q.ToRTS(stack.RTSAttr{SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitN waits for n completions on cq.
func waitN(t *testing.T, cq verbs.CQ, n int) []stack.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []stack.WC
	wcs := make([]stack.WC, 16)
	for len(got) < n {
		k := cq.Poll(wcs)
		got = append(got, wcs[:k]...)
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for %d completions, got %d %+v: %v", n, len(got), got, err)
			}
		}
	}
	return got
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*13) + byte(i>>9)
	}
}

// TestDaemonOperations runs every operation between two clients, each on
// its own daemon, through rings and shared memory.
func TestDaemonOperations(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<20), newEnd(t, open(t, p.sb), 1<<20)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	if ga.Unmap() != ipA || gb.Unmap() != ipB {
		t.Fatalf("gids %v %v", ga, gb)
	}
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)

	// SEND with immediate data, three SGEs, then inline.
	fill(A.buf[:20000], 1)
	if err := qb.PostRecv(&stack.RecvWR{ID: 50, SG: []stack.SGE{B.mr.SGE(0, 30000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&stack.RecvWR{ID: 51, SG: []stack.SGE{B.mr.SGE(40000, 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 1, Op: stack.OpSendWithImm, Flags: stack.SendSignaled, Imm: 0xabcdef01,
		SG: []stack.SGE{A.mr.SGE(0, 5000), A.mr.SGE(5000, 5000), A.mr.SGE(10000, 10000)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled | stack.SendInline,
		SG: []stack.SGE{A.mr.SGE(100, 60)}}); err != nil {
		t.Fatal(err)
	}
	wa, wb := waitN(t, A.cq, 2), waitN(t, B.cq, 2)
	if wa[0].ID != 1 || wa[1].ID != 2 || wa[0].Status != 0 || wa[1].Status != 0 {
		t.Fatalf("send completions %+v", wa)
	}
	if wb[0].ID != 50 || wb[0].ByteLen != 20000 || wb[0].Imm != 0xabcdef01 || wb[0].Flags&stack.WCWithImm == 0 ||
		wb[1].ID != 51 || wb[1].ByteLen != 60 || wb[1].Opcode != stack.WCRecv {
		t.Fatalf("receive completions %+v", wb)
	}
	if !bytes.Equal(B.buf[:20000], A.buf[:20000]) || !bytes.Equal(B.buf[40000:40060], A.buf[100:160]) {
		t.Fatal("send data differs")
	}

	// WRITE, READ back elsewhere, atomics.
	fill(A.buf[100000:300000], 9)
	wrs := []verbs.SendWR{
		{ID: 3, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(100000, 200000)},
			Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 300000, RKey: B.mr.RKey()}},
		{ID: 4, Op: stack.OpRead, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(500000, 200000)},
			Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 300000, RKey: B.mr.RKey()}},
	}
	if n, err := qa.PostSendBatch(wrs); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	binary.LittleEndian.PutUint64(B.buf[800000:], 41)
	for _, wr := range []verbs.SendWR{
		{ID: 5, Op: stack.OpFetchAdd, CompareAdd: 1, SG: []stack.SGE{A.mr.SGE(900000, 8)}},
		{ID: 6, Op: stack.OpCompareSwap, CompareAdd: 42, Swap: 7, SG: []stack.SGE{A.mr.SGE(900008, 8)}},
	} {
		wr.Flags = stack.SendSignaled
		wr.Remote = stack.RemoteAddr{Addr: B.mr.Addr() + 800000, RKey: B.mr.RKey()}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range waitN(t, A.cq, 4) {
		if wc.ID != uint64(i+3) || wc.Status != 0 {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(B.buf[300000:500000], A.buf[100000:300000]) || !bytes.Equal(A.buf[500000:700000], A.buf[100000:300000]) {
		t.Fatal("write or read data differs")
	}
	r := func(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if r(A.buf, 900000) != 41 || r(A.buf, 900008) != 42 || r(B.buf, 800000) != 7 {
		t.Fatalf("atomics: %d %d %d", r(A.buf, 900000), r(A.buf, 900008), r(B.buf, 800000))
	}

	// ATOMIC_WRITE (from an SGE, and inline), FLUSH of a range and of
	// the whole region, and a READ back, through the send slots.
	flushable, err := B.pd.RegisterMR(make([]byte, 4096), stack.AccessLocalWrite|stack.AccessRemoteWrite|
		stack.AccessRemoteRead|stack.AccessFlushGlobal|stack.AccessFlushPersistent)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(A.buf[910000:], 0x1122334455667788)
	at := stack.RemoteAddr{Addr: flushable.Addr() + 64, RKey: flushable.RKey()}
	for _, wr := range []verbs.SendWR{
		{ID: 20, Op: stack.OpAtomicWrite, SG: []stack.SGE{A.mr.SGE(910000, 8)}, Remote: at},
		{ID: 21, Op: stack.OpAtomicWrite, Flags: stack.SendInline, Inline: []byte{1, 2, 3, 4, 5, 6, 7, 8},
			Remote: stack.RemoteAddr{Addr: at.Addr + 8, RKey: at.RKey}},
		{ID: 22, Op: stack.OpFlush, Remote: at, FlushType: stack.FlushPersistent, FlushLen: 16},
		{ID: 23, Op: stack.OpFlush, Remote: at, FlushType: stack.FlushGlobal, FlushLevel: stack.FlushMR},
		{ID: 24, Op: stack.OpRead, SG: []stack.SGE{A.mr.SGE(920000, 16)}, Remote: at},
	} {
		wr.Flags |= stack.SendSignaled
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range waitN(t, A.cq, 5) {
		want := [5]stack.WCOpcode{stack.WCAtomicWrite, stack.WCAtomicWrite, stack.WCFlush, stack.WCFlush, stack.WCRDMARead}[i]
		if wc.ID != uint64(20+i) || wc.Status != 0 || wc.Opcode != want {
			t.Fatalf("placement completion %d: %+v", i, wc)
		}
	}
	if r(A.buf, 920000) != 0x1122334455667788 || !bytes.Equal(A.buf[920008:920016], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("atomic writes read back % x", A.buf[920000:920016])
	}

	// A bad R_Key: remote access error, as in-process.
	if err := qa.PostSend(&verbs.SendWR{ID: 7, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 8)},
		Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey() ^ 0x100}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, A.cq, 1); wc[0].Status != stack.WCRemAccessErr {
		t.Fatalf("bad rkey: %+v", wc[0])
	}
	if qa.State() != stack.StateErr {
		t.Errorf("state %v after a remote access error", qa.State())
	}
}

// TestDaemonUDAndSRQ sends UD datagrams through an address handle to a
// QP that takes its receives from an SRQ.
func TestDaemonUDAndSRQ(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<16), newEnd(t, open(t, p.sb), 1<<16)
	srq, err := B.pd.CreateSRQ(stack.SRQInit{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qa := A.qp(t, stack.UD)
	qb, err := B.pd.CreateQP(verbs.QPInit{Type: stack.UD, SendCQ: B.cq, RecvCQ: B.cq, SRQ: srq, MaxSendWR: 8, MaxSendSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	connect(t, qa, qb, ga, gb)
	for i := 0; i < 4; i++ {
		if err := srq.PostRecv(&stack.RecvWR{ID: uint64(100 + i), SG: []stack.SGE{B.mr.SGE(uint64(i)*4096, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := A.pd.CreateAH(stack.AHAttr{DGID: gb, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ah.Attr().DMAC != macB {
		t.Errorf("ah resolved %x", ah.Attr().DMAC)
	}
	fill(A.buf[:1000], 3)
	for i := 0; i < 3; i++ {
		if err := qa.PostSend(&verbs.SendWR{ID: uint64(i), Op: stack.OpSend, Flags: stack.SendSignaled, AH: ah,
			RemoteQPN: qb.QPN(), RemoteQKey: 0x1111, SG: []stack.SGE{A.mr.SGE(0, 1000)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitN(t, A.cq, 3)
	wb := waitN(t, B.cq, 3)
	for i, wc := range wb {
		// The first 40 bytes are the GRH, as ibverbs places them.
		if wc.ID != uint64(100+i) || wc.Status != 0 || wc.ByteLen != 40+1000 || wc.SrcQP != qa.QPN() || wc.Flags&stack.WCWithGRH == 0 {
			t.Fatalf("ud receive %d: %+v", i, wc)
		}
		if !bytes.Equal(B.buf[i*4096+40:i*4096+1040], A.buf[:1000]) {
			t.Fatalf("ud datagram %d differs", i)
		}
	}
}

// TestManyClients: 64 clients with 16 QPs each on one daemon, every QP
// moving data at once to a peer client on the other daemon.
func TestManyClients(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping 64 clients with -short")
	}
	p := newPair(t)
	const clients, qps, size = 64, 16, 64 << 10
	type job struct {
		A, B   *end
		qa, qb []verbs.QP
	}
	jobs := make([]*job, clients)
	for i := range jobs {
		j := &job{A: newEnd(t, open(t, p.sa), qps*size), B: newEnd(t, open(t, p.sb), qps*size)}
		ga, _ := j.A.dev.GID(1)
		gb, _ := j.B.dev.GID(1)
		for k := 0; k < qps; k++ {
			qa, qb := j.A.qp(t, stack.RC), j.B.qp(t, stack.RC)
			connect(t, qa, qb, ga, gb)
			j.qa, j.qb = append(j.qa, qa), append(j.qb, qb)
		}
		fill(j.A.buf, byte(i))
		jobs[i] = j
	}
	if st := p.sa.Stats(0); len(st.Sessions) != clients {
		t.Fatalf("%d sessions, want %d", len(st.Sessions), clients)
	}
	errs := make(chan error, clients)
	for _, j := range jobs {
		go func() {
			for k, q := range j.qa {
				off := uint64(k * size)
				if err := q.PostSend(&verbs.SendWR{ID: uint64(k), Op: stack.OpWrite, Flags: stack.SendSignaled,
					SG: []stack.SGE{j.A.mr.SGE(off, size)}, Remote: stack.RemoteAddr{Addr: j.B.mr.Addr() + off, RKey: j.B.mr.RKey()}}); err != nil {
					errs <- err
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			wcs := make([]stack.WC, qps)
			for got := 0; got < qps; {
				n := j.A.cq.Poll(wcs)
				for _, wc := range wcs[:n] {
					if wc.Status != 0 {
						errs <- fmt.Errorf("completion %+v", wc)
						return
					}
				}
				got += n
				if n == 0 {
					if err := j.A.cq.Wait(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
			if !bytes.Equal(j.A.buf, j.B.buf) {
				errs <- errors.New("data differs")
				return
			}
			errs <- nil
		}()
	}
	for range jobs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// spin is how long the daemons' engines spin before they sleep
// (UROCE_DAEMON_SPIN, default the stack's).
var spin = func() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("UROCE_DAEMON_SPIN"))
	return d
}()

// TestDaemonNoAllocs: a work request through the daemon, from the
// client's post to its completion, allocates nothing, in the client or in
// the daemon (both run in this process; AllocsPerRun counts all).
func TestDaemonNoAllocs(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<16), newEnd(t, open(t, p.sb), 1<<16)
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connect(t, qa, qb, ga, gb)
	wr := verbs.SendWR{ID: 1, Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 4096)},
		Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}
	rwr := stack.RecvWR{ID: 2, SG: []stack.SGE{B.mr.SGE(8192, 4096)}}
	send := verbs.SendWR{ID: 3, Op: stack.OpSend, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 4096)}}
	wcs := make([]stack.WC, 4)
	reap := func(cq verbs.CQ, n int) {
		for got := 0; got < n; {
			k := cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != 0 {
					t.Fatalf("completion %+v", wc)
				}
			}
			got += k
			if k == 0 {
				runtime.Gosched()
			}
		}
	}
	round := func() {
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if err := qb.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend(&send); err != nil {
			t.Fatal(err)
		}
		reap(A.cq, 2)
		reap(B.cq, 1)
	}
	for i := 0; i < 50; i++ {
		round()
	}
	if n := testing.AllocsPerRun(300, round); n > 0 {
		t.Errorf("%.2f allocations per round of a WRITE, a receive and a SEND", n)
	}
}

// TestSendQueueFull: a client's send queue takes MaxSendWR requests and
// refuses the next with ErrQueueFull while they are outstanding, even
// once the daemon has taken them from the ring; an unanswered request
// (to a QPN the peer does not have) stays outstanding. ERR completes
// them all, and the queue takes requests again.
func TestSendQueueFull(t *testing.T) {
	p := newPair(t)
	A := newEnd(t, open(t, p.sa), 1<<16)
	q, err := A.pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: A.cq, RecvCQ: A.cq, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ToInit(stack.InitAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTR(stack.RTRAttr{DestQPN: 0xfffffe, AH: stack.AHAttr{DGID: ipB, SGIDIndex: 1}, MinRNRTimer: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(stack.RTSAttr{Timeout: 18, RetryCnt: 7, RNRRetry: 7}); err != nil {
		t.Fatal(err)
	}
	const max = 8 // a power of two: granted as asked
	wr := verbs.SendWR{Op: stack.OpWrite, Flags: stack.SendSignaled, SG: []stack.SGE{A.mr.SGE(0, 64)},
		Remote: stack.RemoteAddr{Addr: 0x1000, RKey: 0x1234}}
	for i := 0; i < max; i++ {
		wr.ID = uint64(i)
		if err := q.PostSend(&wr); err != nil {
			t.Fatalf("request %d of %d: %v", i+1, max, err)
		}
	}
	// Whether or not the daemon has taken them from the ring yet, they
	// are outstanding: give it time to.
	time.Sleep(50 * time.Millisecond)
	wr.ID = 99
	if err := q.PostSend(&wr); !errors.Is(err, stack.ErrQueueFull) {
		t.Fatalf("request %d past max_send_wr %d: %v, want %v", max+1, max, err, stack.ErrQueueFull)
	}
	if n, err := q.PostSendBatch([]verbs.SendWR{wr}); n != 0 || !errors.Is(err, stack.ErrQueueFull) {
		t.Fatalf("batch past max_send_wr: %d posted, %v", n, err)
	}
	if err := q.ToErr(); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitN(t, A.cq, max) {
		if wc.ID != uint64(i) || wc.Status == stack.WCSuccess {
			t.Fatalf("completion %d: %+v, want request %d flushed", i, wc, i)
		}
	}
	wr.ID = 100
	if err := q.PostSend(&wr); err != nil {
		t.Fatalf("post in ERR after the flush: %v", err)
	}
	if wc := waitN(t, A.cq, 1)[0]; wc.ID != 100 || wc.Status != stack.WCWRFlushErr {
		t.Fatalf("request posted in ERR: %+v", wc)
	}
}

// TestDaemonResizeCQ: ibv_resize_cq through the daemon. The completions
// waiting move to the new ring in order, the new ring holds more than
// the old one could, a size below what waits is EINVAL, and a CQ armed
// before the resize still gets its event after it.
func TestDaemonResizeCQ(t *testing.T) {
	p := newPair(t)
	A := newEnd(t, open(t, p.sa), 1<<16)
	cq, err := A.dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	// flushed posts n receives to a new QP whose receive CQ is cq and
	// moves it to ERR: n flush completions are in cq when it returns.
	flushed := func(id0, n int) {
		t.Helper()
		q, err := A.pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: A.cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 16, MaxRecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ToInit(stack.InitAttr{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := q.PostRecv(&stack.RecvWR{ID: uint64(id0 + i), SG: []stack.SGE{A.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.ToErr(); err != nil {
			t.Fatal(err)
		}
	}
	flushed(1, 4)
	wcs := make([]stack.WC, 32)
	if n := cq.Poll(wcs[:1]); n != 1 || wcs[0].ID != 1 {
		t.Fatalf("poll: %d %+v", n, wcs[:n])
	}
	if err := cq.Resize(2); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resize to 2 with 3 waiting: %v, want EINVAL", err)
	}
	if err := cq.Resize(1 << 30); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resize past max_cqe: %v, want EINVAL", err)
	}
	if err := cq.Resize(16); err != nil {
		t.Fatal(err)
	}
	flushed(10, 10) // 13 waiting: more than the old ring's 4
	got := waitN(t, cq, 13)
	for i, w := range got {
		want := uint64(2 + i)
		if i >= 3 {
			want = uint64(10 + i - 3)
		}
		if w.ID != want || w.Status != stack.WCWRFlushErr {
			t.Fatalf("completion %d: %+v, want ID %d flushed", i, w, want)
		}
	}
	if n := cq.Poll(wcs); n != 0 {
		t.Fatalf("%d more completions: %+v", n, wcs[:n])
	}

	// Armed, then resized: the event comes from the new ring.
	woke := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { woke <- cq.Wait(ctx) }()
	time.Sleep(50 * time.Millisecond) // Wait spins 100 µs, then arms and sleeps (correct either way)
	if err := cq.Resize(64); err != nil {
		t.Fatal(err)
	}
	flushed(30, 1)
	if err := <-woke; err != nil {
		t.Fatalf("wait across a resize: %v", err)
	}
	if got := waitN(t, cq, 1); got[0].ID != 30 {
		t.Fatalf("after the resize: %+v", got)
	}

	// Resizes while another goroutine polls: every completion once, in
	// order (a resize below what waits is refused and changes nothing).
	// The poller takes one at a time, slowly, so that completions wait
	// (and it polls) while a resize is under way; each round waits until
	// it has taken the last round's, so that the CQ never overruns.
	const rounds, per = 30, 12
	seen := make(chan []uint64, 1)
	stop := make(chan struct{})
	var taken atomic.Int64
	go func() {
		var ids []uint64
		wcs := make([]stack.WC, 1)
		for len(ids) < rounds*per {
			select {
			case <-stop:
				seen <- ids
				return
			default:
			}
			for _, w := range wcs[:cq.Poll(wcs)] {
				ids = append(ids, w.ID)
				taken.Add(1)
			}
			time.Sleep(10 * time.Microsecond)
		}
		seen <- ids
	}()
	for i := 0; i < rounds; i++ {
		for deadline := time.Now().Add(10 * time.Second); taken.Load() < int64(i*per) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Microsecond)
		}
		flushed(1000+i*per, per)
		if err := cq.Resize([]int{16, 64, 32}[i%3]); err != nil {
			close(stop)
			t.Fatalf("resize %d: %v", i, err)
		}
	}
	var ids []uint64
	select {
	case ids = <-seen:
	case <-time.After(20 * time.Second):
		close(stop)
		ids = <-seen
	}
	if len(ids) != rounds*per {
		t.Fatalf("%d completions polled during the resizes, want %d", len(ids), rounds*per)
	}
	for i, id := range ids {
		if id != uint64(1000+i) {
			t.Fatalf("completion %d during the resizes: ID %d, want %d", i, id, 1000+i)
		}
	}
}

// TestDaemonResizeSRQ: ibv_modify_srq's IBV_SRQ_MAX_WR through the
// daemon. The receives posted before the resize stay, in order, and the
// SRQ then takes as many as its new size; a size below what it holds is
// EINVAL. An RC QP on the SRQ receives a SEND for each of them.
func TestDaemonResizeSRQ(t *testing.T) {
	p := newPair(t)
	A, B := newEnd(t, open(t, p.sa), 1<<16), newEnd(t, open(t, p.sb), 1<<20)
	srq, err := B.pd.CreateSRQ(stack.SRQInit{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qa := A.qp(t, stack.RC)
	qb, err := B.pd.CreateQP(verbs.QPInit{Type: stack.RC, SendCQ: B.cq, RecvCQ: B.cq, SRQ: srq, MaxSendWR: 8, MaxSendSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ga, _ := A.dev.GID(1)
	gb, _ := B.dev.GID(1)
	connect(t, qa, qb, ga, gb)
	post := func(i int) error {
		return srq.PostRecv(&stack.RecvWR{ID: uint64(100 + i), SG: []stack.SGE{B.mr.SGE(uint64(i)*4096, 4096)}})
	}
	for i := 0; i < 4; i++ {
		if err := post(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Resize(2); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resize to 2 with 4 posted: %v, want EINVAL", err)
	}
	if err := srq.Resize(16); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 16; i++ {
		if err := post(i); err != nil {
			t.Fatalf("receive %d after the resize: %v", i, err)
		}
	}
	fill(A.buf[:16*100], 5)
	for i := 0; i < 16; i++ {
		if err := qa.PostSend(&verbs.SendWR{ID: uint64(i), Op: stack.OpSend, Flags: stack.SendSignaled,
			SG: []stack.SGE{A.mr.SGE(uint64(i)*100, 100)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, wc := range waitN(t, A.cq, 16) {
		if wc.Status != stack.WCSuccess {
			t.Fatalf("send %+v", wc)
		}
	}
	for i, wc := range waitN(t, B.cq, 16) {
		if wc.ID != uint64(100+i) || wc.Status != stack.WCSuccess || wc.ByteLen != 100 {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		if !bytes.Equal(B.buf[i*4096:i*4096+100], A.buf[i*100:i*100+100]) {
			t.Fatalf("message %d differs", i)
		}
	}
}
