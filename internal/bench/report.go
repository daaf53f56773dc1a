package bench

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/xdp"
)

// LinkOptions configure Link.
type LinkOptions struct {
	// MTU of the veth pair (default 9000: RoCE path MTU 4096).
	MTU int
	// Frame is the size of the raw frames in bytes (default: the largest
	// RoCE packet at the path MTU, an RDMA WRITE First: path MTU + 74,
	// 4170 at MTU 9000).
	Frame int
	// Size is the RDMA WRITE message size (default 65536).
	Size int
	// Window is the number of WRITEs in flight (default 32).
	Window int
	// RawWindow is the number of raw frames in flight (default 512): the
	// sender waits for the receiver rather than overrun it.
	RawWindow int
	// Duration of each phase (default 1 s), after a tenth of it to warm up.
	Duration time.Duration
	// Rounds is the number of times both phases run, alternately (default
	// 3); the report gives the median of each.
	Rounds int
	// XDPMode is how the XDP program attaches: auto, native or generic.
	XDPMode string
	// BusyPoll makes the RoCE engines spin instead of sleeping in poll(2).
	BusyPoll bool
	// SocketBusyPoll is the kernel busy polling of the AF_XDP sockets
	// (stack.Config.SocketBusyPoll).
	SocketBusyPoll time.Duration
	// Batch and RingSize are the RoCE device's frames per link call and
	// AF_XDP ring entries (stack.Config.Batch, XDPRingSize; 0: the
	// defaults).
	Batch, RingSize int
	// SendWindow is the RC QPs' send window in packets
	// (stack.Config.SendWindow: 0 adaptive, negative unbounded).
	SendWindow int
	// NoTCP leaves out the kernel TCP stream (and UDP datagrams) of each
	// round; NoExtra the RC READ and 64-byte message rate phases.
	NoTCP, NoExtra bool
}

