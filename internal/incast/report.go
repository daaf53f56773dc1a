package incast

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Jain returns Jain's fairness index of the allocation x,
//
//	J = (Σ xᵢ)² / (n · Σ xᵢ²)
//
// which is 1 when every xᵢ is equal, k/n when k of them share equally and
// the rest get nothing (1/n for a single hog), and never below 1/n for
// non-negative x. It returns 0 for an empty x or one that sums to zero,
// where fairness means nothing.
func Jain(x []float64) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	if len(x) == 0 || sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(x)) * sq)
}

// Flow is what the receiver got from one sender.
type Flow struct {
	// Name identifies the flow in the table, e.g. the sender's name "s1".
	Name string
	// Bytes are the payload bytes delivered (goodput, not wire bytes).
	Bytes uint64
	// Packets are the packets (or messages) delivered.
	Packets uint64
	// CE are the delivered packets that arrived marked CE.
	CE uint64
}

// Report is one incast run: per-flow goodput, their aggregate and
// fairness, and what the bottleneck did meanwhile.
type Report struct {
	// Title heads the table, e.g. "kernel UDP, 2 senders".
	Title string
	// Bottleneck is the rate of the bottleneck in bit/s.
	Bottleneck uint64
	// Marking is the bottleneck's discipline.
	Marking Kind
	// Duration is the time the flows were measured over.
	Duration time.Duration
	Flows    []Flow
	// Queue is the change in the bottleneck's counters over the run
	// (Stats.Delta), and QueueTime the time between its two snapshots
	// when it differs from Duration (0: Duration).
	Queue     Stats
	QueueTime time.Duration
}

// Goodput returns the goodput of flow i in bit/s.
func (r *Report) Goodput(i int) float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Flows[i].Bytes) * 8 / r.Duration.Seconds()
}

// Goodputs returns the goodput of every flow in bit/s.
func (r *Report) Goodputs() []float64 {
	g := make([]float64, len(r.Flows))
	for i := range r.Flows {
		g[i] = r.Goodput(i)
	}
	return g
}

// Aggregate returns the sum of the flows' goodputs in bit/s.
func (r *Report) Aggregate() float64 {
	var sum float64
	for i := range r.Flows {
		sum += r.Goodput(i)
	}
	return sum
}

// Utilization is the aggregate goodput over the bottleneck's rate.
func (r *Report) Utilization() float64 {
	if r.Bottleneck == 0 {
		return 0
	}
	return r.Aggregate() / float64(r.Bottleneck)
}

// Carried returns the rate the bottleneck sent at over QueueTime (or
// Duration), in bit/s of whole frames (Queue.Bytes). Well below
// Bottleneck while the queue was full, it says the machine could not keep
// up with the configured rate, and the run measured the CPU rather than
// the link.
func (r *Report) Carried() float64 {
	d := r.Duration
	if r.QueueTime > 0 {
		d = r.QueueTime
	}
	if d <= 0 {
		return 0
	}
	return float64(r.Queue.Bytes) * 8 / d.Seconds()
}

// Fairness returns Jain's index of the flows' goodputs.
func (r *Report) Fairness() float64 { return Jain(r.Goodputs()) }

// WriteText prints the report as a table: a line per flow with its
// goodput, share of the aggregate, packets and CE-marked packets, then the
// aggregate, the fairness index and the bottleneck's counters.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	title := r.Title
	if title == "" {
		title = "incast"
	}
	fmt.Fprintf(&b, "%s: %d flows into %s (%v), %v\n", title, len(r.Flows), formatRate(float64(r.Bottleneck)), r.Marking, r.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "  %-8s %14s %7s %12s %12s %7s\n", "flow", "goodput", "share", "packets", "CE-marked", "CE")
	agg := r.Aggregate()
	var pkts, ce uint64
	for i, f := range r.Flows {
		g := r.Goodput(i)
		fmt.Fprintf(&b, "  %-8s %14s %6.1f%% %12d %12d %6.1f%%\n", f.Name, formatRate(g), percent(g, agg), f.Packets, f.CE,
			percent(float64(f.CE), float64(f.Packets)))
		pkts += f.Packets
		ce += f.CE
	}
	fmt.Fprintf(&b, "  %-8s %14s %6.1f%% %12d %12d %6.1f%%\n", "total", formatRate(agg), 100*r.Utilization(), pkts, ce,
		percent(float64(ce), float64(pkts)))
	fmt.Fprintf(&b, "  Jain's fairness index %.3f (goodput: payload bytes; total share: of the bottleneck's rate)\n", r.Fairness())
	q := &r.Queue
	fmt.Fprintf(&b, "  bottleneck %s: carried %s (%.1f%% of its rate), sent %d packets, dropped %d, CE-marked %d, overlimits %d, backlog %d bytes at the end\n",
		q.Qdisc, formatRate(r.Carried()), percent(r.Carried(), float64(r.Bottleneck)), q.Packets, q.Drops, q.Marks, q.Overlimits, q.Backlog)
	if mean, ok := q.MeanBacklog(); ok && r.Bottleneck > 0 {
		wait := Config{Bottleneck: r.Bottleneck}.DrainTime(int(mean))
		fmt.Fprintf(&b, "  queue: %d arrivals found %.0f bytes waiting on average, %v at the bottleneck's rate\n",
			q.Arrivals, mean, wait.Round(time.Microsecond))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func percent(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * part / whole
}

// formatRate prints a rate in bit/s with a unit that keeps 3 or 4
// significant digits.
func formatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.3f Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mbit/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.2f kbit/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bps)
}
