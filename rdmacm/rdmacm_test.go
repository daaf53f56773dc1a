package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/frametest"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ipA  = netip.MustParseAddr("192.0.2.2")
	ipB  = netip.MustParseAddr("192.0.2.1")
)

const port = 7174

// testCfg makes retries quick: 16.8 ms response timeouts.
var testCfg = Config{ResponseTimeout: 12, MaxRetries: 15, TimeWait: 20 * time.Millisecond}

// side is a device with its agent, a PD, a CQ and a registered buffer.
type side struct {
	dev *stack.Device
	a   *Agent
	pd  *stack.PD
	cq  *stack.CQ
	mr  *stack.MR
	buf []byte
}

// openPair opens two devices joined by an in-memory pipe (each side
// losing drop of the frames it sends), with engines and agents running.
func openPair(t testing.TB, drop float64) (A, B *side) {
	t.Helper()
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 512})
	var la, lb stack.Link = pa, pb
	if drop > 0 {
		la = fault.Wrap(pa, fault.Config{Seed: 1, Drop: drop})
		lb = fault.Wrap(pb, fault.Config{Seed: 2, Drop: drop})
	}
	return openLinks(t, la, lb)
}

// openLinks opens two devices on the two links with engines and agents
// running.
func openLinks(t testing.TB, la, lb stack.Link) (A, B *side) {
	t.Helper()
	nb := stack.StaticNeighbors{ipA: macA, ipB: macB}
	mk := func(l stack.Link, mac [6]byte, ip netip.Addr) *side {
		d, err := stack.Open(context.Background(), stack.Config{Link: l, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: nb})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAgent(d, testCfg)
		if err != nil {
			t.Fatal(err)
		}
		s := &side{dev: d, a: a, buf: make([]byte, 1<<16)}
		if s.pd, err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.cq, err = d.CreateCQ(256); err != nil {
			t.Fatal(err)
		}
		if s.mr, err = s.pd.RegisterMR(s.buf, stack.AccessLocalWrite|stack.AccessRemoteWrite|stack.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		return s
	}
	A, B = mk(la, macA, ipA), mk(lb, macB, ipB)
	t.Cleanup(func() {
		A.dev.Close()
		B.dev.Close()
		<-A.a.done
		<-B.a.done
	})
	return A, B
}

func (s *side) init() stack.QPInit {
	return stack.QPInit{Type: stack.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 16, MaxRecvWR: 16}
}

func (s *side) wait(t testing.TB, n int) []stack.WC {
	t.Helper()
	var out []stack.WC
	wcs := make([]stack.WC, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(out) < n {
		if err := s.cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for %d completions, got %v: %v", n, out, err)
		}
		k := s.cq.Poll(wcs)
		out = append(out, wcs[:k]...)
	}
	return out
}

// serve accepts one request on l with a QP of B and answers priv.
func serve(t testing.TB, l *Listener, B *side, priv []byte) (*Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	q, err := B.pd.CreateQP(B.init())
	if err != nil {
		return nil, err
	}
	c, err := r.Accept(q, priv)
	if err != nil {
		q.Destroy()
	}
	return c, err
}

// connectPair dials from A to B's listener and returns both ends.
func connectPair(t testing.TB, A, B *side, l *Listener, dialData, acceptData []byte) (ca, cb *Conn) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		berr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		cb, berr = serve(t, l, B, acceptData)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := Dial(ctx, A.dev, A.pd, netip.AddrPortFrom(ipB, l.Port()), A.init(), dialData)
	wg.Wait()
	if err != nil || berr != nil {
		t.Fatalf("dial: %v; accept: %v", err, berr)
	}
	if cb.NeverEstablished() {
		t.Fatal("an accepted connection whose RTU came reports NeverEstablished")
	}
	return ca, cb
}

