package incast

import (
	"errors"
	"fmt"
	"time"
)

// ErrUnsupported reports that the kernel (or the installed iproute2) lacks
// something the bed needs: a queueing discipline such as sch_red,
// sch_fq_codel or sch_netem, or the BPF features of the Step marker. Tests
// skip on it.
var ErrUnsupported = errors.New("not supported by this kernel")

// Kind is how the bottleneck signals congestion.
type Kind int

// The bottleneck's marking disciplines. Each sits under the same rate
// limiter (tbf at Config.Bottleneck) and holds at most Config.Limit bytes.
const (
	// TailDrop marks nothing: a byte FIFO (bfifo) that drops arrivals once
	// Limit bytes wait.
	TailDrop Kind = iota
	// RED is `red ... ecn`: ECN-capable packets are marked CE (others
	// dropped) with a probability rising from 0 at Min to 1 at Max bytes
	// of average backlog, and always above Max. Needs sch_red.
	RED
	// FQCoDel is `fq_codel ecn ce_threshold`: per-flow queues; a packet
	// that waited longer than CEThreshold is marked CE, and CoDel marks
	// (or, for packets that are not ECN-capable, drops) when the sojourn
	// time stays above Target for Interval. Needs sch_fq_codel.
	FQCoDel
	// Step marks CE on every ECN-capable packet that arrives while the
	// queue holds Min bytes or more (DCTCP-style step marking), with a
	// tc BPF program in front of a tail-drop FIFO; packets that are not
	// ECN-capable are only tail-dropped. It works on kernels without
	// sch_red or sch_fq_codel, but needs tcx (Linux 6.6), the kernel's
	// BTF and root; see the package documentation.
	Step
)

