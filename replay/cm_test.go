package replay

import (
	"context"
	"net/netip"
	"testing"
	"time"

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
