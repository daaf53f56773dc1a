package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/uroce/uroce/internal/bench"
)

func init() {
	register(&command{name: "bench", summary: "link | lat: link-limited throughput and small-message latency on veth (root)", run: runBench})
}

const benchUsage = `usage: uroce bench link [flags]
       uroce bench lat [flags]

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

Both need root.

flags:
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "lat" {
		return runBenchLat(ctx, args[1:], stdout, stderr)
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
	fs.BoolVar(&o.NoTCP, "no-kernel", false, "leave out the kernel TCP stream and UDP datagrams of each round")
	fs.BoolVar(&o.NoExtra, "no-extra", false, "leave out the RC READ and 64-byte message rate phases")
	jsonOut := fs.Bool("json", false, "the report as JSON")
	if code := parseFlags(fs, args[1:], stderr); code >= 0 {
		return code
	}
	rep, err := bench.Link(ctx, o)
	if err != nil {
		return runFailed(stderr, fs.Name(), err)
	}
	if *jsonOut {
		json.NewEncoder(stdout).Encode(rep)
	} else {
		rep.Write(stdout)
	}
	return 0
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
	if err != nil {
		return runFailed(stderr, fs.Name(), err)
	}
	if *jsonOut {
		json.NewEncoder(stdout).Encode(rep)
	} else {
		rep.Write(stdout)
	}
	return 0
}