func TestConnectSendWriteDisconnect(t *testing.T) {
	A, B := openPair(t, 0)
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ca, cb := connectPair(t, A, B, l, []byte("from a"), []byte("from b"))
	if !bytes.HasPrefix(cb.PrivateData, []byte("from a")) || len(cb.PrivateData) != MaxDialData ||
		!bytes.HasPrefix(ca.PrivateData, []byte("from b")) {
		t.Fatalf("private data: %q / %q", cb.PrivateData, ca.PrivateData)
	}
	if cb.Remote.Addr() != ipA || cb.Remote.Port() != ca.Local.Port() || cb.Local != netip.AddrPortFrom(ipB, port) {
		t.Fatalf("addresses: a %v→%v, b %v←%v", ca.Local, ca.Remote, cb.Local, cb.Remote)
	}
	qa, _ := ca.QP().Query()
	qb, _ := cb.QP().Query()
	if qa.State != stack.StateRTS || qb.State != stack.StateRTS || qa.DestQPN != cb.QP().QPN() ||
		qb.DestQPN != ca.QP().QPN() || qa.SQPSN != qb.RQPSN || qb.SQPSN != qa.RQPSN {
		t.Fatalf("qp attrs a %+v b %+v", qa, qb)
	}
	// A SEND and an RDMA WRITE through the connected QPs.
	copy(A.buf, "hello over rdma cm")
	if err := cb.QP().PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{B.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := ca.QP().PostSend(&stack.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{A.mr.SGE(0, 18)}}); err != nil {
		t.Fatal(err)
	}
	if w := A.wait(t, 1); w[0].Status != stack.WCSuccess {
		t.Fatalf("send %+v", w[0])
	}
	if w := B.wait(t, 1); w[0].Status != stack.WCSuccess || !bytes.Equal(B.buf[:18], A.buf[:18]) {
		t.Fatalf("recv %+v %q", w[0], B.buf[:18])
	}
	copy(A.buf[4096:], "written")
	if err := ca.QP().PostSend(&stack.SendWR{ID: 3, Op: stack.OpWrite, Flags: stack.SendSignaled,
		SG: []stack.SGE{A.mr.SGE(4096, 7)}, Remote: stack.RemoteAddr{Addr: B.mr.Addr() + 8192, RKey: B.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	if w := A.wait(t, 1); w[0].Status != stack.WCSuccess || string(B.buf[8192:8199]) != "written" {
		t.Fatalf("write %+v %q", w[0], B.buf[8192:8199])
	}
	// The passive side disconnects: the active side hears of it.
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ca.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect notification")
	}
	if st, _ := ca.QP().Query(); st.State != stack.StateErr {
		t.Errorf("active qp in %v after the peer's disconnect", st.State)
	}
	ca.Close()
	cb.QP().Destroy()
	// And once more, disconnecting from the active side.
	ca, cb = connectPair(t, A, B, l, nil, nil)
	ca.Close()
	select {
	case <-cb.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no disconnect notification")
	}
	cb.Close()
	cb.QP().Destroy()
}

// TestCloseSendsDREP: Close of a connection the peer disconnected
// returns only once the DREP answering its DREQ has left QP1, so that a
// program closing its device right after (as rping's server does) does
// not leave the peer's DREQ unanswered.
func TestCloseSendsDREP(t *testing.T) {
	A, B := openPair(t, 0)
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < 50; i++ {
		ca, cb := connectPair(t, A, B, l, nil, nil)
		done := make(chan struct{})
		go func() { ca.Close(); close(done) }()
		<-cb.Done()
		cb.Close()
		if n := B.a.pendingSends(); n != 0 {
			t.Fatalf("cycle %d: %d MADs still queued on QP1 after Close", i, n)
		}
		<-done
		cb.QP().Destroy()
	}
	if c := A.a.Counters(); c.Resent != 0 {
		t.Errorf("the active side resent %d MADs", c.Resent)
	}
}

// onlyMAD picks the frames carrying a CM MAD of one attribute (for
// fault.Config.Only).
func onlyMAD(attr mad.AttrID) func([]byte) bool {
	return func(f []byte) bool {
		a, ok := frametest.MADAttr(f)
		return ok && mad.AttrID(a) == attr
	}
}

// A DREQ that comes before the RTU (lost here) tells the passive side
// that the active one is established: Accept succeeds, and the
// connection is already disconnected, as rdma_accept returns and
// RDMA_CM_EVENT_DISCONNECTED follows. Before, Accept failed.
func TestDREQBeforeRTU(t *testing.T) {
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 512})
	da := fault.Wrap(pa, fault.Config{Drop: 1, Only: onlyMAD(mad.AttrRTU)})
	A, B := openLinks(t, da, pb)
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, A.dev, A.pd, netip.AddrPortFrom(ipB, l.Port()), A.init(), nil)
		if err == nil {
			err = c.Close() // at once: the DREQ follows the lost RTU
		}
		dialed <- err
	}()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q, err := B.pd.CreateQP(B.init())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Destroy()
	c, err := r.Accept(q, nil)
	if err != nil {
		t.Fatalf("accept, the RTU lost and a DREQ come: %v", err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the accepted connection did not end on the DREQ")
	}
	if !c.NeverEstablished() {
		t.Error("NeverEstablished false for a connection whose RTU never came")
	}
	c.Close()
	if err := <-dialed; err != nil {
		t.Fatalf("dial and close: %v", err)
	}
	if da.Stats().Dropped == 0 {
		t.Fatal("no RTU was dropped")
	}
}

