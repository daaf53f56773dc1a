package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/bench"
	"github.com/uroce/uroce/internal/incast"
)

func init() {
	register(&command{name: "bench", summary: "link | lat | incast: throughput, latency and congestion control on veth (root)", run: runBench})
}

const benchUsage = `usage: uroce bench link [flags]
       uroce bench lat [flags]
       uroce bench incast [flags]

link measures, in one run, on a veth pair between two network namespaces:
the raw AF_XDP frame rate (frames of the given size blasted from one end to
the other, no RoCE processing), the goodput of RC RDMA WRITEs through the
whole stack and that of one kernel TCP stream, RC READ, and 64-byte RC
WRITEs against 64-byte kernel UDP datagrams per second, in alternating
rounds, and prints them, their ratios, and the CPU seconds the machine
spent per GB moved by each.

lat measures the latency of small RC RDMA WRITEs on such a pair as
ib_write_lat does (ping-pong, each side watching its memory), with the
engines sleeping in poll(2) and busy-polling, next to the kernel's UDP
and TCP ping-pongs of the same size.

incast runs several RC WRITE flows, each from its own namespace, into one
receiver through a bridge whose port toward the receiver is an
ECN-marking bottleneck (internal/incast), with DCQCN on and off, and
prints each flow's goodput, Jain's fairness index, the bottleneck's drops
and CE marks, the CNPs and the retransmissions.

All need root.

flags:
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "lat" {
		return runBenchLat(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "incast" {
		return runBenchIncast(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "link" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, benchUsage)
			return 0
		}
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	fs := newFlags("uroce bench link", benchUsage, stderr)
	var o bench.LinkOptions
	fs.IntVar(&o.MTU, "mtu", 9000, "MTU of the veth pair")
	fs.IntVar(&o.Frame, "frame", 0, "raw frame size in bytes (default: the largest RoCE packet at the path MTU, 4170 at MTU 9000)")
	fs.IntVar(&o.Size, "size", 65536, "RDMA WRITE message size in bytes")
	fs.IntVar(&o.Window, "window", 32, "RDMA WRITEs in flight")
	fs.DurationVar(&o.Duration, "duration", 0, "length of each phase in each round (default 1s)")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds of both phases, alternately; the medians are compared")
	fs.IntVar(&o.RawWindow, "raw-window", 512, "raw frames in flight at most")
	fs.StringVar(&o.XDPMode, "xdp-mode", "auto", "how the XDP program attaches: auto, native or generic")
	fs.BoolVar(&o.BusyPoll, "busy-poll", false, "RoCE engines spin instead of sleeping in poll(2)")
	fs.DurationVar(&o.SocketBusyPoll, "socket-busy-poll", 0, "kernel busy polling of the AF_XDP sockets, this long per poll (SO_BUSY_POLL; 0: off)")
	fs.IntVar(&o.Batch, "batch", 0, "frames per link call of the RoCE engines (default 16)")
	fs.IntVar(&o.RingSize, "ring-size", 0, "entries of each AF_XDP ring, a power of two (default 2048)")
	fs.IntVar(&o.SendWindow, "send-window", 0, "RC send window in packets (0: adaptive, 48 to 256 KiB; -1: no bound)")
	fs.BoolVar(&o.NoTCP, "no-kernel", false, "leave out the kernel TCP stream and UDP datagrams of each round")
	fs.BoolVar(&o.NoExtra, "no-extra", false, "leave out the RC READ and 64-byte message rate phases")
	jsonOut := fs.Bool("json", false, "the report as JSON")
	if code := parseFlags(fs, args[1:], stderr); code >= 0 {
		return code
	}
	rep, err := bench.Link(ctx, o)
	return writeReport(stdout, stderr, fs.Name(), *jsonOut, rep, err)
}

func runBenchLat(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce bench lat", benchUsage, stderr)
	var o bench.LatOptions
	fs.IntVar(&o.MTU, "mtu", 1500, "MTU of the veth pair")
	fs.IntVar(&o.Size, "size", 64, "message size in bytes")
	fs.IntVar(&o.Iters, "iters", 10000, "measured round trips per mode")
	mode := fs.String("mode", "both", "engine polling: poll, busy or both")
	fs.StringVar(&o.XDPMode, "xdp-mode", "auto", "how the XDP program attaches: auto, native or generic")
	fs.BoolVar(&o.NoKernel, "no-kernel", false, "leave out the kernel UDP and TCP ping-pongs")
	fs.DurationVar(&o.SocketBusyPoll, "socket-busy-poll", 0, "kernel busy polling of the AF_XDP sockets, this long per poll (SO_BUSY_POLL; 0: off)")
	jsonOut := fs.Bool("json", false, "the report as JSON")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	switch *mode {
	case "poll":
		o.Modes = []bool{false}
	case "busy":
		o.Modes = []bool{true}
	case "both":
	default:
		fmt.Fprintf(stderr, "uroce bench lat: --mode %q: want poll, busy or both\n", *mode)
		return 2
	}
	rep, err := bench.Lat(ctx, o)
	return writeReport(stdout, stderr, fs.Name(), *jsonOut, rep, err)
}

func runBenchIncast(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce bench incast", benchUsage, stderr)
	var o bench.IncastOptions
	flows := fs.String("flows", "2,4,8", "flow counts to run, comma-separated")
	bottleneck := fs.Float64("bottleneck", 2, "bottleneck rate in Gbit/s")
	marking := fs.String("marking", "step", "the bottleneck's queue: step (CE past --mark-at), red, fq_codel or taildrop")
	fs.IntVar(&o.Marking.Min, "mark-at", 0, "marking threshold in bytes: step's, red's min (default: a quarter of the bandwidth-delay product)")
	fs.IntVar(&o.MTU, "mtu", 9000, "MTU of the bed")
	fs.IntVar(&o.Size, "size", 65536, "RDMA WRITE (or READ) message size in bytes")
	fs.IntVar(&o.Window, "window", 8, "WRITEs (or READs) in flight per flow")
	fs.BoolVar(&o.Read, "read", false, "RC READ flows: the receiver reads from the senders")
	fs.IntVar(&o.SendWindow, "send-window", 0, "request packets a sender's QP may have unacknowledged (0: the stack's adaptive window, -1: none, so that only DCQCN holds the senders back)")
	fs.IntVar(&o.RingSize, "ring-size", 0, "entries of each AF_XDP ring, a power of two (default 2048): deeper receive queues for the receiver's engine")
	fs.DurationVar(&o.Duration, "duration", 2*time.Second, "length of each measured run")
	mode := fs.String("dcqcn", "both", "runs with DCQCN on, off or both")
	line := fs.Float64("line-rate", 10, "the senders' line rate in Gbit/s (DCQCN recovers to it)")
	fs.StringVar(&o.XDPMode, "xdp-mode", "auto", "how the XDP program attaches: auto, native or generic")
	fs.BoolVar(&o.Join, "join", true, "after each run, stop the last flow and time how long it takes, started again, to get its fair share")
	params := dcqcn.Defaults()
	app.RegisterDCQCN(fs, &params, nil)
	jsonOut := fs.Bool("json", false, "the report as JSON")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	for _, f := range strings.Split(*flows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "uroce bench incast: --flows %q: want counts such as 2,4,8\n", *flows)
			return 2
		}
		o.Flows = append(o.Flows, n)
	}
	k, err := incast.ParseKind(*marking)
	if err != nil {
		fmt.Fprintf(stderr, "uroce bench incast: --marking: %v\n", err)
		return 2
	}
	o.Marking.Kind = k
	switch *mode {
	case "both":
	case "on":
		o.Modes = []bool{true}
	case "off":
		o.Modes = []bool{false}
	default:
		fmt.Fprintf(stderr, "uroce bench incast: --dcqcn %q: want on, off or both\n", *mode)
		return 2
	}
	o.Bottleneck, o.LineRate, o.DCQCN = uint64(*bottleneck*1e9), uint64(*line*1e9), &params
	rep, err := bench.Incast(ctx, o)
	return writeReport(stdout, stderr, fs.Name(), *jsonOut, rep, err)
}

// writeReport prints a bench command's report, as JSON or text, or its
// error; it returns the exit status.
func writeReport[R interface{ Write(io.Writer) }](stdout, stderr io.Writer, name string, jsonOut bool, rep R, err error) int {
	if err != nil {
		return runFailed(stderr, name, err)
	}
	if jsonOut {
		json.NewEncoder(stdout).Encode(rep)
	} else {
		rep.Write(stdout)
	}
	return 0
}
