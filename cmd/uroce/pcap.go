package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/pcaptool"
)

func init() {
	register(&command{name: "pcap", summary: "decode or verify RoCE captures (pcap, pcapng)", run: runPcap})
}

const pcapUsage = `usage:
  uroce pcap decode [--json] FILE...
      one line (or JSON object) per RoCE packet: frame, addresses, ports,
      opcode, PSN, dest QP, flags, extended headers, payload length, ICRC;
      for a CM MAD on QP1 its message, transaction and communication IDs,
      QPN, starting PSN, service ID (port space, port) and the rdma_cm
      addresses (src=IP:port dst=IP:port, the port of dst from the
      service ID); and one per PAUSE or PFC frame (802.3x, 802.1Qbb):
      source MAC, quanta per enabled priority
  uroce pcap verify [--json] [--strict] [-q] FILE...
      check every RoCE packet (ICRC, lengths, pad, reserved bits, opcode,
      headers), each QP's flow (PSN gaps, retransmissions, duplicates,
      NAKs, RNR NAKs, READ responses, MSN) and each RDMA CM exchange
      (REQ, REP, RTU or REJ, DREQ, DREP; their IDs; the QPNs, starting
      PSNs, transport and MTU of the traffic that follows); the last line
      reads "N packets, N roce, N icrc_ok, N icrc_bad, N malformed"

exit status: 0 when no ICRC or format error was found, 1 when one was
(or a file is damaged; with --strict also on flow anomalies), 2 on bad
usage or a file that cannot be opened
`

func runPcap(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pcapUsage)
		return pcaptool.ExitUsage
	}
	fs := flag.NewFlagSet("uroce pcap "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.Bool("json", false, "JSON output, one object per line")
	var strict, quiet *bool
	switch args[0] {
	case "decode":
	case "verify":
		strict = fs.Bool("strict", false, "fail on flow anomalies too")
		quiet = fs.Bool("q", false, "print only the summary")
	case "help", "-h", "--help":
		fmt.Fprint(stdout, pcapUsage)
		return pcaptool.ExitOK
	default:
		fmt.Fprintf(stderr, "uroce pcap: unknown subcommand %q\n%s", args[0], pcapUsage)
		return pcaptool.ExitUsage
	}
	files, err := app.ParseArgs(fs, args[1:])
	if err == flag.ErrHelp {
		fmt.Fprint(stdout, pcapUsage)
		return pcaptool.ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "uroce pcap %s: %v\n%s", args[0], err, pcapUsage)
		return pcaptool.ExitUsage
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "uroce pcap %s: no capture file given\n%s", args[0], pcapUsage)
		return pcaptool.ExitUsage
	}
	if args[0] == "decode" {
		return pcaptool.RunDecode(stdout, stderr, files, *jsonOut)
	}
	return pcaptool.RunVerify(stdout, stderr, files, pcaptool.VerifyOptions{JSON: *jsonOut, Strict: *strict, Quiet: *quiet})
}
