package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/uroce/uroce/conform"
	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/replay"
)

func init() {
	register(&command{name: "conform", summary: "check a RoCE peer's transport rules with scripted scenarios", run: runConform})
}

const conformUsage = `usage: uroce conform [flags] [SCENARIOS.txt…] [PEER]

Runs transport scenarios against a peer, each checking one IBTA rule of an
RC responder (duplicates, PSN sequence errors, NAK codes, silent drops,
RNR), where uroce plays the requester packet by packet and checks each
answer, or of an RC requester (retries after the ACK timeout, ghost ACKs,
implied NAKs, the RNR timer), where uroce plays the responder.
The catalogue shipped with uroce runs unless files of scenarios are given
(the format is in the README, "Conformance scenarios").

The peer:
  --self            a uroce responder in this process, a fresh QP for each
                    scenario (default; no privilege, no network)
    --keep-past-gap the responder keeps the requests past a PSN gap, as
                    uroce's --keep-past-gap does (not the IBTA's rule)
  -d IFACE PEER     the RoCE peer at address PEER from interface IFACE
                    (root), its QP set up for each scenario by
    --perftest TOOL perftest's exchange with TOOL's server, which the
                    user runs again for each scenario (ib_write_bw,
                    ib_read_bw, ib_atomic_bw, ib_send_bw -s 64 or more);
                    a perftest server grants one kind of remote access,
                    so scenarios that need another are skipped, and
                    those that need receives need ib_send_bw
    --pingpong ud   the stock ibv_ud_pingpong's exchange with its server
                    (ibv_ud_pingpong -s 64 -n 1, run again for each
                    scenario): the UD scenarios, where the server's
                    answer to a datagram shows that it was received
    --conform-peer  conform_peer -S (conform/peer, a verbs program of
                    uroce's built with gcc -libverbs), run again for each
                    scenario with the command line printed on stderr
                    (its -r is the scenario's receives): its region
                    grants remote WRITEs, READs and atomics at once, its
                    receives are posted and their completions shown, so
                    it hosts every responder scenario but FLUSH's and
                    QP1's; the exchange is ibv_rc_pingpong's
    --port N        its TCP port (18515)
    --xdp-mode M    auto, native or generic
  -d IFACE [PEER] --serve
                    the scenarios where the peer is the requester: uroce
                    serves perftest's exchange on --port to the stock
                    client each scenario names (ib_write_bw, ib_read_bw
                    or ib_send_bw -n 5 -t 1 -s LEN, printed on stderr
                    while it waits; from PEER only, when given), plays
                    the responder as the scenario says and answers the
                    client's further messages; --perftest TOOL, when
                    given, keeps the scenarios TOOL's client makes
  -d IFACE [PEER] --serve-peer
                    the same with conform_peer (conform/peer, a verbs
                    program built with gcc -libverbs) as the client: it
                    posts all of a scenario's peer requests at once, so
                    it makes those no stock client makes (a WRITE and a
                    READ on one QP, UD sends with a chosen Q_Key); the
                    exchange is ibv_rc_pingpong's, on --port

flags:
  -k REGEX          only the scenarios whose names match
  --list            list the scenarios and exit
  --timeout D       how long each expected answer may take (1s)
  --json            one JSON object per scenario
  -w DIR            write a capture of each failing scenario to DIR/NAME.pcap

Output: one line per scenario, its name, PASS or FAIL, the IBTA section,
the rule and, for a failure, the line of the scenario that failed and what
came. Exit status: 0 when every scenario passed, 1 when one failed, 2 on
bad usage or a scenario file that does not parse.
`