func TestNoListener(t *testing.T) {
	A, _ := openPair(t, 0)
	n := A.dev.NumQPs()
	_, err := Dial(context.Background(), A.dev, A.pd, netip.AddrPortFrom(ipB, 9999), A.init(), nil)
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID || !errors.Is(err, ErrRejected) ||
		!strings.Contains(err.Error(), "invalid_service_id") {
		t.Fatalf("dial: %v", err)
	}
	if A.dev.NumQPs() != n {
		t.Errorf("%d qps after a rejected dial, %d before", A.dev.NumQPs(), n)
	}
}

func TestConsumerReject(t *testing.T) {
	A, B := openPair(t, 0)
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		r, err := l.Accept(context.Background())
		if err != nil {
			return
		}
		if !bytes.HasPrefix(r.PrivateData, []byte("may I?")) {
			r.Reject([]byte("bad data"))
			return
		}
		r.Reject([]byte("no, thanks"))
	}()
	_, err = Dial(context.Background(), A.dev, A.pd, netip.AddrPortFrom(ipB, port), A.init(), []byte("may I?"))
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejConsumer || !bytes.HasPrefix(rej.PrivateData, []byte("no, thanks")) {
		t.Fatalf("dial: %v", err)
	}
}

func TestDialContext(t *testing.T) {
	A, _ := openPair(t, 1) // nothing gets through
	n := A.dev.NumQPs()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, A.dev, A.pd, netip.AddrPortFrom(ipB, port), A.init(), nil)
	if !errors.Is(err, context.DeadlineExceeded) || A.dev.NumQPs() != n {
		t.Fatalf("dial: %v; %d qps, %d before", err, A.dev.NumQPs(), n)
	}
}

// TestLossyConnect: 20% of the frames lost in each direction; every
// connection comes up exactly once and goes down.
func TestLossyConnect(t *testing.T) {
	A, B := openPair(t, 0.2)
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := 0
	for i := 0; i < 20; i++ {
		ca, cb := connectPair(t, A, B, l, []byte{byte(i)}, nil)
		accepted++
		if cb.PrivateData[0] != byte(i) {
			t.Fatalf("connection %d got the private data of %d", i, cb.PrivateData[0])
		}
		if i%2 == 0 {
			ca.Close()
			<-cb.Done()
			cb.Close()
		} else {
			cb.Close()
			<-ca.Done()
			ca.Close()
		}
		cb.QP().Destroy()
	}
	// No request is left over: each REQ, however often resent, made one.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if r, err := l.Accept(ctx); err == nil {
		t.Fatalf("a duplicate connection request: %+v", r)
	}
	ca, cb := A.a.Counters(), B.a.Counters()
	t.Logf("active %+v", ca)
	t.Logf("passive %+v", cb)
	if ca.Resent+cb.Resent == 0 {
		t.Error("no MAD was resent: was anything lost?")
	}
}

