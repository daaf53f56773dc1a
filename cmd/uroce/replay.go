package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/app"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/replay"
	"github.com/uroce/uroce/stack"
)

func init() {
	register(&command{name: "replay", summary: "play one side of a captured conversation at a live peer and compare its answers", run: runReplay})
}

const replayUsage = `usage: uroce replay [flags] CAPTURE [PEER]

Takes one RC, UC or UD conversation from CAPTURE (the only one, or the one
with --qpn), plays one end's packets at a peer and checks the peer's live
answers against the recorded ones: opcode, PSN, AETH syndrome and MSN,
flags, lengths, READ and SEND payloads, atomic results. Every field that
differs between the recording and the live setup (MACs, IPs, QPNs, PSNs,
R_Key, VA) is rewritten and the ICRC recomputed; so are the buffers that
rping and perftest -R name in their SENDs, the peer's learnt from its
own (--list names such conversations).

The peer:
  --self               a uroce device in this process, set up as the
                       recorded peer was (its QP connected to the played
                       end, a region for the RDMA requests, receives
                       for the SENDs); no network, no privilege
  -d IFACE PEER        the RoCE peer at address PEER, from interface
                       IFACE (root: AF_XDP); its QP is set up by
    --perftest TOOL    the perftest exchange with TOOL (ib_write_bw,
                       ib_read_bw, ib_send_bw, ib_atomic_bw, ib_*_lat)
                       running as server on PEER, started with the
                       recorded run's flags (-n, -s; -x for the GID)
    --pingpong         the exchange of ibv_rc/uc/ud_pingpong running as
                       server on PEER, with the recorded run's flags
      --srq            ibv_srq_pingpong's (256 address messages, one per
                       QP slot): every RC conversation of the capture
                       between the two ends is played at once, one
                       report each (the server run with the recorded -q)
    --rdma-cm PORT     RDMA CM (REQ, REP, RTU on QP1, as an rdma_cm
                       client) with a listener on PORT of PEER (a
                       ucmatose, rping or perftest -R server started
                       with the recorded flags); the connection is
                       released (DREQ) after. A conversation whose
                       buffers another one advertises (perftest -R's
                       test QP: --qpn it) is played with that one, each
                       on its own connection, in the recorded order.
                       With --side naming the end that received the
                       recorded REQ, the replay listens on PORT instead,
                       as that server did, for a client on PEER (such as
                       rping -c or ucmatose -s, with the recorded flags),
                       accepts its REQ (REP; its first packet before the
                       RTU counts as the RTU) and plays the server's
                       part; one conversation only
    --wait D           how long the listening end waits for the REQ (60s)
    --dest-qpn N       or by hand: the peer QP's number, with
    [--psn N]          the first PSN it expects (default: as recorded),
    [--peer-psn N]     its own first PSN (default: from its first request),
    [--rkey K --va V]  and the region this end's RDMA requests name
    --port N           the exchange's TCP port (18515)
    --xdp-mode M       auto, native or generic

flags:
  --list               list the capture's conversations and exit
  --qpn N              the conversation with QP N (at either end)
  --side a|b           play the end listed first (a) or second (b); by
                       default the end that sent the first request (with
                       --perftest or --pingpong: the end that opened the
                       exchange's TCP connection, when the capture has it)
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
                       atomic_orig, dest_qpn, rkey, va; resent leaves
                       out the live peer's requests at PSNs it sent
                       already (its own retransmissions; on with --self)
  --json               the report as one JSON object
  -w FILE              write the replay's packets (both ways) as pcap

exit status: 0 when the live answers agree with the recording, 1 when they
differ (the report names each difference) or the replay could not be
played to its end (a peer that cannot be reached or set up: the message
says what went wrong), 2 on bad usage or a capture without a conversation
to replay
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
	var pf peerFlags
	pf.register(fs)
	pp := fs.Bool("pingpong", false, "")
	srq := fs.Bool("srq", false, "")
	cmPort := fs.Int("rdma-cm", 0, "")
	listenWait := fs.Duration("wait", 60*time.Second, "")
	destQPN := fs.String("dest-qpn", "", "")
	psn := fs.String("psn", "", "")
	peerPSN := fs.String("peer-psn", "", "")
	rkey := fs.String("rkey", "", "")
	va := fs.String("va", "", "")
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
	if len(files) < 1 || len(files) > 2 || (len(files) == 2) != (pf.dev != "") {
		return bad("give one capture file, and with -d the peer's address\n%s", replayUsage)
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
	if *srq && q < 0 && len(convs) > 0 {
		q = int64(convs[0].Ends[0].QPN) // every QP's conversation plays: any names them
	}
	c, err := replay.Select(convs, q)
	if err != nil {
		return bad("%s: %v", files[0], err)
	}
	me := c.Initiator()
	if (pf.perfTool != "" || *pp) && c.Client >= 0 {
		me = c.Client // the exchange makes this end its client
	}
	if *cmPort > 0 && c.CMClient >= 0 {
		me = c.CMClient // the end that sent the REQ
	}
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
	if *self == (pf.dev != "") {
		return bad("give the peer: --self (a uroce peer in this process) or -d IFACE PEER\n%s", replayUsage)
	}
	var rec recorder
	var tap func([]byte, bool)
	if *write != "" {
		tap = rec.tap
	}
	var link stack.Link
	var live replay.Live
	var establish func(play func(replay.Live) error) error // runs play inside the peer's exchange
	var staged func() ([]*replay.Report, error)            // plays several conversations
	parts := append(replay.Related(convs, c), c)
	if *self {
		sp, err := replay.NewSelfPeer(c, me)
		if err != nil {
			fmt.Fprintf(stderr, "uroce replay: the self peer: %v\n", err)
			return 1
		}
		defer sp.Close()
		opt.AnswersOnly = true // the self peer only responds,
		if c.Adverts != replay.AdvertNone {
			opt.PeerSend = sp.PeerSend // but for its SENDs, which name its buffers
			// Its timers are its own: a SEND it resends because this
			// end's step pace was slow is no answer.
			opt.Tolerate["resent"] = true
		}
		link, live = sp.Link, sp.Live
	} else {
		peer, err := netip.ParseAddr(files[1])
		if err != nil {
			return bad("peer %q: not an IP address", files[1])
		}
		nums := map[string]int64{}
		for name, v := range map[string]string{"dest-qpn": *destQPN, "psn": *psn, "peer-psn": *peerPSN, "rkey": *rkey, "va": *va} {
			nums[name] = -1
			if v != "" {
				n, err := strconv.ParseUint(v, 0, 64)
				if err != nil {
					return bad("--%s %q: %v", name, v, err)
				}
				nums[name] = int64(n)
			}
		}
		ways := 0
		if *cmPort < 0 || *cmPort > 65535 {
			return bad("--rdma-cm %d: want a port", *cmPort)
		}
		for _, b := range []bool{pf.perfTool != "", *pp, nums["dest-qpn"] >= 0, *cmPort > 0} {
			if b {
				ways++
			}
		}
		if ways != 1 {
			return bad("set the peer's QP up one way: --perftest TOOL, --pingpong, --rdma-cm PORT or --dest-qpn N\n%s", replayUsage)
		}
		if *srq && !*pp {
			return bad("--srq goes with --pingpong: ibv_srq_pingpong's exchange")
		}
		// The end that received the recorded REQ plays as a listener.
		listening := *cmPort > 0 && c.CMClient >= 0 && me != c.CMClient
		if listening {
			if len(parts) > 1 {
				return bad("--rdma-cm with --side %s: the listening end of several conversations (%d, as perftest -R's) cannot be played; play the end that sent the REQ",
					*side, len(parts))
			}
			if *listenWait <= 0 {
				return bad("--wait %v: want a positive duration", *listenWait)
			}
		}
		var tool perftest.Tool = -1
		if pf.perfTool != "" {
			if tool, err = parseTool(pf.perfTool); err != nil {
				return bad("%v", err)
			}
		}
		rp, err := openRawPeer(ctx, pf.dev, pf.xdpMode, peer)
		if err != nil {
			fmt.Fprintf(stderr, "uroce replay: %v\n", err)
			return 1
		}
		defer rp.Close()
		link = rp.raw.Link
		local, mac := rp.local.IP, rp.peer.MAC
		rec, peerRec := c.Recorded(me), c.Recorded(1-me)
		live = replay.Live{Local: replay.Endpoint{MAC: rp.local.MAC, IP: local, QPN: rec.QPN}, Peer: replay.Endpoint{MAC: mac, IP: peer},
			LocalPSN: -1, PeerPSN: nums["peer-psn"], RKey: nums["rkey"]}
		if nums["psn"] >= 0 {
			live.LocalPSN = nums["psn"]
		}
		if nums["va"] >= 0 {
			live.VA, live.VASet = uint64(nums["va"]), true
		}
		gid := local.As16()
		addr := pf.addr(peer)
		switch {
		case tool >= 0:
			establish = func(play func(replay.Live) error) error {
				mtu := perftest.MTUFromBytes(peerRec.PMTU)
				if mtu == 0 {
					mtu = perftest.MTUFromBytes(rec.PMTU)
				}
				return perftestClient(ctx, addr, tool, mtu,
					perftest.Dest{QPN: rec.QPN, PSN: uint32(rec.PSN), RKey: rec.RKey, VAddr: rec.VA, GID: gid, OutReads: 16},
					func(r perftest.Dest) error {
						live.Peer.QPN, live.PeerPSN, live.RKey = r.QPN, int64(r.PSN), int64(r.RKey)
						live.VA, live.VASet = r.VAddr, true
						return play(live)
					}, func(err error) { fmt.Fprintf(stderr, "uroce replay: %v\n", err) })
			}
		case *pp && *srq:
			all := srqParts(convs, c, me)
			staged = func() ([]*replay.Report, error) {
				return replaySRQ(ctx, addr, all, c.Ends[me].IP, gid, live, link, tap, opt)
			}
		case *pp:
			establish = func(play func(replay.Live) error) error {
				nc, err := dialExchange(ctx, addr, "the pingpong server")
				if err != nil {
					return err
				}
				defer nc.Close()
				ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
				remote, err := pingpong.Client(ectx, nc, []pingpong.Dest{{QPN: rec.QPN, PSN: uint32(rec.PSN), GID: gid}}, 1)
				cancel()
				if err != nil {
					return err
				}
				live.Peer.QPN, live.PeerPSN = remote[0].QPN, int64(remote[0].PSN)
				return play(live)
			}
		case listening:
			// The end that received the REQ: listen as it did.
			staged = func() ([]*replay.Report, error) {
				fmt.Fprintf(stderr, "uroce replay: listening on RDMA CM port %d for %v\n", *cmPort, peer)
				return replayListening(ctx, c, me, live, link, tap, uint16(*cmPort), peerRec.PSN, *listenWait, opt)
			}
		case *cmPort > 0 && len(parts) > 1:
			// The conversation's buffers are named in another one's
			// SENDs (perftest -R): play them all, in the recorded order.
			staged = func() ([]*replay.Report, error) {
				return replayStaged(ctx, parts, live, link, tap, uint16(*cmPort), opt)
			}
		case *cmPort > 0:
			establish = func(play func(replay.Live) error) error {
				cmc, err := connectCM(ctx, live, uint16(*cmPort), peerRec.PSN, cmMTU(rec, peerRec), link, tap)
				if err != nil {
					return err
				}
				perr := play(cmc.Live())
				disconnectCM(ctx, cmc, link, tap)
				return perr
			}
		default:
			live.Peer.QPN = uint32(nums["dest-qpn"])
		}
	}
	if establish == nil {
		establish = func(play func(replay.Live) error) error { return play(live) }
	}
	var reps []*replay.Report
	if staged != nil {
		reps, err = staged()
	} else {
		err = establish(func(live replay.Live) error {
			s, err := replay.NewSession(c, me, live, opt)
			if err != nil {
				return err
			}
			rep, err := replay.Run(ctx, s, link, tap)
			reps = append(reps, rep)
			return err
		})
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "uroce replay: %v\n", err)
	}
	if *write != "" {
		if werr := rec.write(*write); werr != nil {
			fmt.Fprintf(stderr, "uroce replay: %v\n", werr)
		}
	}
	if len(reps) == 0 {
		return 1
	}
	agree := true
	for i, rep := range reps {
		if *jsonOut {
			json.NewEncoder(stdout).Encode(rep)
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			rep.WriteText(stdout)
		}
		agree = agree && rep.Agree
	}
	if err != nil || !agree {
		return 1
	}
	return 0
}

// cmMTU is the path MTU a connection asks for: what the recorded
// packets show, at least 1024.
func cmMTU(rec, peerRec replay.Recorded) stack.MTU {
	mtu := stack.MTU1024
	for mtu < stack.MTU4096 && mtu.Bytes() < max(rec.PMTU, peerRec.PMTU) {
		mtu++
	}
	return mtu
}

// connectCM connects live.Local's QP to the RDMA CM listener on port of
// live.Peer. As rdma_cm clients are used, it connects again while the
// server does not listen yet, for a few seconds.
func connectCM(ctx context.Context, live replay.Live, port uint16, psn bth.PSN, mtu stack.MTU, link stack.Link, tap func([]byte, bool)) (*replay.CM, error) {
	for deadline := time.Now().Add(5 * time.Second); ; {
		cmc, err := replay.NewCM(live, port, psn, mtu)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = replay.Drive(cctx, cmc, link, tap)
		cancel()
		if err == nil {
			err = cmc.Err()
		}
		var rej *replay.RejectError
		if errors.As(err, &rej) && rej.Reason == mad.RejInvalidServiceID && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rdma cm with %v port %d: %w", live.Peer.IP, port, err)
		}
		return cmc, nil
	}
}

// disconnectCM releases a connection (DREQ, DREP: a peer already gone
// does not answer).
func disconnectCM(ctx context.Context, cmc *replay.CM, link stack.Link, tap func([]byte, bool)) {
	cmc.Disconnect()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	replay.Drive(dctx, cmc, link, tap)
	cancel()
}

// replayListening plays end me of c, the end that received the
// recorded REQ, as an rdma_cm server: it accepts the live peer's
// connection to port (its REP's starting PSN psn, the first of the
// peer's requests), plays the conversation on the frames that follow,
// and releases the connection.
func replayListening(ctx context.Context, c *replay.Conversation, me int, live replay.Live, link stack.Link, tap func([]byte, bool),
	port uint16, psn bth.PSN, wait time.Duration, opt replay.Options) ([]*replay.Report, error) {
	l := replay.ListenCM(live, port, psn, wait)
	var s *replay.Session
	p := replay.Then(l, func() (replay.Player, error) {
		var err error
		s, err = replay.NewSession(c, me, l.Live(), opt)
		return s, err
	})
	err := replay.Drive(ctx, p, link, tap)
	if err == nil {
		err = p.Err()
	}
	if s == nil {
		if err == nil {
			err = errors.New("no connection")
		}
		return nil, fmt.Errorf("rdma cm on port %d: %w", port, err)
	}
	// The client disconnects when its run ends, as the recorded one
	// did (a DREQ of this end's before it could cut its last message
	// short); a client that does not is disconnected.
	wctx, cancel := context.WithTimeout(ctx, max(opt.Timeout, 2*time.Second))
	replay.Drive(wctx, l.Closing(), link, tap)
	cancel()
	if !l.Closed() {
		disconnectCM(ctx, l, link, tap)
	}
	return []*replay.Report{s.Report()}, err
}

// srqParts returns the RC conversations of the capture between the two
// ends of c (ibv_srq_pingpong's QPs), ordered by the QPN of the end at
// c's end me's address: the order of the stock client's address
// messages (its QPs as it created them).
func srqParts(convs []*replay.Conversation, c *replay.Conversation, me int) []*replay.Conversation {
	ip, peer := c.Ends[me].IP, c.Ends[1-me].IP
	var out []*replay.Conversation
	for _, x := range convs {
		if x.Transport != bth.TransportRC {
			continue
		}
		if (x.Ends[0].IP == ip && x.Ends[1].IP == peer) || (x.Ends[1].IP == ip && x.Ends[0].IP == peer) {
			out = append(out, x)
		}
	}
	qpn := func(x *replay.Conversation) uint32 {
		if x.Ends[0].IP == ip {
			return x.Ends[0].QPN
		}
		return x.Ends[1].QPN
	}
	sort.Slice(out, func(i, j int) bool { return qpn(out[i]) < qpn(out[j]) })
	return out
}

// replaySRQ plays the end at ip of every conversation in parts at the
// ibv_srq_pingpong server at addr: one address message per conversation
// (the recorded QPN and first PSN), padded to the tool's 256, the
// server's i-th answer for the i-th conversation, all played at once.
func replaySRQ(ctx context.Context, addr string, parts []*replay.Conversation, ip netip.Addr, gid [16]byte, base replay.Live,
	link stack.Link, tap func([]byte, bool), opt replay.Options) ([]*replay.Report, error) {
	if len(parts) > pingpong.SRQMessages {
		return nil, fmt.Errorf("%d conversations: ibv_srq_pingpong has %d QP slots", len(parts), pingpong.SRQMessages)
	}
	mes := make([]int, len(parts))
	dests := make([]pingpong.Dest, len(parts))
	for i, c := range parts {
		if c.Ends[1].IP == ip {
			mes[i] = 1
		}
		rec := c.Recorded(mes[i])
		dests[i] = pingpong.Dest{QPN: rec.QPN, PSN: uint32(rec.PSN), GID: gid}
	}
	nc, err := dialExchange(ctx, addr, "the ibv_srq_pingpong server")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	remote, err := pingpong.Client(ectx, nc, dests, pingpong.SRQMessages)
	cancel()
	if err != nil {
		return nil, err
	}
	g := &replay.Group{}
	for i, c := range parts {
		live := base
		live.Local.QPN = dests[i].QPN
		live.Peer.QPN, live.PeerPSN = remote[i].QPN, int64(remote[i].PSN)
		s, err := replay.NewSession(c, mes[i], live, opt)
		if err != nil {
			return nil, err
		}
		g.Sessions = append(g.Sessions, s)
	}
	err = replay.Drive(ctx, g, link, tap)
	var reps []*replay.Report
	for _, s := range g.Sessions {
		reps = append(reps, s.Report())
	}
	return reps, err
}

// replayStaged plays several conversations of one capture at the peer
// (perftest -R's exchange and test conversations), each on a connection
// of its own made at its recorded REQ, in the recorded order
// (replay.Stages): a conversation's session starts with the buffers the
// others learnt from the peer's adverts. It returns a report per
// conversation.
func replayStaged(ctx context.Context, parts []*replay.Conversation, base replay.Live, link stack.Link, tap func([]byte, bool),
	port uint16, opt replay.Options) ([]*replay.Report, error) {
	g := &replay.Group{}
	sess := make([]*replay.Session, len(parts))
	cms := make([]*replay.CM, len(parts))
	defer func() { // the last connection made is released first
		for i := len(cms) - 1; i >= 0; i-- {
			if cms[i] != nil {
				disconnectCM(ctx, cms[i], link, tap)
			}
		}
	}()
	reports := func() []*replay.Report {
		var r []*replay.Report
		for _, s := range sess {
			if s != nil {
				r = append(r, s.Report())
			}
		}
		return r
	}
	mes := make([]int, len(parts))
	for k, c := range parts {
		if c.CMClient < 0 {
			return nil, fmt.Errorf("%v: the capture has no RDMA CM request for it", c)
		}
		mes[k] = c.CMClient
		if c.Ends[mes[k]].IP != parts[len(parts)-1].Ends[parts[len(parts)-1].CMClient].IP {
			return nil, fmt.Errorf("%v: its requests come from another address", c)
		}
	}
	stages := replay.Stages(parts)
	for i, b := range stages {
		next := 0
		if i+1 < len(stages) {
			next = stages[i+1]
		}
		for k, c := range parts {
			rec, peerRec := c.Recorded(mes[k]), c.Recorded(1-mes[k])
			if c.CMFrame == b {
				live := base
				live.Local.QPN = rec.QPN
				cmc, err := connectCM(ctx, live, port, peerRec.PSN, cmMTU(rec, peerRec), link, tap)
				if err != nil {
					return reports(), err
				}
				cms[k] = cmc
			}
			if c.Packets[0].Frame == b {
				live := cms[k].Live()
				for _, s := range sess {
					if s != nil {
						live.Regions = append(live.Regions, s.Learnt()...)
					}
				}
				s, err := replay.NewSession(c, mes[k], live, opt)
				if err != nil {
					return reports(), err
				}
				sess[k] = s
				g.Sessions = append(g.Sessions, s)
			}
		}
		for _, s := range g.Sessions {
			s.Limit(next)
		}
		if err := replay.Drive(ctx, g, link, tap); err != nil {
			return reports(), err
		}
	}
	return reports(), nil
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
