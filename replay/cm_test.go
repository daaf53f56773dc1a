package replay

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/rping"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// TestCMConnect: the CM player connects the played end to an rdma_cm
// listener of a uroce device at the far end of a pipe (REQ, REP, RTU as
// MADs on QP1, frame by frame), learns the accepted QP's number and
// first PSN, and releases the connection (DREQ, DREP), after which the
// listener's side sees it gone.
func TestCMConnect(t *testing.T) {
	pa, dev, macA, macB, ipA, ipB := cmPeer(t)
	l, err := rdmacm.Listen(dev, 7471)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	accepted := make(chan *rdmacm.Conn, 1)
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := l.Accept(ctx)
		if err != nil {
			errs <- err
			return
		}
		q, err := pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		if err != nil {
			errs <- err
			return
		}
		c, err := r.Accept(q, nil)
		if err != nil {
			errs <- err
			return
		}
		accepted <- c
	}()

	live := Live{Local: Endpoint{MAC: macA, IP: ipA, QPN: 0x123}, Peer: Endpoint{MAC: macB, IP: ipB}, LocalPSN: -1, PeerPSN: -1}
	c, err := NewCM(live, 7471, 0x4455, stack.MTU1024)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Drive(ctx, c, pa, nil); err != nil || c.Err() != nil {
		t.Fatalf("connect: %v, %v", err, c.Err())
	}
	var conn *rdmacm.Conn
	select {
	case conn = <-accepted:
	case err := <-errs:
		t.Fatal(err)
	}
	got := c.Live()
	a, _ := conn.QP().Query()
	// The passive side sends from the REQ's starting PSN and expects
	// ours from the REP's.
	if got.Peer.QPN != conn.QP().QPN() || got.PeerPSN != 0x4455 || uint32(a.SQPSN) != 0x4455 || a.DestQPN != 0x123 ||
		bth32(got.LocalPSN) != uint32(a.RQPSN) {
		t.Fatalf("live %+v; accepted qp %#x: dest %#x, rq psn %#x, sq psn %#x", got, conn.QP().QPN(), a.DestQPN, a.RQPSN, a.SQPSN)
	}
	c.Disconnect()
	if err := Drive(ctx, c, pa, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the listener's side did not see the disconnect")
	}
	conn.Close()
}

func bth32(v int64) uint32 { return uint32(v) }