// TestManyCycles: 1,000 connections set up and torn down leave no QP
// behind, and the agents' goroutines end with their devices.
func TestManyCycles(t *testing.T) {
	n0 := runtime.NumGoroutine()
	func() {
		A, B := openPair(t, 0)
		l, err := Listen(B.dev, port)
		if err != nil {
			t.Fatal(err)
		}
		qa, qb := A.dev.NumQPs(), B.dev.NumQPs()
		for i := 0; i < 1000; i++ {
			ca, cb := connectPair(t, A, B, l, nil, nil)
			ca.Close()
			<-cb.Done()
			cb.Close()
			cb.QP().Destroy()
		}
		if A.dev.NumQPs() != qa || B.dev.NumQPs() != qb {
			t.Errorf("qps: a %d (%d before), b %d (%d before)", A.dev.NumQPs(), qa, B.dev.NumQPs(), qb)
		}
		time.Sleep(3 * testCfg.TimeWait)
		A.a.mu.Lock()
		na := A.a.m.Len()
		A.a.mu.Unlock()
		if na > 0 {
			// TIMEWAIT ends only when the loop ticks; give it a moment.
			time.Sleep(100 * time.Millisecond)
		}
		l.Close()
		A.dev.Close()
		B.dev.Close()
		<-A.a.done
		<-B.a.done
	}()
	for i := 0; i < 100 && runtime.NumGoroutine() > n0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > n0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before:\n%s", n, n0, buf[:runtime.Stack(buf, true)])
	}
}

// BenchmarkConnect reports connection setups (REQ to ESTABLISHED on
// both sides) per second and the time each takes, teardown excluded.
func BenchmarkConnect(b *testing.B) {
	A, B := openPair(b, 0)
	l, err := Listen(B.dev, port)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var setup time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		ca, cb := connectPair(b, A, B, l, nil, nil)
		setup += time.Since(t0)
		ca.Close()
		<-cb.Done()
		cb.Close()
		cb.QP().Destroy()
	}
	b.ReportMetric(float64(b.N)/setup.Seconds(), "conns/s")
	b.ReportMetric(float64(setup.Microseconds())/float64(b.N), "µs/conn")
}

// TestDialOwnQP connects a QP the caller created, with a receive posted
// in INIT, as perftest's exchange QP: the first dial meets no listener
// and is rejected, the QP stays usable for the second; the passive side
// sends as soon as it accepted; Close leaves the QP to the caller.
func TestDialOwnQP(t *testing.T) {
	A, B := openPair(t, 0)
	q, err := A.pd.CreateQP(A.init())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Destroy()
	if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	if err := q.PostRecv(&stack.RecvWR{ID: 7, SG: []stack.SGE{A.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	to := netip.AddrPortFrom(ipB, port)
	var rej *RejectError
	if _, err := A.a.Dial(context.Background(), A.pd, to, stack.QPInit{}, nil, DialOptions{QP: q}); !errors.As(err, &rej) {
		t.Fatalf("dial without a listener: %v", err)
	}
	if st, _ := q.Query(); st.State != stack.StateInit {
		t.Fatalf("QP in %v after a rejected dial", st.State)
	}
	l, err := Listen(B.dev, port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		c   *Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := serve(t, l, B, nil)
		if err == nil {
			copy(B.buf, "hello")
			err = c.QP().PostSend(&stack.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled,
				SG: []stack.SGE{B.mr.SGE(0, 5)}})
		}
		got <- result{c, err}
	}()
	ca, err := A.a.Dial(context.Background(), A.pd, to, stack.QPInit{}, nil, DialOptions{QP: q})
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ca.QP() != q {
		t.Fatal("the connection has another QP")
	}
	wcs := A.wait(t, 1)
	if wcs[0].Status != stack.WCSuccess || wcs[0].ID != 7 || string(A.buf[:5]) != "hello" {
		t.Fatalf("receive: %+v %q", wcs[0], A.buf[:5])
	}
	n := A.dev.NumQPs()
	ca.Close()
	<-r.c.Done()
	r.c.Close()
	r.c.QP().Destroy()
	if A.dev.NumQPs() != n {
		t.Errorf("Close destroyed the caller's QP")
	}
}
