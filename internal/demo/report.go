package demo

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// Options configure Run.
type Options struct {
	// MTU of the veth pair (default 1500; 9000 gives a path MTU of 4096
	// and multi-buffer AF_XDP frames).
	MTU int
	// Size and Count are the message size and the messages per operation
	// (Workload defaults when zero).
	Size, Count int
	// Ops are the operations (default all).
	Ops []Op
	// IPv6 runs over 2001:db8::1 and 2001:db8::2 instead of 192.0.2.1
	// and 192.0.2.2.
	IPv6 bool
	// XDPMode is how the XDP program attaches: auto, native or generic.
	XDPMode string
	// BusyPoll makes the engines spin instead of sleeping in poll(2).
	BusyPoll bool
	// Fault injection on the frames each device transmits: probabilities
	// per frame, seeded with Seed.
	Drop, Dup, Reorder, Corrupt float64
	Seed                        uint64
	// Progress, if set, is called with each operation's result.
	Progress func(OpResult)
}

// Report is what Run did.
type Report struct {
	Options
	NamespaceA, NamespaceB string
	DevA, DevB             string
	AddrA, AddrB           netip.Addr
	MACA, MACB             [6]byte
	PathMTU                stack.MTU
	Results                []OpResult
	CountersA, CountersB   stack.Counters
	FaultsA, FaultsB       fault.Stats
	XDPA, XDPB             xdp.Stats
	Elapsed                time.Duration
}

// Faulty reports whether faults are injected.
func (o *Options) Faulty() bool { return o.Drop > 0 || o.Dup > 0 || o.Reorder > 0 || o.Corrupt > 0 }

// Errors Run returns before it changes anything.
var (
	ErrNotRoot = errors.New("needs root: it creates network namespaces, a veth pair, an XDP program and AF_XDP sockets (run it with sudo)")
	ErrNoAFXDP = errors.New("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): uroce needs Linux 5.10 or later built with them")
)

// Write prints the report: the network, one line per operation, the
// counters that tell how the transport coped, and the faults injected.
func (r *Report) Write(w io.Writer) {
	fam := "IPv4"
	if r.IPv6 {
		fam = "IPv6"
	}
	mode := r.XDPMode
	if mode == "" {
		mode = "auto"
	}
	poll := "poll(2)"
	if r.BusyPoll {
		poll = "busy-polling"
	}
	fmt.Fprintf(w, "uroce demo: RoCEv2 between two network namespaces joined by a veth pair (%s)\n", fam)
	fmt.Fprintf(w, "  A  %-26s %s  %-12v %s\n", r.NamespaceA, r.DevA, r.AddrA, mac(r.MACA))
	fmt.Fprintf(w, "  B  %-26s %s  %-12v %s\n", r.NamespaceB, r.DevB, r.AddrB, mac(r.MACB))
	fmt.Fprintf(w, "  MTU %d (RoCE path MTU %d), XDP %s, engines %s, AF_XDP frames sent %d (%d multi-buffer)\n",
		r.MTU, r.PathMTU.Bytes(), mode, poll, r.XDPA.TxFrames+r.XDPB.TxFrames, r.XDPA.TxMultiBuffer+r.XDPB.TxMultiBuffer)
	if r.Faulty() {
		fmt.Fprintf(w, "  faults injected on what each side transmits: %s (seed %d)\n", faultSpec(&r.Options), r.Seed)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-18s %8s %5s %7s %10s %9s %9s   %s\n", "operation", "messages", "lost", "size", "data", "time", "Gbit/s", "latency µs min/median/p99")
	var msgs int
	var bytes int64
	for _, x := range r.Results {
		lost := "-"
		if !x.Op.reliable() {
			lost = fmt.Sprint(x.Lost)
		}
		lat := "-"
		if x.Latency.N > 0 {
			lat = fmt.Sprintf("%s / %s / %s", us(x.Latency.Min), us(x.Latency.Median), us(x.Latency.P99))
		}
		fmt.Fprintf(w, "  %-18v %8d %5s %7d %10s %8.3fs %9.3f   %s\n", x.Op, x.Messages, lost, x.Size, size(x.Bytes), x.Elapsed.Seconds(), x.Gbps(), lat)
		msgs += x.Messages
		bytes += x.Bytes
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  checked: %d operations, %d messages, %s, every byte as sent", len(r.Results), msgs, size(bytes))
	if r.Faulty() {
		fmt.Fprint(w, " (UC and UD messages hit by faults are lost, as those transports allow)")
	}
	fmt.Fprintln(w)
	for _, s := range []struct {
		name string
		c    *stack.Counters
		x    *xdp.Stats
	}{{"A", &r.CountersA, &r.XDPA}, {"B", &r.CountersB, &r.XDPB}} {
		q := &s.c.QP
		fmt.Fprintf(w, "  %s: %d packets sent, %d received; retransmitted %d; ICRC errors %d; duplicates %d; out of sequence %d; "+
			"NAKs received %d; ACK timeouts %d; RNR NAKs %d; AF_XDP kernel drops %d\n",
			s.name, s.c.SentPkts, s.c.RcvdPkts, q.RetransmittedPkts, s.c.RcvICRCErr, q.DuplicateRequest, q.OutOfSequence,
			q.RcvdSeqErr, q.LocalAckTimeoutErr, q.RcvdRNRErr, s.x.RxDropped+s.x.RxRingFull)
	}
	if r.Faulty() {
		for _, s := range []struct {
			name string
			f    *fault.Stats
		}{{"A", &r.FaultsA}, {"B", &r.FaultsB}} {
			fmt.Fprintf(w, "  faults by %s: %d frames, %d dropped, %d duplicated, %d reordered, %d corrupted\n",
				s.name, s.f.Frames, s.f.Dropped, s.f.Duplicated, s.f.Reordered, s.f.Corrupted)
		}
	}
	fmt.Fprintf(w, "  total time %.2fs; namespaces removed\n", r.Elapsed.Seconds())
}

func faultSpec(o *Options) string {
	var parts []string
	for _, f := range []struct {
		name string
		p    float64
	}{{"drop", o.Drop}, {"duplicate", o.Dup}, {"reorder", o.Reorder}, {"corrupt", o.Corrupt}} {
		if f.p > 0 {
			parts = append(parts, fmt.Sprintf("%s %g%%", f.name, f.p*100))
		}
	}
	return strings.Join(parts, ", ")
}

func mac(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