// TestCMListenRping plays the listening end of rdma_rxe's recorded rping
// run (the server: it READs the client's advertised buffer and WRITEs
// it back, 3 times) at a live rping client of a uroce device: the CM
// player accepts the client's REQ, the session starts on the frames
// after the RTU, the client's pings all come back, and its answers agree
// with rxe's recorded client but for the ACK credits (uroce's client
// advertises its receives left; rxe advertises 31).
func TestCMListenRping(t *testing.T) {
	c := load(t, "../../shared/pcaps/rxe-6.1/rping.pcap")[0]
	if c.CMClient < 0 {
		t.Fatal("rping.pcap: no CM client")
	}
	me := 1 - c.CMClient
	pa, dev, macA, macB, ipA, ipB := cmPeer(t)
	if c.Ends[me].IP != ipA {
		t.Fatalf("rping.pcap: the server is %v, want %v", c.Ends[me], ipA)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	client := make(chan error, 1)
	go func() {
		client <- rping.Run(ctx, dev, rping.Config{Addr: ipA, Port: 7174, Count: 3, Size: 64, Verbose: true,
			ConnectWait: 5 * time.Second, Stdout: &out})
	}()
	live := Live{Local: Endpoint{MAC: macA, IP: ipA, QPN: c.Ends[me].QPN}, Peer: Endpoint{MAC: macB, IP: ipB}, LocalPSN: -1, PeerPSN: -1}
	l := ListenCM(live, 7174, c.Recorded(1-me).PSN, 10*time.Second)
	var s *Session
	p := Then(l, func() (Player, error) {
		var err error
		// The live client's timers are its own: a SEND it probes again
		// because this end's step pace was slow on a loaded machine is
		// no answer (counted in Resent).
		s, err = NewSession(c, me, l.Live(), Options{Timeout: 2 * time.Second, Tolerate: map[string]bool{"resent": true}})
		return s, err
	})
	if err := Drive(ctx, p, pa, nil); err != nil || p.Err() != nil {
		t.Fatalf("replay: %v, %v", err, p.Err())
	}
	rep := s.Report()
	var text strings.Builder
	rep.WriteText(&text)
	if len(rep.Answers) != 18 {
		t.Errorf("want 18 answers:\n%s", text.String())
	}
	for _, a := range rep.Answers {
		for _, d := range a.Diffs {
			if d.Field != "syndrome" || d.Recorded != "credits=31" || !strings.HasPrefix(d.Live, "credits=") {
				t.Errorf("frame %d: %s differs: %s -> %s", a.Frame, d.Field, d.Recorded, d.Live)
			}
		}
		if a.Missing {
			t.Errorf("frame %d: no live answer", a.Frame)
		}
	}
	if t.Failed() {
		t.Log(text.String())
	}
	got := l.Live()
	if got.Peer.QPN == 0 || got.PeerPSN != int64(c.Recorded(1-me).PSN) {
		t.Errorf("live setup %+v", got)
	}
	// The client disconnects at the end of its run (rping's does), and
	// the CM player answers its DREQ.
	if err := Drive(ctx, l.Closing(), pa, nil); err != nil || !l.Closed() {
		t.Fatalf("waiting for the client's DREQ: %v, closed %v", err, l.Closed())
	}
	select {
	case err := <-client:
		if err != nil {
			t.Fatalf("the rping client: %v\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatal("the rping client did not end")
	}
	if n := strings.Count(out.String(), "ping data: rdma-ping-"); n != 3 {
		t.Errorf("the client printed %d pings, want 3:\n%s", n, out.String())
	}
}

// TestCMListenTimeout: no REQ within the wait is an error that says
// what to start; a REQ to another port is refused by the CM (no
// listener), not taken.
func TestCMListenTimeout(t *testing.T) {
	pa, dev, macA, macB, ipA, ipB := cmPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(4)
		_, err := rdmacm.Dial(ctx, dev, pd, netip.AddrPortFrom(ipA, 7175), stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: 1}, nil)
		dialed <- err
	}()
	l := ListenCM(Live{Local: Endpoint{MAC: macA, IP: ipA, QPN: 0x11}, Peer: Endpoint{MAC: macB, IP: ipB}}, 7174, 0x100, 300*time.Millisecond)
	p := Then(l, func() (Player, error) { t.Fatal("next called without a connection"); return nil, nil })
	if err := Drive(ctx, p, pa, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "no RDMA CM connection request from 192.0.2.2 to port 7174") {
		t.Errorf("want the listen timeout, got %v", err)
	}
	if err := <-dialed; err == nil || !strings.Contains(err.Error(), "invalid_service_id") {
		t.Errorf("a REQ to another port: %v", err)
	}
}

// TestCMNoListener: a port nobody listens on is refused, and said so.
func TestCMNoListener(t *testing.T) {
	pa, dev, macA, macB, ipA, ipB := cmPeer(t)
	if _, err := rdmacm.AgentFor(dev); err != nil { // the CM agent answers, rejecting
		t.Fatal(err)
	}
	c, err := NewCM(Live{Local: Endpoint{MAC: macA, IP: ipA, QPN: 0x123}, Peer: Endpoint{MAC: macB, IP: ipB}, LocalPSN: 7},
		9999, 0, stack.MTU1024)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Drive(ctx, c, pa, nil); err != nil || c.Err() == nil {
		t.Fatalf("connect to a port nobody listens on: %v, %v", err, c.Err())
	}
}

// cmPeer is a uroce device (B) at the far end of a pipe from the played
// end (A, whose link is returned).
func cmPeer(t *testing.T) (stack.Link, *stack.Device, [6]byte, [6]byte, netip.Addr, netip.Addr) {
	pa, pb := pipe.New(pipe.Config{MTU: 1500})
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	dev, err := stack.Open(context.Background(), stack.Config{Link: pb, MAC: macB, Addrs: []netip.Addr{ipB},
		Neighbors: stack.StaticNeighbors{ipA: macA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return pa, dev, macA, macB, ipA, ipB
}
