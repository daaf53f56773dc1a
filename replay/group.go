package replay

import (
	"sort"
	"time"

	"github.com/uroce/uroce/bth"
)

// Group plays several sessions over one link, each on its own QP (the
// conversations of one capture, as perftest -R's exchange and test
// conversations): every frame received goes to the session whose QP it
// names. With Limit on each, they keep the recorded order between them
// stage by stage; within a stage, unless the pace is fast, a session
// sends a packet only once every other one has sent what was recorded
// before it and had the answers recorded before it (or given them up),
// so that the peer sees the conversations interleaved as recorded
// (ibv_srq_pingpong's server posts its last SENDs by the order of its
// completions over both QPs).
type Group struct {
	Sessions []*Session
	out      [][]byte
	pkt      bth.Packet
}

// Poll implements Player: the frames of every session, and the earliest
// time one wants to be called. A session's packet may be the turn of
// another that comes later in Sessions: the sessions are polled again as
// long as one of them sends.
func (g *Group) Poll(now time.Time) ([][]byte, time.Time) {
	g.out = g.out[:0]
	var wake time.Time
	for sent := true; sent; {
		sent = false
		for _, s := range g.Sessions {
			s.order = g.order(s)
			out, w := s.Poll(now)
			sent = sent || len(out) > 0
			g.out = append(g.out, out...)
			if !s.Done() && !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
				wake = w
			}
		}
	}
	return g.out, wake
}

// order returns the earliest frame the sessions other than s still wait
// for (0: none).
func (g *Group) order(s *Session) int {
	o := 0
	for _, t := range g.Sessions {
		if f := t.frontier(); t != s && f > 0 && (o == 0 || f < o) {
			o = f
		}
	}
	return o
}

// Input implements Player.
func (g *Group) Input(frame []byte, now time.Time) bool {
	if bth.Parse(frame, &g.pkt) != nil {
		return false
	}
	qpn := g.pkt.BTH().DestQP()
	for _, s := range g.Sessions {
		if s.live.Local.QPN == qpn {
			return s.Input(frame, now)
		}
	}
	return false
}

// Done implements Player: every session is done (or at its limit).
func (g *Group) Done() bool {
	for _, s := range g.Sessions {
		if !s.Done() {
			return false
		}
	}
	return true
}

// Stages returns the frames at which a replay of several conversations
// of one capture moves on: each one's RDMA CM request (CMFrame), its
// first packet and the frame after its last, in order. Between two, its
// sessions run as a Group, each with the later one as Limit; a
// conversation's connection is made at its request's frame, its session
// starts at its first packet (with what the others learnt as its
// Live.Regions).
func Stages(convs []*Conversation) []int {
	seen := map[int]bool{}
	var out []int
	add := func(f int) {
		if f > 0 && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, c := range convs {
		add(c.CMFrame)
		add(c.Packets[0].Frame)
		add(c.Packets[len(c.Packets)-1].Frame + 1)
	}
	sort.Ints(out)
	return out
}
