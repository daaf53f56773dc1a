package stack

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uroce/uroce/link/pipe"
)

// postPoller posts wr on q when it finds pending set, as the daemon's
// ring poller posts what a client put in its rings.
type postPoller struct {
	q       *QP
	wr      SendWR
	pending atomic.Bool
	armed   atomic.Bool
	removed atomic.Bool
	polls   atomic.Int64
	late    atomic.Int64 // calls after RemovePoller returned
	err     atomic.Value
}

func (p *postPoller) Poll() bool {
	if p.removed.Load() {
		p.late.Add(1)
	}
	p.polls.Add(1)
	if !p.pending.Swap(false) {
		return false
	}
	if err := p.q.PostSend(&p.wr); err != nil {
		p.err.Store(err)
	}
	return true
}

func (p *postPoller) Arm() bool {
	if p.removed.Load() {
		p.late.Add(1)
	}
	p.armed.Store(true)
	return p.pending.Load()
}

func (p *postPoller) Disarm() { p.armed.Store(false) }

// TestPollerPostsInItsStep: what a poller posts leaves in the same step
// of the engine that polled it.
func TestPollerPostsInItsStep(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	p := &postPoller{q: qa, wr: SendWR{ID: 7, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 64)},
		Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}}
	s.a.AddPoller(p)
	s.a.Step()
	if p.polls.Load() != 1 || qa.Counters().SentPkts != 0 {
		t.Fatalf("idle poller: %d polls, %d sent", p.polls.Load(), qa.Counters().SentPkts)
	}
	p.pending.Store(true)
	s.a.Step()
	if err := p.err.Load(); err != nil {
		t.Fatal(err)
	}
	if n := qa.Counters().SentPkts; n != 1 {
		t.Fatalf("the polled write was not sent in the polling step: %d sent", n)
	}
	if wc := pollN(t, s, A.cq, 1); wc[0].ID != 7 || wc[0].Status != WCSuccess {
		t.Fatalf("completion %+v", wc[0])
	}
	s.a.RemovePoller(p)
	n := p.polls.Load()
	s.a.Step()
	if p.polls.Load() != n {
		t.Fatal("a removed poller was polled")
	}
}

// TestPollerSleepAndWake: an engine goroutine arms its pollers before it
// sleeps, Device.Wake wakes it to poll, and after RemovePoller no engine
// calls the poller again.
func TestPollerSleepAndWake(t *testing.T) {
	pa, pb := pipe.New(pipe.Config{MTU: 9000, Slots: 512})
	nb := StaticNeighbors{ipA: macA, ipB: macB}
	da, err := Open(context.Background(), Config{Link: pa, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb, IdleSpin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db, err := Open(context.Background(), Config{Link: pb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, IdleSpin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	A, B := newSide(t, da, 1<<16, 64), newSide(t, db, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	p := &postPoller{q: qa, wr: SendWR{ID: 9, Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 64)},
		Remote: RemoteAddr{B.mr.Addr(), B.mr.RKey()}}}
	da.AddPoller(p)
	wait := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	for round := 0; round < 3; round++ {
		wait("the engine to arm its pollers and sleep", func() bool { return p.armed.Load() })
		polls := p.polls.Load()
		p.pending.Store(true)
		da.Wake()
		wait("the woken engine to poll", func() bool { return p.polls.Load() > polls && !p.pending.Load() })
		var wc [1]WC
		wait("the completion", func() bool { return A.cq.Poll(wc[:]) == 1 })
		if wc[0].ID != 9 || wc[0].Status != WCSuccess {
			t.Fatalf("completion %+v", wc[0])
		}
	}
	if err := p.err.Load(); err != nil {
		t.Fatal(err)
	}
	da.RemovePoller(p)
	p.removed.Store(true)
	da.Wake()
	time.Sleep(20 * time.Millisecond)
	if n := p.late.Load(); n != 0 {
		t.Fatalf("%d calls after RemovePoller", n)
	}
}
