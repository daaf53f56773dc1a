package bench

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/internal/incast"
)

// IncastOptions configure Incast.
type IncastOptions struct {
	// Flows are the flow counts to run, one sender namespace each
	// (default 2, 4 and 8).
	Flows []int
	// Bottleneck is the rate of the receiver's bridge port (default 2
	// Gbit/s).
	Bottleneck uint64
	// Marking is the bottleneck's queue. Its zero Kind is incast's
	// TailDrop, which marks nothing; uroce bench incast passes Step (CE
	// past a threshold, which the bed derives from the rate) unless told
	// otherwise.
	Marking incast.Marking
	// MTU of the bed (default 9000: RoCE path MTU 4096).
	MTU int
	// Size of each RDMA WRITE (default 65536) and Window, the WRITEs
	// each flow keeps in flight (default 8).
	Size, Window int
	// Read makes the flows RC READs instead: the receiver's QPs read
	// from the senders, whose READ responses cross the bottleneck, so
	// that the senders are DCQCN's reaction points as responders.
	Read bool
	// SendWindow is the senders' stack.Config.SendWindow: 0 the stack's
	// adaptive window, which by itself keeps a flow's unacknowledged
	// bytes within 256 KiB; -1 no bound but the WRITEs in flight, so
	// that only DCQCN holds the senders back.
	SendWindow int
	// RingSize is the entries of each AF_XDP ring of the receiver and
	// the senders (stack.Config.XDPRingSize; 0: the default).
	RingSize int
	// Duration of each measured run (default 2 s), after a fifth of it
	// to reach a steady state.
	Duration time.Duration
	// Modes are DCQCN on (true) and off, in this order (default both).
	Modes []bool
	// LineRate is the senders' line rate, which DCQCN starts and
	// recovers to, and PAUSE times count at (default 10 Gbit/s, what
	// veth reports).
	LineRate uint64
	// DCQCN are the parameters (nil: ConnectX's defaults).
	DCQCN *dcqcn.Params
	// XDPMode is how the XDP program attaches: auto, native or generic.
	XDPMode string
	// Join adds a phase after each measured run: the last flow stops,
	// and the time it takes after it starts again to reach 90 % of its
	// fair share (the bottleneck's rate over the flows) is measured.
	Join bool
}

func (o *IncastOptions) defaults() error {
	if len(o.Flows) == 0 {
		o.Flows = []int{2, 4, 8}
	}
	if o.Bottleneck == 0 {
		o.Bottleneck = 2_000_000_000
	}
	if o.MTU == 0 {
		o.MTU = 9000
	}
	if o.Size == 0 {
		o.Size = 65536
	}
	if o.Window == 0 {
		o.Window = 8
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	if len(o.Modes) == 0 {
		o.Modes = []bool{true, false}
	}
	if o.LineRate == 0 {
		o.LineRate = 10_000_000_000
	}
	for _, n := range o.Flows {
		if n < 1 || n > incast.MaxSenders {
			return fmt.Errorf("bench incast: %d flows: want 1 to %d", n, incast.MaxSenders)
		}
	}
	if o.Size < 1 || o.Window < 1 || o.Duration < 10*time.Millisecond {
		return errors.New("bench incast: size, window and duration must be positive (duration at least 10ms)")
	}
	return nil
}

// IncastReport is what Incast measured.
type IncastReport struct {
	Options IncastOptions
	Runs    []IncastRun
}

// IncastRun is one flow count with DCQCN on or off.
type IncastRun struct {
	Flows int
	DCQCN bool
	// Report has the flows' goodput (payload bytes of completed WRITEs)
	// and the bottleneck queue's counters over the measured time.
	Report incast.Report
	// Marked and CNPs are the CE-marked packets the receiver counted
	// (np_ecn_marked_roce_packets) and the CNPs it sent (np_cnp_sent);
	// CNPHandled the rate cuts at the senders (rp_cnp_handled).
	Marked, CNPs, CNPHandled uint64
	// Retransmitted packets and ACK timeouts at the requesters (the
	// senders, or with Options.Read the receiver's QPs); Probes are
	// the tail-loss probes among the retransmitted packets: the last
	// packet sent again when no ACK came within the probe timeout, which
	// a packet delayed in the queue causes as well as a lost one.
	Retransmitted, Probes, Timeouts uint64
	// RxDropped are the frames the receiver's AF_XDP socket dropped
	// (xsk_rx_dropped: no fill-ring buffer; xsk_rx_ring_full): losses
	// after the bottleneck, which its counters do not see.
	RxDropped uint64
	// Rates are the flows' DCQCN rates at the end (0: not limited).
	Rates []uint64
	// Join is how long the last flow took to reach 90 % of its fair
	// share after starting again (Options.Join; -1: not within 1 s).
	Join time.Duration
}

// Write prints the runs, each as a table.
func (r *IncastReport) Write(w io.Writer) {
	o := &r.Options
	win := "the stack's adaptive send window"
	switch {
	case o.SendWindow < 0:
		win = "no send window"
	case o.SendWindow > 0:
		win = fmt.Sprintf("a send window of %d packets", o.SendWindow)
	}
	fmt.Fprintf(w, "incast: RC %ss of %d bytes, %d in flight per flow, %s, line rate %s, bed MTU %d\n",
		o.op(), o.Size, o.Window, win, rate(float64(o.LineRate)), o.MTU)
	for i := range r.Runs {
		x := &r.Runs[i]
		fmt.Fprintln(w)
		x.Report.WriteText(w)
		who := "senders"
		if o.Read {
			who = "requesters (the receiver's QPs)"
		}
		fmt.Fprintf(w, "  receiver: %d CE-marked packets, %d CNPs sent, %d frames dropped by its AF_XDP socket; senders: %d rate cuts; %s: %d packets retransmitted (%d of them loss probes), %d ACK timeouts\n",
			x.Marked, x.CNPs, x.RxDropped, x.CNPHandled, who, x.Retransmitted, x.Probes, x.Timeouts)
		if o.Join && x.Flows > 1 {
			if x.Join < 0 {
				fmt.Fprintf(w, "  a flow starting again did not reach 90%% of its fair share within 1 s\n")
			} else {
				fmt.Fprintf(w, "  a flow starting again reached 90%% of its fair share (10 ms windows) in %v\n", x.Join.Round(time.Millisecond))
			}
		}
		if x.DCQCN {
			fmt.Fprintf(w, "  DCQCN rates at the end:")
			for _, v := range x.Rates {
				if v == 0 {
					fmt.Fprintf(w, " line")
				} else {
					fmt.Fprintf(w, " %s", rate(float64(v)))
				}
			}
			fmt.Fprintln(w)
		}
	}
}

// op names the flows' operation.
func (o *IncastOptions) op() string {
	if o.Read {
		return "READ"
	}
	return "WRITE"
}

func rate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.3f Gbit/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f Mbit/s", bps/1e6)
}
