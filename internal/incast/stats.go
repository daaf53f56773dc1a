package incast

import (
	"encoding/json"
	"fmt"
)

// Stats are the bottleneck's counters, from the qdiscs on the switch port
// toward the receiver (`tc -s qdisc show`). Counters count from the bed's
// creation; Delta turns two snapshots into the figures of the time between
// them.
type Stats struct {
	// Qdisc is the kind of the qdisc under the rate limiter, as tc
	// names it: bfifo (TailDrop and Step), red or fq_codel.
	Qdisc string
	// Bytes and Packets left the bottleneck toward the receiver, Ethernet
	// headers included.
	Bytes, Packets uint64
	// Drops are packets the bottleneck discarded: tail drops at Limit,
	// RED's early drops and CoDel's drops of packets that are not
	// ECN-capable.
	Drops uint64
	// Overlimits counts the times the rate limiter held a packet back
	// for want of tokens.
	Overlimits uint64
	// Requeues counts packets the device refused and the qdisc took back.
	Requeues uint64
	// Marks are packets set to CE: red's "marked", the larger of
	// fq_codel's "ce_mark" and "ecn_mark", or the Step marker's count.
	Marks uint64
	// Backlog and Qlen are the bytes and packets waiting at the snapshot.
	Backlog, Qlen uint64
	// Arrivals counts the packets whose arrival the bed's BPF program
	// saw (TailDrop and Step, where the kernel runs it; 0 otherwise),
	// and BacklogSum adds up the bytes each found in the queue: the
	// queue as the packets see it (MeanBacklog).
	Arrivals, BacklogSum uint64
}

// MeanBacklog returns the bytes an arriving packet found waiting at the
// bottleneck, on average, and false when no arrival was measured.
func (s Stats) MeanBacklog() (float64, bool) {
	if s.Arrivals == 0 {
		return 0, false
	}
	return float64(s.BacklogSum) / float64(s.Arrivals), true
}

// Delta returns the counters of s minus those of the earlier snapshot
// before, with the backlog and queue length of s. A counter that went
// backwards gives 0.
func (s Stats) Delta(before Stats) Stats {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return Stats{
		Qdisc:      s.Qdisc,
		Bytes:      sub(s.Bytes, before.Bytes),
		Packets:    sub(s.Packets, before.Packets),
		Drops:      sub(s.Drops, before.Drops),
		Overlimits: sub(s.Overlimits, before.Overlimits),
		Requeues:   sub(s.Requeues, before.Requeues),
		Marks:      sub(s.Marks, before.Marks),
		Backlog:    s.Backlog,
		Qlen:       s.Qlen,
		Arrivals:   sub(s.Arrivals, before.Arrivals),
		BacklogSum: sub(s.BacklogSum, before.BacklogSum),
	}
}

// tcQdisc is one qdisc in the output of `tc -s -j qdisc show` (iproute2's
// print_qdisc: the generic statistics and the qdisc's extended statistics
// share one object; its options are nested under "options" and not read
// here).
type tcQdisc struct {
	Kind       string `json:"kind"`
	Handle     string `json:"handle"`
	Parent     string `json:"parent"`
	Root       bool   `json:"root"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Requeues   uint64 `json:"requeues"`
	Backlog    uint64 `json:"backlog"`
	Qlen       uint64 `json:"qlen"`

	// red_print_xstats.
	Marked uint64 `json:"marked"`
	// fq_codel_print_xstats (ce_mark only when non-zero). ecn_mark counts
	// CoDel's marks, ce_mark the packets that waited longer than
	// ce_threshold; a packet CoDel marks whose wait also exceeds
	// ce_threshold counts in both (setting CE on a CE packet succeeds), so
	// with ce_threshold at or below target, as the bed configures it,
	// ce_mark counts every marked packet. The larger of the two is taken.
	ECNMark uint64 `json:"ecn_mark"`
	CEMark  uint64 `json:"ce_mark"`
}

// Handles of the bottleneck's qdiscs: the rate limiter at the root and the
// marking (or tail-drop) qdisc as its only child.
const (
	rootHandle  = "1:"
	childParent = "1:1"
	childHandle = "10:"
)

// parseStats reads the bottleneck's counters from the JSON that
// `tc -s -j qdisc show dev DEV` prints: the sent bytes and packets, drops,
// overlimits, requeues, backlog and queue length of the rate limiter (which
// include its child's: the parent counts a packet its child refused, and
// drops and backlog changes made later by the child propagate up), and the
// child's marks.
func parseStats(data []byte) (Stats, error) {
	var qs []tcQdisc
	if err := json.Unmarshal(data, &qs); err != nil {
		return Stats{}, fmt.Errorf("parse tc qdisc statistics: %w", err)
	}
	var root, child *tcQdisc
	for i := range qs {
		q := &qs[i]
		switch {
		case q.Root && q.Handle == rootHandle:
			root = q
		case q.Parent == childParent:
			child = q
		}
	}
	if root == nil || child == nil {
		return Stats{}, fmt.Errorf("parse tc qdisc statistics: no qdisc %s with a child under %s in %.200q", rootHandle, childParent, data)
	}
	return Stats{
		Qdisc:      child.Kind,
		Bytes:      root.Bytes,
		Packets:    root.Packets,
		Drops:      root.Drops,
		Overlimits: root.Overlimits,
		Requeues:   root.Requeues,
		Marks:      child.Marked + max(child.ECNMark, child.CEMark),
		Backlog:    root.Backlog,
		Qlen:       root.Qlen,
	}, nil
}
