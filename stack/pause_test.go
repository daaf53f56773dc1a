package stack

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/pfc"
)

// sendLog records when a link transmits each RoCE data packet (not
// ACKs), on the simulation's clock.
type sendLog struct {
	Link
	clock Clock
	pkt   bth.Packet
	at    []Time
}

func (l *sendLog) Transmit(frames [][]byte) int {
	n := l.Link.Transmit(frames)
	for _, f := range frames[:n] {
		if bth.Parse(f, &l.pkt) == nil && l.pkt.Info.Request {
			l.at = append(l.at, l.clock.Now())
		}
	}
	return n
}

// TestPFCHoldsTransmission: a PFC frame for the priority of A's QP
// (DSCP 26: priority 3) stops A's requests for its quanta, at the link
// speed; a frame with time 0 resumes at once; a pause of another priority
// holds nothing; MAC Control frames are counted as ethtool counts them,
// and malformed ones are ignored.
func TestPFCHoldsTransmission(t *testing.T) {
	clock := NewFakeClock(time.Second)
	pa, pb := pipe.New(pipe.Config{MTU: 4200, Slots: 512})
	la := &sendLog{Link: pa, clock: clock}
	open := func(l Link, mac [6]byte, addrs []netip.Addr) *Device {
		d, err := Open(context.Background(), Config{Link: l, MAC: mac, Addrs: addrs, Manual: true, Clock: clock,
			LinkSpeed: 1_000_000_000, Neighbors: StaticNeighbors{ipA: macA, ipB: macB, ip6A: macA, ip6B: macB}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	s := &simPair{clock: clock, a: open(la, macA, []netip.Addr{ipA, ip6A}), b: open(pb, macB, []netip.Addr{ipB, ip6B})}
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 100, 200, AccessRemoteWrite)
	wr := &SendWR{Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 1000)},
		Remote: RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}}
	wcs := make([]WC, 4)
	done := func() bool { return A.cq.Poll(wcs) > 0 }
	frame := func(f []byte) {
		if pb.Transmit([][]byte{f}) != 1 {
			t.Fatal("the pipe refused a frame")
		}
	}
	pfcFrame := func(enable uint8, prio int, quanta uint16) []byte {
		var q [8]uint16
		q[prio] = quanta
		return pfc.AppendPFC(nil, macB[:], enable, q)
	}

	// Paused for 1000 quanta of 512 ns at 1 Gbit/s.
	frame(pfcFrame(1<<3, 3, 1000))
	s.a.Step()
	t0 := clock.Now()
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	s.run(t, done)
	if len(la.at) != 1 || la.at[0] < t0+512*time.Microsecond {
		t.Fatalf("requests sent at %v, paused from %v for 512µs", la.at, t0)
	}

	// Paused for as long as a frame can say (33.6 ms), resumed by time 0.
	la.at = nil
	frame(pfcFrame(1<<3, 3, 0xffff))
	s.a.Step()
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		s.a.Step()
		s.b.Step()
		clock.Advance(time.Microsecond)
	}
	if len(la.at) != 0 {
		t.Fatalf("a request went at %v during the pause", la.at)
	}
	t1 := clock.Now()
	frame(pfcFrame(1<<3, 3, 0))
	s.run(t, done)
	if len(la.at) != 1 || la.at[0] > t1+10*time.Microsecond {
		t.Fatalf("after the resume at %v, requests sent at %v", t1, la.at)
	}

	// Another priority's pause, and a malformed frame, hold nothing.
	la.at = nil
	frame(pfcFrame(1<<5, 5, 0xffff))
	frame(pfcFrame(1<<3, 3, 0xffff)[:30])
	s.a.Step()
	t2 := clock.Now()
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	s.run(t, done)
	if len(la.at) != 1 || la.at[0] > t2+10*time.Microsecond {
		t.Fatalf("priority 5 paused from %v: priority 3's request sent at %v", t2, la.at)
	}

	c := s.a.PauseCounters()
	if c.MACControl != 5 || c.PrioPause[3] != 2 || c.PrioPause[5] != 1 || c.PrioPauseTransition[3] != 2 ||
		c.PrioPauseDuration[3] < 512 || c.Ignored != 1 {
		t.Errorf("pause counters %+v", c)
	}
}
