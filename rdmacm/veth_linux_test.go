package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// vethEnds opens a device and its CM agent on each end of a veth pair.
func vethEnds(tb testing.TB) (a, b *stack.Device, ipB netip.Addr) {
	tb.Helper()
	netnstest.RequireAFXDP(tb)
	p := netnstest.NewPair(tb, netns.PairConfig{Prefix: "ucm", MTU: 1500})
	open := func(ns *netns.Namespace, dev string) *stack.Device {
		var d *stack.Device
		if err := ns.Do(func() (err error) {
			d, err = stack.Open(context.Background(), stack.Config{Interface: dev})
			return err
		}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { d.Close() })
		if _, err := rdmacm.NewAgent(d, rdmacm.Config{TimeWait: 10 * time.Millisecond}); err != nil {
			tb.Fatal(err)
		}
		return d
	}
	a, b = open(p.A, p.DevA), open(p.B, p.DevB)
	return a, b, p.AddrB[0].Addr()
}

// cycles connects and disconnects n times, a dialling and b accepting,
// and returns the summed REQ-to-ESTABLISHED times of the dialling side.
func cycles(tb testing.TB, a, b *stack.Device, ipB netip.Addr, port uint16, n int) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	aa, _ := rdmacm.AgentFor(a)
	ab, _ := rdmacm.AgentFor(b)
	pa, err := a.AllocPD()
	if err != nil {
		tb.Fatal(err)
	}
	defer pa.Dealloc()
	pb, err := b.AllocPD()
	if err != nil {
		tb.Fatal(err)
	}
	defer pb.Dealloc()
	cqa, _ := a.CreateCQ(64)
	cqb, _ := b.CreateCQ(64)
	defer cqa.Destroy()
	defer cqb.Destroy()
	ln, err := ab.Listen(netip.AddrPortFrom(netip.Addr{}, port))
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	init := stack.QPInit{Type: stack.RC, SendCQ: cqb, RecvCQ: cqb, MaxSendWR: 4, MaxRecvWR: 4}
	accepted := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			r, err := ln.Accept(ctx)
			if err != nil {
				accepted <- err
				return
			}
			q, err := pb.CreateQP(init)
			if err != nil {
				accepted <- err
				return
			}
			c, err := r.Accept(q, nil)
			if err != nil {
				accepted <- err
				return
			}
			<-c.Done()
			c.Close()
			if err := q.Destroy(); err != nil {
				accepted <- err
				return
			}
		}
		accepted <- nil
	}()
	var setup time.Duration
	ainit := init
	ainit.SendCQ, ainit.RecvCQ = cqa, cqa
	for i := 0; i < n; i++ {
		t0 := time.Now()
		c, err := aa.Dial(ctx, pa, netip.AddrPortFrom(ipB, port), ainit, nil, rdmacm.DialOptions{})
		if err != nil {
			tb.Fatalf("connection %d: %v", i, err)
		}
		setup += time.Since(t0)
		c.Close()
	}
	if err := <-accepted; err != nil {
		tb.Fatal(err)
	}
	return setup
}

// TestVethConnectCycles makes 1,000 connections on a veth pair, one
// after the other, and checks that none leaves a QP behind.
func TestVethConnectCycles(t *testing.T) {
	a, b, ipB := vethEnds(t)
	qa, qb := a.NumQPs(), b.NumQPs()
	cycles(t, a, b, ipB, 7600, 1000)
	if a.NumQPs() != qa || b.NumQPs() != qb {
		t.Fatalf("QPs after 1000 connections: %d and %d, %d and %d before", a.NumQPs(), b.NumQPs(), qa, qb)
	}
}

// BenchmarkVethConnect measures RDMA CM connection set-up (Dial: REQ,
// REP, RTU, both QPs to RTS) between two devices on a veth pair, and
// reports connections per second and microseconds per connection (the
// dialling side's REQ to ESTABLISHED; disconnection not counted).
func BenchmarkVethConnect(b *testing.B) {
	da, db, ipB := vethEnds(b)
	b.ReportAllocs()
	setup := cycles(b, da, db, ipB, 7601, b.N)
	b.ReportMetric(float64(b.N)/setup.Seconds(), "conns/s")
	b.ReportMetric(float64(setup.Microseconds())/float64(b.N), "µs/conn")
}