func (k Kind) String() string {
	switch k {
	case TailDrop:
		return "taildrop"
	case RED:
		return "red"
	case FQCoDel:
		return "fq_codel"
	case Step:
		return "step"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind returns the Kind whose String is s.
func ParseKind(s string) (Kind, error) {
	for k := TailDrop; k <= Step; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("marking %q: want taildrop, red, fq_codel or step", s)
}

// Marking configures the bottleneck's congestion signal. Zero fields take
// defaults derived from the bottleneck's bandwidth-delay product (see
// Config.BDP and the package documentation).
type Marking struct {
	Kind Kind
	// Min and Max are RED's thresholds on the average backlog in bytes
	// (default BDP/4 and BDP, at least 2 and 4 frames). Step marks at
	// Min. FQCoDel's CEThreshold defaults to the time the bottleneck
	// takes to send Min bytes.
	Min, Max int
	// Burst is RED's burst in packets, which sets how fast its average
	// follows the queue (default (2·Min + Max) / (3 · frame) + 1, as
	// tc-red(8) advises).
	Burst int
	// CEThreshold is fq_codel's ce_threshold (default: Min at the
	// bottleneck's rate, 250 µs at 500 Mbit/s).
	CEThreshold time.Duration
	// Target and Interval are fq_codel's CoDel parameters (default: Max
	// at the bottleneck's rate, and 20 times that).
	Target, Interval time.Duration
}

// Config describes a bed. Zero fields take the defaults documented on
// each; New fills them in, and Bed.Config returns the result.
type Config struct {
	// Senders is the number of sender namespaces, 1 to MaxSenders
	// (default 2).
	Senders int
	// Bottleneck is the rate of the link toward the receiver in bit/s,
	// 1 Mbit/s to 100 Gbit/s (default 500 Mbit/s).
	Bottleneck uint64
	// MTU of every interface, 576 to 9000 (default 1500).
	MTU int
	// Marking is the bottleneck's congestion signal (default TailDrop).
	Marking Marking
	// Limit is the most bytes the bottleneck queue holds; arrivals beyond
	// it are dropped (default 4·BDP, and at least Max plus 8 frames).
	Limit int
	// Burst is the rate limiter's bucket in bytes: how much may leave at
	// once after an idle spell, and how late the qdisc's timer may fire
	// without the link losing capacity (default the bytes of 250 µs at
	// the bottleneck's rate, at most 64 KiB, at least 2 frames).
	Burst int
	// Delay, when set, delays every frame the switch sends toward a
	// sender (the return path: acknowledgements, CNPs) with netem, so the
	// round trip grows by Delay without touching the bottleneck queue.
	// Needs sch_netem.
	Delay time.Duration
	// Prefix starts the namespace names (default "uroce-incast"): the
	// switch is Prefix-sw-PID-N, the receiver Prefix-r-PID-N and sender i
	// Prefix-sI-PID-N.
	Prefix string
}

// Limits on Config.
const (
	MaxSenders    = 100
	minBottleneck = 1_000_000
	maxBottleneck = 100_000_000_000
	maxLimit      = 1 << 30 // bytes of queue or burst
)

// NominalRTT is the round-trip time the default thresholds are sized for,
// before Config.Delay is added: a userspace stack on shared CPUs answers
// within about a millisecond.
const NominalRTT = time.Millisecond

// ethHeader is the Ethernet header the qdiscs count in every packet.
const ethHeader = 14

// Frame is the largest frame on the wire in bytes: MTU plus the Ethernet
// header, as the qdiscs count it.
func (c Config) Frame() int { return c.MTU + ethHeader }

// RTT is the round-trip time the thresholds are sized for: NominalRTT plus
// Delay.
func (c Config) RTT() time.Duration { return NominalRTT + c.Delay }

// BDP is the bandwidth-delay product of the bottleneck at RTT, in bytes.
func (c Config) BDP() int { return int(float64(c.Bottleneck) / 8 * c.RTT().Seconds()) }

// DrainTime is how long the bottleneck takes to send n bytes.
func (c Config) DrainTime(n int) time.Duration {
	return time.Duration(float64(n) * 8 * float64(time.Second) / float64(c.Bottleneck))
}

// resolve fills in the defaults and checks the result.
func (c Config) resolve() (Config, error) {
	if c.Senders == 0 {
		c.Senders = 2
	}
	if c.Bottleneck == 0 {
		c.Bottleneck = 500_000_000
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.Prefix == "" {
		c.Prefix = "uroce-incast"
	}
	switch {
	case c.Senders < 1 || c.Senders > MaxSenders:
		return c, fmt.Errorf("incast bed: %d senders: want 1 to %d", c.Senders, MaxSenders)
	case c.Bottleneck < minBottleneck || c.Bottleneck > maxBottleneck:
		return c, fmt.Errorf("incast bed: bottleneck %d bit/s: want 1 Mbit/s to 100 Gbit/s", c.Bottleneck)
	case c.MTU < 576 || c.MTU > 9000:
		return c, fmt.Errorf("incast bed: mtu %d: want 576 to 9000", c.MTU)
	case c.Marking.Kind < TailDrop || c.Marking.Kind > Step:
		return c, fmt.Errorf("incast bed: marking %v: unknown", c.Marking.Kind)
	case c.Delay < 0 || c.Delay > 10*time.Second:
		return c, fmt.Errorf("incast bed: delay %v: want 0 to 10s", c.Delay)
	case c.Limit < 0 || c.Burst < 0 || c.Marking.Min < 0 || c.Marking.Max < 0 || c.Marking.Burst < 0 ||
		c.Marking.CEThreshold < 0 || c.Marking.Target < 0 || c.Marking.Interval < 0:
		return c, errors.New("incast bed: negative queue parameter")
	}
	frame, bdp := c.Frame(), c.BDP()
	m := &c.Marking
	if m.Min == 0 {
		m.Min = max(bdp/4, 2*frame)
	}
	if m.Max == 0 {
		m.Max = max(bdp, m.Min+2*frame)
	}
	if m.Burst == 0 {
		m.Burst = (2*m.Min+m.Max)/(3*frame) + 1
	}
	if m.CEThreshold == 0 {
		m.CEThreshold = c.DrainTime(m.Min)
	}
	if m.Target == 0 {
		m.Target = c.DrainTime(m.Max)
	}
	if m.Interval == 0 {
		m.Interval = 20 * m.Target
	}
	if c.Limit == 0 {
		c.Limit = max(4*bdp, m.Max+8*frame)
	}
	if c.Burst == 0 {
		c.Burst = max(2*frame, min(int(c.Bottleneck/8*250/1_000_000), 64<<10))
	}
	switch {
	case c.Limit > maxLimit || c.Burst > maxLimit:
		return c, fmt.Errorf("incast bed: limit %d, burst %d bytes: want at most %d", c.Limit, c.Burst, maxLimit)
	case m.Max < m.Min:
		return c, fmt.Errorf("incast bed: marking thresholds min %d > max %d bytes", m.Min, m.Max)
	case c.Limit < m.Max+frame:
		return c, fmt.Errorf("incast bed: limit %d bytes: want at least max %d plus a frame", c.Limit, m.Max)
	case c.Burst < frame:
		return c, fmt.Errorf("incast bed: burst %d bytes: want at least a frame (%d)", c.Burst, frame)
	case m.Interval < m.Target:
		return c, fmt.Errorf("incast bed: fq_codel interval %v < target %v", m.Interval, m.Target)
	}
	return c, nil
}