func (o *LinkOptions) defaults() error {
	if o.MTU == 0 {
		o.MTU = 9000
	}
	if o.Size == 0 {
		o.Size = 65536
	}
	if o.Window == 0 {
		o.Window = 32
	}
	if o.Duration == 0 {
		o.Duration = time.Second
	}
	if o.RawWindow == 0 {
		o.RawWindow = 512
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	switch {
	case o.MTU < 576 || o.MTU > 65000:
		return fmt.Errorf("mtu %d: want 576 to 65000", o.MTU)
	case o.Frame != 0 && (o.Frame < 64 || o.Frame > o.MTU+14):
		return fmt.Errorf("frame size %d: want 64 to mtu+14 (%d)", o.Frame, o.MTU+14)
	case o.Size < 1 || o.Size > 1<<30:
		return fmt.Errorf("message size %d: want 1 byte to 1 GiB", o.Size)
	case o.Window < 1 || o.Window > 1024:
		return fmt.Errorf("window %d: want 1 to 1024", o.Window)
	case o.Duration < 10*time.Millisecond:
		return fmt.Errorf("duration %v: want at least 10ms", o.Duration)
	case o.RawWindow < 1 || o.RawWindow > 1<<20:
		return fmt.Errorf("raw window %d: want 1 to %d", o.RawWindow, 1<<20)
	case o.Rounds < 1 || o.Rounds > 100:
		return fmt.Errorf("rounds %d: want 1 to 100", o.Rounds)
	}
	return nil
}

// LinkRound is one round's measurements.
type LinkRound struct {
	RawSentPerSec   float64 // frames the sender's link took
	RawFramesPerSec float64 // frames received
	RawRxDropped    uint64  // frames the receiving socket's kernel side dropped

	RoCEMessages      uint64
	RoCEGoodput       float64 // bits of WRITE payload per second
	RoCEPacketsPerSec float64 // packets A transmitted per second
	RoCERetransmitted uint64
	RoCECPUPerGB      float64 // CPU seconds (the whole machine's) per GB of WRITE payload

	TCPGoodput  float64 // one kernel TCP stream, bits per second
	TCPCPUPerGB float64

	ReadGoodput float64 // RC READ of Size bytes, bits per second
	Write64Rate float64 // 64-byte RC WRITEs per second
	UDP64Rate   float64 // 64-byte kernel UDP datagrams received per second
}

// LinkReport is what Link measured: each round, and the medians.
type LinkReport struct {
	LinkOptions
	PathMTU      stack.MTU
	FramePayload int // RoCE payload bytes in each raw frame
	Rounds       []LinkRound
	// Median is the median of each figure over the rounds.
	Median LinkRound
}

func (r *LinkReport) summarize() {
	med := func(f func(*LinkRound) float64) float64 {
		v := make([]float64, len(r.Rounds))
		for i := range r.Rounds {
			v[i] = f(&r.Rounds[i])
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	m := &r.Median
	m.RawSentPerSec = med(func(x *LinkRound) float64 { return x.RawSentPerSec })
	m.RawFramesPerSec = med(func(x *LinkRound) float64 { return x.RawFramesPerSec })
	m.RawRxDropped = uint64(med(func(x *LinkRound) float64 { return float64(x.RawRxDropped) }))
	m.RoCEMessages = uint64(med(func(x *LinkRound) float64 { return float64(x.RoCEMessages) }))
	m.RoCEGoodput = med(func(x *LinkRound) float64 { return x.RoCEGoodput })
	m.RoCEPacketsPerSec = med(func(x *LinkRound) float64 { return x.RoCEPacketsPerSec })
	m.RoCERetransmitted = uint64(med(func(x *LinkRound) float64 { return float64(x.RoCERetransmitted) }))
	m.RoCECPUPerGB = med(func(x *LinkRound) float64 { return x.RoCECPUPerGB })
	m.TCPGoodput = med(func(x *LinkRound) float64 { return x.TCPGoodput })
	m.TCPCPUPerGB = med(func(x *LinkRound) float64 { return x.TCPCPUPerGB })
	m.ReadGoodput = med(func(x *LinkRound) float64 { return x.ReadGoodput })
	m.Write64Rate = med(func(x *LinkRound) float64 { return x.Write64Rate })
	m.UDP64Rate = med(func(x *LinkRound) float64 { return x.UDP64Rate })
}

// RawPayloadRate is the payload the raw frames of x would carry, in bits
// per second, had each been a RoCE data packet.
func (r *LinkReport) RawPayloadRate(x *LinkRound) float64 {
	return x.RawFramesPerSec * float64(r.FramePayload) * 8
}

// Ratio is the RoCE goodput of x over its raw payload rate.
func (r *LinkReport) Ratio(x *LinkRound) float64 {
	if p := r.RawPayloadRate(x); p > 0 {
		return x.RoCEGoodput / p
	}
	return 0
}

// Write prints the report: each round, then the medians and their ratio.
func (r *LinkReport) Write(w io.Writer) {
	mode := r.XDPMode
	if mode == "" {
		mode = "auto"
	}
	poll := "poll(2)"
	if r.BusyPoll {
		poll = "busy-polling"
	}
	fmt.Fprintf(w, "uroce bench link: veth pair between two namespaces, MTU %d (RoCE path MTU %d), XDP %s, %d rounds of %v per phase\n",
		r.MTU, r.PathMTU.Bytes(), mode, len(r.Rounds), r.Duration)
	fmt.Fprintf(w, "  raw AF_XDP: %d-byte frames (%d-byte payloads), up to %d in flight\n", r.Frame, r.FramePayload, r.RawWindow)
	batch, ring := fmt.Sprint(stack.DefaultXDPBatch), fmt.Sprint(xdp.DefaultRingSize)
	if r.Batch > 0 {
		batch = fmt.Sprint(r.Batch)
	}
	if r.RingSize > 0 {
		ring = fmt.Sprint(r.RingSize)
	}
	fmt.Fprintf(w, "  RC WRITE:   %d-byte messages, %d in flight, engines %s, %s frames per link call, AF_XDP rings of %s\n",
		r.Size, r.Window, poll, batch, ring)
	if !r.NoTCP {
		fmt.Fprintf(w, "  kernel TCP: one stream from the same namespace to the other, 1 MiB writes\n")
	}
	fmt.Fprintf(w, "  %-7s %14s %14s %10s %16s %14s %8s %7s %10s %9s %9s %9s\n", "round", "raw Mframes/s", "raw Gbit/s*", "raw drops",
		"RC WRITE Gbit/s", "RC Mpackets/s", "retrans", "ratio", "TCP Gbit/s", "RC/TCP", "RC s/GB", "TCP s/GB")
	line := func(name string, x *LinkRound) {
		tcp := 0.0
		if x.TCPGoodput > 0 {
			tcp = x.RoCEGoodput / x.TCPGoodput * 100
		}
		fmt.Fprintf(w, "  %-7s %14.3f %14.2f %10d %16.2f %14.3f %8d %6.1f%% %10.2f %8.1f%% %9.3f %9.3f\n", name, x.RawFramesPerSec/1e6,
			r.RawPayloadRate(x)/1e9, x.RawRxDropped, x.RoCEGoodput/1e9, x.RoCEPacketsPerSec/1e6, x.RoCERetransmitted, r.Ratio(x)*100,
			x.TCPGoodput/1e9, tcp, x.RoCECPUPerGB, x.TCPCPUPerGB)
	}
	for i := range r.Rounds {
		line(fmt.Sprint(i+1), &r.Rounds[i])
	}
	line("median", &r.Median)
	fmt.Fprintf(w, "  * payload bits the raw frames would carry as RoCE data packets\n")
	fmt.Fprintf(w, "  ratio (medians): RC WRITE goodput / raw payload rate = %.1f %%\n", r.Ratio(&r.Median)*100)
	if r.Median.TCPGoodput > 0 {
		fmt.Fprintf(w, "  RC WRITE goodput / one kernel TCP stream (medians) = %.1f %%; CPU s/GB: the machine's busy time per GB moved\n",
			r.Median.RoCEGoodput/r.Median.TCPGoodput*100)
	}
	if r.Median.Write64Rate > 0 {
		fmt.Fprintf(w, "  %-7s %16s %22s %22s %9s\n", "round", "RC READ Gbit/s", "64 B RC WRITE Mmsg/s", "64 B UDP Mdgram/s", "RC/UDP")
		line := func(name string, x *LinkRound) {
			ratio := 0.0
			if x.UDP64Rate > 0 {
				ratio = x.Write64Rate / x.UDP64Rate * 100
			}
			fmt.Fprintf(w, "  %-7s %16.2f %22.3f %22.3f %8.1f%%\n", name, x.ReadGoodput/1e9, x.Write64Rate/1e6, x.UDP64Rate/1e6, ratio)
		}
		for i := range r.Rounds {
			line(fmt.Sprint(i+1), &r.Rounds[i])
		}
		line("median", &r.Median)
	}
}

// LatOptions configure Lat.
type LatOptions struct {
	// MTU of the veth pair (default 1500).
	MTU int
	// Size is the message size (default 64).
	Size int
	// Iters is the number of measured round trips (default 10000), after
	// Warmup more (default 1000).
	Iters, Warmup int
	// Modes lists the engine polling modes to measure: false for poll(2),
	// true for busy-polling (default both).
	Modes []bool
	// XDPMode is how the XDP program attaches: auto, native or generic.
	XDPMode string
	// NoKernel leaves out the kernel UDP and TCP ping-pongs.
	NoKernel bool
	// SocketBusyPoll is the kernel busy polling of the AF_XDP sockets
	// (stack.Config.SocketBusyPoll).
	SocketBusyPoll time.Duration
}

func (o *LatOptions) defaults() error {
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.Size == 0 {
		o.Size = 64
	}
	if o.Iters == 0 {
		o.Iters = 10000
	}
	if o.Warmup == 0 {
		o.Warmup = 1000
	}
	if o.Modes == nil {
		o.Modes = []bool{false, true}
	}
	switch {
	case o.MTU < 576 || o.MTU > 65000:
		return fmt.Errorf("mtu %d: want 576 to 65000", o.MTU)
	case o.Size < 1 || o.Size > 1<<20:
		return fmt.Errorf("message size %d: want 1 byte to 1 MiB", o.Size)
	case o.Iters < 1 || o.Warmup < 0:
		return fmt.Errorf("iterations %d (warm-up %d): want at least 1", o.Iters, o.Warmup)
	}
	return nil
}

// LatResult is one polling mode's figures, or the kernel's (Kernel: UDP
// or TCP): half round trips.
type LatResult struct {
	Kernel                      string `json:",omitempty"`
	BusyPoll                    bool
	Iters                       int
	Min, Median, P99, P999, Max time.Duration
}

// LatReport is what Lat measured.
type LatReport struct {
	LatOptions
	Results []LatResult
}

// Write prints the report.
func (r *LatReport) Write(w io.Writer) {
	fmt.Fprintf(w, "uroce bench lat: RC WRITE ping-pong of %d-byte messages between two namespaces (veth, MTU %d), as ib_write_lat measures it,\n",
		r.Size, r.MTU)
	fmt.Fprintf(w, "  next to the kernel's UDP and TCP ping-pong of the same size on the same pair\n")
	fmt.Fprintf(w, "  %-18s %8s %9s %9s %9s %9s %9s   (µs, half round trip)\n", "", "iters", "min", "median", "p99", "p99.9", "max")
	var udp *LatResult
	for i, x := range r.Results {
		mode := "RC WRITE, poll(2)"
		switch {
		case x.Kernel != "":
			mode = "kernel " + x.Kernel
			if x.Kernel == "UDP" {
				udp = &r.Results[i]
			}
		case x.BusyPoll:
			mode = "RC WRITE, busy"
		}
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		fmt.Fprintf(w, "  %-18s %8d %9.2f %9.2f %9.2f %9.2f %9.2f\n", mode, x.Iters, us(x.Min), us(x.Median), us(x.P99), us(x.P999), us(x.Max))
	}
	if udp == nil {
		return
	}
	for _, x := range r.Results {
		if x.Kernel == "" {
			mode := "poll(2)"
			if x.BusyPoll {
				mode = "busy-polling"
			}
			fmt.Fprintf(w, "  RC WRITE (%s) / kernel UDP: median %.2f×, p99.9 %.2f×\n", mode,
				float64(x.Median)/float64(udp.Median), float64(x.P999)/float64(udp.P999))
		}
	}
}