func runConform(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uroce conform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("self", true, "")
	keep := fs.Bool("keep-past-gap", false, "")
	match := fs.String("k", "", "")
	list := fs.Bool("list", false, "")
	timeout := fs.Duration("timeout", time.Second, "")
	jsonOut := fs.Bool("json", false, "")
	dir := fs.String("w", "", "")
	serve := fs.Bool("serve", false, "")
	servePeer := fs.Bool("serve-peer", false, "")
	peerServer := fs.Bool("conform-peer", false, "")
	var pf peerFlags
	pf.register(fs)
	fs.StringVar(&pf.pingpong, "pingpong", "", "")
	files, err := app.ParseArgs(fs, args)
	if err == flag.ErrHelp {
		fmt.Fprint(stdout, conformUsage)
		return 0
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "uroce conform: "+format+"\n", a...)
		return 2
	}
	if err != nil {
		return bad("%v\n%s", err, conformUsage)
	}
	var peerIP netip.Addr
	var tool perftest.Tool = -1
	if *servePeer && *serve {
		return bad("--serve and --serve-peer: give one, who makes the peer's requests")
	}
	if *servePeer && pf.perfTool != "" {
		return bad("--serve-peer and --perftest: conform_peer speaks ibv_rc_pingpong's exchange, not perftest's")
	}
	if *servePeer {
		*serve = true
		if pf.dev == "" {
			return bad("--serve-peer needs -d IFACE")
		}
	}
	if *serve && pf.dev == "" {
		return bad("--serve needs -d IFACE")
	}
	if *serve {
		if len(files) > 0 {
			if a, err := netip.ParseAddr(files[len(files)-1]); err == nil {
				peerIP, files = a, files[:len(files)-1]
			}
		}
		if pf.perfTool != "" {
			if tool, err = parseTool(pf.perfTool); err != nil {
				return bad("%v", err)
			}
		}
	} else if pf.dev != "" {
		if len(files) == 0 {
			return bad("-d needs the peer's address\n%s", conformUsage)
		}
		if peerIP, err = netip.ParseAddr(files[len(files)-1]); err != nil {
			return bad("peer %q: not an IP address", files[len(files)-1])
		}
		files = files[:len(files)-1]
		ways := 0
		for _, b := range []bool{pf.pingpong != "", pf.perfTool != "", *peerServer} {
			if b {
				ways++
			}
		}
		switch {
		case pf.pingpong != "" && pf.pingpong != "ud":
			return bad("--pingpong %q: want ud (the stock ibv_ud_pingpong server)", pf.pingpong)
		case ways > 1:
			return bad("--perftest, --pingpong and --conform-peer: give one, how the peer's QP is set up")
		case ways == 0:
			return bad("-d needs --perftest TOOL, --pingpong ud or --conform-peer: how the peer's QP is set up")
		case pf.perfTool != "":
			if tool, err = parseTool(pf.perfTool); err != nil {
				return bad("%v", err)
			}
		}
	}
	var scs []*conform.Scenario
	if len(files) == 0 {
		if scs, err = conform.Catalogue(); err != nil {
			return bad("%v", err)
		}
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return bad("%v", err)
		}
		s, err := conform.Parse(f, name)
		f.Close()
		if err != nil {
			return bad("%v", err)
		}
		scs = append(scs, s...)
	}
	if *match != "" {
		re, err := regexp.Compile(*match)
		if err != nil {
			return bad("-k %q: %v", *match, err)
		}
		var keep []*conform.Scenario
		for _, s := range scs {
			if re.MatchString(s.Name) {
				keep = append(keep, s)
			}
		}
		scs = keep
	}
	if len(scs) == 0 {
		return bad("no scenario to run")
	}
	if *list {
		for _, s := range scs {
			fmt.Fprintf(stdout, "%-24s %-40s %s\n", s.Name, s.IBTA, s.Rule)
		}
		return 0
	}
	run := func(s *conform.Scenario, tap func([]byte, bool)) (conform.Result, error) {
		return conform.RunSelf(ctx, s, *timeout, tap, conform.SelfOptions{KeepPastGap: *keep})
	}
	if *keep && (*serve || pf.dev != "") {
		return bad("--keep-past-gap is for --self: a live peer's device has its own settings (uroce's: --keep-past-gap of uroce daemon and the tools)")
	}
	if *serve {
		sv := &server{ctx: ctx, pf: pf, peerIP: peerIP, tool: tool, timeout: *timeout, stderr: stderr, peerProgram: *servePeer}
		defer sv.Close()
		run = sv.run
	} else if pf.dev != "" {
		rp, err := openRawPeer(ctx, pf.dev, pf.xdpMode, peerIP)
		if err != nil {
			fmt.Fprintf(stderr, "uroce conform: %v\n", err)
			return 1
		}
		defer rp.Close()
		addr := pf.addr(peerIP)
		n := 0
		run = func(s *conform.Scenario, tap func([]byte, bool)) (conform.Result, error) {
			if pf.pingpong != "" {
				n++
				return runUDPingpong(ctx, rp, addr, s, n, *timeout, tap)
			}
			if *peerServer {
				n++
				return runConformPeer(ctx, rp, addr, s, n, *timeout, tap, stderr)
			}
			res := conform.Result{Name: s.Name, Rule: s.Rule, IBTA: s.IBTA}
			if why := perftestSkips(s, tool); why != "" {
				res.Skipped = why
				return res, nil
			}
			n++
			const psn = 0xfffffa
			local := rp.local
			local.QPN = uint32(0x100 + n) // a QPN of its own: late packets of an earlier scenario are not its
			err := perftestClient(ctx, addr, tool, perftest.MTU1024,
				perftest.Dest{QPN: local.QPN, PSN: psn, GID: local.IP.As16(), OutReads: 16},
				func(r perftest.Dest) error {
					peer := rp.peer
					peer.QPN = r.QPN
					cr := conform.NewRun(s, conform.Env{Local: local, Peer: peer, PSN: psn, RKey: r.RKey, VA: r.VAddr,
						Region: 4096, Timeout: *timeout})
					err := replay.Drive(ctx, cr, rp.raw.Link, tap)
					res = cr.Result()
					return err
				}, func(err error) { fmt.Fprintf(stderr, "uroce conform: %s: %v\n", s.Name, err) })
			return res, err
		}
	}
	failed, skipped := 0, 0
	enc := json.NewEncoder(stdout)
	for _, s := range scs {
		var rec recorder
		r, err := run(s, rec.tap)
		if err != nil {
			fmt.Fprintf(stderr, "uroce conform: %s: %v\n", s.Name, err)
			return 1
		}
		if r.Skipped != "" {
			skipped++
		} else if !r.Pass {
			failed++
			if *dir != "" {
				if err := rec.write(filepath.Join(*dir, s.Name+".pcap")); err != nil {
					fmt.Fprintf(stderr, "uroce conform: %v\n", err)
				}
			}
		}
		if *jsonOut {
			enc.Encode(r)
			continue
		}
		res := "PASS"
		switch {
		case r.Skipped != "":
			res = "SKIP"
		case !r.Pass:
			res = "FAIL"
		}
		fmt.Fprintf(stdout, "%-24s %s  %-40s %s\n", r.Name, res, r.IBTA, r.Rule)
		switch {
		case r.Skipped != "":
			fmt.Fprintf(stdout, "%24s       %s\n", "", r.Skipped)
		case !r.Pass:
			fmt.Fprintf(stdout, "%24s       %s\n", "", r.Reason)
		}
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "%d scenarios, %d passed, %d failed, %d skipped\n", len(scs), len(scs)-failed-skipped, failed, skipped)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// perftestSkips says why s cannot run against tool's server, if it
// cannot: a perftest server's region grants the remote access of its
// verb only, and only ib_send_bw posts receives.
func perftestSkips(s *conform.Scenario, tool perftest.Tool) string {
	n := s.Needs()
	verb := tool.Verb()
	switch {
	case n.Peer:
		return "the peer is the requester: run it with --serve and the stock client it names"
	case n.Delivered:
		return "checks the peer's receive completions: only --self shows them"
	case n.UD:
		return "needs a UD QP: perftest's exchange sets up RC ones"
	case n.Flush:
		return "needs the flush rights, which no perftest server grants"
	case n.Write && verb != perftest.Write, n.Read && verb != perftest.Read, n.Atomic && verb != perftest.Atomic:
		return fmt.Sprintf("needs remote access %s does not grant (its region allows %s only)", tool,
			map[perftest.Verb]string{perftest.Send: "SENDs", perftest.Write: "remote writes", perftest.Read: "remote reads", perftest.Atomic: "remote atomics"}[verb])
	case s.Receives > 0 && tool != perftest.SendBW:
		return fmt.Sprintf("needs receives posted: run it against ib_send_bw, not %s", tool)
	case s.Receives < 0 && tool == perftest.SendBW:
		return "needs a QP without receives: ib_send_bw posts them"
	}
	return ""
}
