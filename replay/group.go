package replay

import (
	"sort"
	"time"

	"github.com/uroce/uroce/bth"
)

// Group plays several sessions over one link, each on its own QP (the
// conversations of one capture, as perftest -R's exchange and test
// conversations): every frame received goes to the session whose QP it
// names. With Limit on each, they keep the recorded order between them.
type Group struct {
	Sessions []*Session
	out      [][]byte
	pkt      bth.Packet
}

// Poll implements Player: the frames of every session, and the earliest
// time one wants to be called.
func (g *Group) Poll(now time.Time) ([][]byte, time.Time) {
	g.out = g.out[:0]
	var wake time.Time
	for _, s := range g.Sessions {
		out, w := s.Poll(now)
		g.out = append(g.out, out...)
		if !s.Done() && !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
	}
	return g.out, wake
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
