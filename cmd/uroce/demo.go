package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/uroce/uroce/internal/demo"
)

func init() {
	register(&command{name: "demo", summary: "RDMA between two network namespaces over veth, every operation checked (root)", run: runDemo})
}

const demoUsage = `usage: uroce demo [flags]

Creates two network namespaces joined by a veth pair (192.0.2.1/24 and
192.0.2.2/24, with --ipv6 also 2001:db8::1/64 and 2001:db8::2/64; no
uplink), starts a uroce device on each end (XDP program plus AF_XDP
sockets), and runs RC SEND/RECV, WRITE, WRITE_WITH_IMM, READ, CMP_SWAP,
FETCH_ADD, UC WRITE and UD SEND from one to the other, checking every byte.
Prints what ran, bytes, throughput, latency and the transport's counters,
then removes everything (also on Ctrl-C or failure). Needs root.

flags:
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce demo", demoUsage, stderr)
	var o demo.Options
	fs.IntVar(&o.MTU, "mtu", 1500, "MTU of the veth pair (9000: RoCE path MTU 4096, multi-buffer AF_XDP frames)")
	fs.IntVar(&o.Size, "size", 65536, "message size in bytes (atomics: 8; UD: cut to the path MTU)")
	fs.IntVar(&o.Count, "count", 1000, "messages per operation")
	fs.Float64Var(&o.Drop, "drop", 0, "fault injection: drop this fraction of the frames each side transmits")
	fs.Float64Var(&o.Dup, "dup", 0, "fault injection: duplicate this fraction of the frames")
	fs.Float64Var(&o.Reorder, "reorder", 0, "fault injection: reorder this fraction of the frames")
	fs.Float64Var(&o.Corrupt, "corrupt", 0, "fault injection: flip a bit in this fraction of the frames (caught by the ICRC)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the fault injection and of the message contents")
	fs.BoolVar(&o.IPv6, "ipv6", false, "run over IPv6 (2001:db8::1 and ::2) instead of IPv4")
	fs.StringVar(&o.XDPMode, "xdp-mode", "auto", "how the XDP program attaches: auto, native or generic")
	fs.BoolVar(&o.BusyPoll, "busy-poll", false, "engines spin instead of sleeping in poll(2)")
	ops := fs.String("ops", "all", "operations, comma-separated: send,write,write_imm,read,cmp_swap,fetch_add,uc_write,ud_send")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	var err error
	if o.Ops, err = parseOps(*ops); err != nil {
		fmt.Fprintf(stderr, "uroce demo: %v\n", err)
		return 2
	}
	o.Progress = func(r demo.OpResult) {
		fmt.Fprintf(stderr, "  %-18v done: %d messages in %.3fs\n", r.Op, r.Messages, r.Elapsed.Seconds())
	}
	rep, err := demo.Run(ctx, o)
	if rep != nil && len(rep.Results) > 0 {
		rep.Write(stdout)
	}
	if err != nil {
		return runFailed(stderr, fs.Name(), err)
	}
	return 0
}

var opFlags = map[string]demo.Op{
	"send": demo.RCSend, "write": demo.RCWrite, "write_imm": demo.RCWriteImm, "read": demo.RCRead,
	"cmp_swap": demo.RCCmpSwap, "fetch_add": demo.RCFetchAdd, "uc_write": demo.UCWrite, "ud_send": demo.UDSend,
}

func parseOps(s string) ([]demo.Op, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var ops []demo.Op
	for _, name := range strings.Split(s, ",") {
		op, ok := opFlags[strings.TrimSpace(strings.ToLower(name))]
		if !ok {
			return nil, fmt.Errorf("unknown operation %q (want send, write, write_imm, read, cmp_swap, fetch_add, uc_write, ud_send)", name)
		}
		ops = append(ops, op)
	}
	return ops, nil
}
