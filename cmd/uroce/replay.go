package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/replay"
)

func init() {
	register(&command{name: "replay", summary: "play one side of a captured conversation at a live peer and compare its answers", run: runReplay})
}

const replayUsage = `usage: uroce replay [flags] CAPTURE

Takes one RC, UC or UD conversation from CAPTURE (the only one, or the one
with --qpn), plays one end's packets at a peer and checks the peer's live
answers against the recorded ones: opcode, PSN, AETH syndrome and MSN,
flags, lengths, READ and SEND payloads, atomic results. Every field that
differs between the recording and the live setup (MACs, IPs, QPNs, PSNs,
R_Key, VA) is rewritten and the ICRC recomputed.

The peer:
  --self               a uroce device in this process, set up as the
                       recorded peer was (its QP connected to the played
                       end, a region for the RDMA requests, receives
                       for the SENDs); no network, no privilege

flags:
  --list               list the capture's conversations and exit
  --qpn N              the conversation with QP N (at either end)
  --side a|b           play the end listed first (a) or second (b); by
                       default the end that sent the first request
  --pace step|fast|recorded
                       step: each packet after the answers recorded
                       before it (default); fast: requests back to back;
                       recorded: as step, keeping the recorded gaps
  --timeout D          how long to wait for each recorded answer (1s)
  --drop N,…  --dup N,…  --corrupt N,…  --reorder N,…  --delay N:D,…
                       faults on the played end's Nth packets (from 1):
                       not sent, sent twice, sent with a bad ICRC, sent
                       after the next one, sent D later
  --tolerate F,…       fields whose differences do not count: opcode,
                       psn, syndrome, msn, flags, length, payload,
                       atomic_orig, dest_qpn
  --json               the report as one JSON object
  -w FILE              write the replay's packets (both ways) as pcap

exit status: 0 when the live answers agree with the recording, 1 when they
differ (the report names each difference), 2 on bad usage or a capture
without a conversation to replay
`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uroce replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	list := fs.Bool("list", false, "")
	qpn := fs.String("qpn", "", "")
	side := fs.String("side", "", "")
	pace := fs.String("pace", "step", "")
	timeout := fs.Duration("timeout", time.Second, "")
	self := fs.Bool("self", false, "")
	drop := fs.String("drop", "", "")
	dup := fs.String("dup", "", "")
	corrupt := fs.String("corrupt", "", "")
	reorder := fs.String("reorder", "", "")
	delay := fs.String("delay", "", "")
	tolerate := fs.String("tolerate", "", "")
	jsonOut := fs.Bool("json", false, "")
	write := fs.String("w", "", "")
	files, err := app.ParseArgs(fs, args)
	if err == flag.ErrHelp {
		fmt.Fprint(stdout, replayUsage)
		return 0
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "uroce replay: "+format+"\n", a...)
		return 2
	}
	if err != nil {
		return bad("%v\n%s", err, replayUsage)
	}
	if len(files) != 1 {
		return bad("give one capture file\n%s", replayUsage)
	}
	f, err := os.Open(files[0])
	if err != nil {
		return bad("%v", err)
	}
	convs, st, err := replay.Load(f)
	f.Close()
	if err != nil {
		return bad("%s: %v (%d frames: %d RoCE, of which %d with a bad ICRC, %d RoCE v1, %d on QP1, %d CNPs; %d malformed, %d not RoCE)",
			files[0], err, st.Frames, st.RoCE, st.BadICRC, st.V1, st.QP1, st.CNP, st.Malformed, st.NotRoCE)
	}
	if *list {
		for _, c := range convs {
			fmt.Fprintln(stdout, c)
		}
		return 0
	}
	q := int64(-1)
	if *qpn != "" {
		v, err := strconv.ParseInt(*qpn, 0, 64)
		if err != nil {
			return bad("--qpn %q: %v", *qpn, err)
		}
		q = v
	}
	c, err := replay.Select(convs, q)
	if err != nil {
		return bad("%s: %v", files[0], err)
	}
	me := c.Initiator()
	switch *side {
	case "":
	case "a":
		me = 0
	case "b":
		me = 1
	default:
		return bad("--side %q: want a or b", *side)
	}
	opt := replay.Options{Timeout: *timeout, Tolerate: map[string]bool{}}
	if opt.Pace, err = replay.ParsePace(*pace); err != nil {
		return bad("%v", err)
	}
	for _, x := range []struct {
		s string
		m *map[int]bool
	}{{*drop, &opt.Faults.Drop}, {*dup, &opt.Faults.Dup}, {*corrupt, &opt.Faults.Corrupt}, {*reorder, &opt.Faults.Reorder}} {
		if *x.m, err = packetSet(x.s); err != nil {
			return bad("%v", err)
		}
	}
	if opt.Faults.Delay, err = delays(*delay); err != nil {
		return bad("%v", err)
	}
	for _, t := range strings.Split(*tolerate, ",") {
		if t != "" {
			opt.Tolerate[t] = true
		}
	}
	if !*self {
		return bad("no peer: give --self (a uroce peer in this process)\n%s", replayUsage)
	}
	sp, err := replay.NewSelfPeer(c, me)
	if err != nil {
		fmt.Fprintf(stderr, "uroce replay: the self peer: %v\n", err)
		return 1
	}
	defer sp.Close()
	opt.AnswersOnly = true // the self peer only responds
	s, err := replay.NewSession(c, me, sp.Live, opt)
	if err != nil {
		return bad("%v", err)
	}
	var tap func([]byte, bool)
	var pw *pcapgo.Writer
	if *write != "" {
		wf, err := os.Create(*write)
		if err != nil {
			return bad("%v", err)
		}
		defer wf.Close()
		pw = pcapgo.NewWriter(wf)
		if err := pw.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
			return bad("%s: %v", *write, err)
		}
		tap = func(b []byte, _ bool) {
			pw.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(b), Length: len(b)}, b)
		}
	}
	rep, err := replay.Run(ctx, s, sp.Link, tap)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "uroce replay: %v\n", err)
	}
	if *jsonOut {
		e := json.NewEncoder(stdout)
		e.Encode(rep)
	} else {
		rep.WriteText(stdout)
	}
	if err != nil || !rep.Agree {
		return 1
	}
	return 0
}

// packetSet parses "3,5-7".
func packetSet(s string) (map[int]bool, error) {
	m := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		lo, hi, rng := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && rng {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 1 || b < a {
			return nil, fmt.Errorf("packet list %q: want numbers from 1, such as 3,5-7", s)
		}
		for i := a; i <= b; i++ {
			m[i] = true
		}
	}
	return m, nil
}

// delays parses "3:200us,5:1ms".
func delays(s string) (map[int]time.Duration, error) {
	m := map[int]time.Duration{}
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, d, ok := strings.Cut(f, ":")
		i, err := strconv.Atoi(n)
		var dd time.Duration
		if err == nil && ok {
			dd, err = time.ParseDuration(d)
		}
		if err != nil || !ok || i < 1 || dd <= 0 {
			return nil, fmt.Errorf("--delay %q: want N:DURATION, such as 3:200us", s)
		}
		m[i] = dd
	}
	return m, nil
}
