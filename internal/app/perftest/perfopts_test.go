package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	pt "github.com/uroce/uroce/internal/oob/perftest"
)

// latDurLineRE is a latency tool's duration-mode line
// (REPORT_FMT_LAT_DUR).
var latDurLineRE = regexp.MustCompile(`^ (\d+) +(\d+) +(\d+\.\d\d) +(\d+\.\d\d) *$`)

// lines returns the result lines under header in a tool's output,
// checking that each matches re and that the rule closes them.
func lines(t *testing.T, who, out, header string, re *regexp.Regexp) []string {
	t.Helper()
	i := strings.Index(out, pt.ResultLine+header)
	if i < 0 {
		t.Fatalf("%s: no result header %q in:\n%s", who, header, out)
	}
	body := out[i+len(pt.ResultLine+header):]
	if !strings.HasSuffix(body, pt.ResultLine) {
		t.Fatalf("%s: output does not end with the rule:\n%s", who, out)
	}
	var ls []string
	for _, l := range strings.Split(strings.TrimSuffix(strings.TrimSuffix(body, pt.ResultLine), "\n"), "\n") {
		if l == "" {
			continue
		}
		if !re.MatchString(l) {
			t.Errorf("%s: result line %q does not match %s", who, l, re)
		}
		ls = append(ls, l)
	}
	return ls
}

// runOK runs srv and cli on a new pair of the given link MTU and fails
// the test unless both succeed.
func runOK(t *testing.T, linkMTU int, srv, cli Config) (s, c *side) {
	t.Helper()
	p := apptest.NewPair(t, linkMTU, nil)
	srv.GIDIndex, cli.GIDIndex = AutoGID, AutoGID
	s, c = runPair(t, p, srv, cli)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v (%s), client: %v (%s)\nserver output:\n%s\nclient output:\n%s",
			s.err, s.log.String(), c.err, c.log.String(), s.out.String(), c.out.String())
	}
	return s, c
}

// TestUD runs ib_send_bw and ib_send_lat over UD QPs (-c UD) on uroce at
// both ends: the sizes are cut to the MTU where perftest cuts them, and
// the messages land after the GRH's 40 bytes, on a cache line.
func TestUD(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		linkMTU int
		sizes   []uint64 // of the result lines
		cut     bool     // the size is cut to the MTU, saying so
	}{
		{"bw-default-size", Config{Tool: pt.SendBW, Iters: 300}, 1500, []uint64{1024}, true},
		{"bw-small", Config{Tool: pt.SendBW, Size: 13, Iters: 500}, 1500, []uint64{13}, false},
		{"bw-mtu-4096", Config{Tool: pt.SendBW, Size: 4096, Iters: 200, QPs: 2}, 9000, []uint64{4096}, false},
		{"bw-half-cycle", Config{Tool: pt.SendBW, Size: 2048, Iters: 100}, 9000, []uint64{2048}, false},
		{"bw-all", Config{Tool: pt.SendBW, Iters: 20, All: true}, 1500, []uint64{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, true},
		{"lat", Config{Tool: pt.SendLat, Size: 100, Iters: 100}, 1500, []uint64{100}, false},
		{"lat-mtu", Config{Tool: pt.SendLat, Size: 1024, Iters: 50}, 1500, []uint64{1024}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.UD = true
			var srvSess, cliSess *session
			testHook = func(s *session) {
				if s.cfg.Client {
					cliSess = s
				} else {
					srvSess = s
				}
			}
			defer func() { testHook = nil }()
			s, c := runOK(t, tc.linkMTU, cfg, cfg)
			lat := !cfg.Tool.BW()
			for _, sd := range []struct {
				who string
				sd  *side
			}{{"server", s}, {"client", c}} {
				out := sd.sd.out.String()
				ls := results(t, sd.who, out, cfg.Tool, lat)
				if len(ls) != len(tc.sizes) {
					t.Fatalf("%s: %d result lines, want %d", sd.who, len(ls), len(tc.sizes))
				}
				for i, l := range ls {
					iters := cfg.Iters * max(cfg.QPs, 1)
					if lat {
						iters = cfg.Iters
					}
					if f := strings.Fields(l); f[0] != fmt.Sprint(tc.sizes[i]) || f[1] != fmt.Sprint(iters) {
						t.Errorf("%s: line %q: want %d bytes, %d iterations", sd.who, l, tc.sizes[i], iters)
					}
				}
				if !strings.Contains(out, " Connection type : UD\t\t") {
					t.Errorf("%s: not UD:\n%s", sd.who, out)
				}
				said := strings.Contains(sd.sd.log.String(), " Max msg size in UD is MTU ")
				if said != tc.cut {
					t.Errorf("%s: said the size was cut: %v, want %v (%q)", sd.who, said, tc.cut, sd.sd.log.String())
				}
			}
			if cfg.Tool == pt.SendBW && !cfg.All {
				if !strings.Contains(s.out.String(), fmt.Sprintf(" RX depth        : %d\n", cfg.Iters)) {
					t.Errorf("UD server: rx depth not the iterations:\n%s", s.out.String())
				}
				if !strings.Contains(s.out.String(), " CQ Moderation   : 100\n") {
					t.Errorf("UD: CQ moderation not kept for the default size:\n%s", s.out.String())
				}
			}
			// The server's first receive holds the GRH, then the
			// client's first message at the next cache line. The
			// GRH of a neighbouring receive may cover the last 40
			// bytes of a message, as with perftest's layout.
			size := tc.sizes[len(tc.sizes)-1]
			if size > udAddition {
				size -= udAddition
			}
			recv := srvSess.recvBase(0) - srvSess.mr.Addr()
			if recv%uint64(srvSess.cacheLine) != uint64(srvSess.cacheLine)-udAddition {
				t.Errorf("receive at offset %d: not 40 bytes short of a cache line", recv)
			}
			if lat {
				// Both sides send from and receive into the same
				// place every time.
				recv = cliSess.recvBase(0) - cliSess.mr.Addr()
				if !bytes.Equal(cliSess.buf[recv+udAddition:recv+udAddition+size], srvSess.buf[:size]) {
					t.Error("the server's message did not land after the client's GRH")
				}
				return
			}
			if !cfg.All && !bytes.Equal(srvSess.buf[recv+udAddition:recv+udAddition+size], cliSess.buf[:size]) {
				t.Error("the client's first message did not land after the server's GRH")
			}
		})
	}
}

// TestUDSizeRefused: over UD a -s larger than the MTU is refused after
// the MTU exchange, on both sides, with perftest's message.
func TestUDSizeRefused(t *testing.T) {
	p := apptest.NewPair(t, 1500, nil)
	cfg := Config{Tool: pt.SendBW, Size: 2000, Iters: 10, UD: true, GIDIndex: AutoGID}
	s, c := runPair(t, p, cfg, cfg)
	for _, sd := range []*side{s, c} {
		if sd.err == nil || !strings.Contains(sd.log.String(), " Max message size in UD cannot be greater than MTU \n") {
			t.Errorf("err %v, log %q: want the size refused", sd.err, sd.log.String())
		}
		if strings.Contains(sd.out.String(), "Connection type") {
			t.Errorf("test information printed before the refusal:\n%s", sd.out.String())
		}
	}
}

// checkDuplex checks both sides' -b lines: each prints its own
// iterations and both sides' rates summed, per run.
func checkDuplex(t *testing.T, s, c *side, sizes []uint64, iters int) {
	t.Helper()
	for _, sd := range []struct {
		who         string
		me, peer    *side
		linesWanted int
	}{{"server", s, c, len(sizes)}, {"client", c, s, len(sizes)}} {
		out := sd.me.out.String()
		if !strings.Contains(out, " Bidirectional BW Test\n") || !strings.Contains(out, " TX depth        : ") {
			t.Errorf("%s: no bidirectional test information:\n%s", sd.who, out)
		}
		ls := lines(t, sd.who, out, pt.BWHeader(false), bwLineRE)
		if len(ls) != sd.linesWanted || len(sd.me.res.Reports) != len(sizes) || len(sd.me.res.RemoteReports) != len(sizes) {
			t.Fatalf("%s: %d lines, %d reports, %d remote reports; want %d runs", sd.who, len(ls), len(sd.me.res.Reports),
				len(sd.me.res.RemoteReports), len(sizes))
		}
		for i, l := range ls {
			mine, theirs := sd.me.res.Reports[i], sd.peer.res.Reports[i]
			if sd.me.res.RemoteReports[i] != theirs {
				t.Errorf("%s: run %d: the peer's report %+v, it made %+v", sd.who, i, sd.me.res.RemoteReports[i], theirs)
			}
			m := bwLineRE.FindStringSubmatch(l)
			avg, _ := strconv.ParseFloat(m[4], 64)
			if m[1] != fmt.Sprint(sizes[i]) || m[2] != fmt.Sprint(mine.Iters) || math.Abs(avg-(mine.BWAvg+theirs.BWAvg)) > 0.006 {
				t.Errorf("%s: line %q: want %d bytes, %d iterations, %.2f MB/s (%.2f + %.2f)", sd.who, l, sizes[i], mine.Iters,
					mine.BWAvg+theirs.BWAvg, mine.BWAvg, theirs.BWAvg)
			}
			if iters > 0 && mine.Iters != uint64(iters) {
				t.Errorf("%s: run %d: %d iterations, want %d", sd.who, i, mine.Iters, iters)
			}
			if mine.BWAvg <= 0 || theirs.BWAvg <= 0 {
				t.Errorf("%s: run %d: rates %v and %v", sd.who, i, mine.BWAvg, theirs.BWAvg)
			}
		}
	}
}

// TestBidirectional runs the bandwidth tools with -b: both sides send
// (write, read, atomics, send, also over UD, with -a and with -D) and
// each prints its own iterations with both sides' rates.
func TestBidirectional(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"write", Config{Tool: pt.WriteBW, Size: 4096, Iters: 300}},
		{"write-qps", Config{Tool: pt.WriteBW, Size: 100, Iters: 400, QPs: 3}},
		{"read", Config{Tool: pt.ReadBW, Size: 8192, Iters: 100}},
		{"atomic", Config{Tool: pt.AtomicBW, Iters: 200, Verify: true}},
		{"send", Config{Tool: pt.SendBW, Size: 4096, Iters: 300}},
		{"send-qps", Config{Tool: pt.SendBW, Size: 64, Iters: 1000, QPs: 2}},
		{"send-ud", Config{Tool: pt.SendBW, Size: 1000, Iters: 300, UD: true}},
		{"write-all", Config{Tool: pt.WriteBW, Iters: 5, All: true}},
		{"send-all", Config{Tool: pt.SendBW, Iters: 5, All: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Duplex = true
			mtu := 1500
			if cfg.All {
				mtu = 9000
			}
			s, c := runOK(t, mtu, cfg, cfg)
			sizes := []uint64{cfg.Size}
			switch {
			case cfg.All:
				sizes = pt.AllSizes()
			case cfg.Tool == pt.AtomicBW:
				sizes = []uint64{DefaultSizeAtomic}
			}
			checkDuplex(t, s, c, sizes, cfg.Iters*max(cfg.QPs, 1))
			if cfg.Verify {
				for _, sd := range []*side{s, c} {
					if !strings.Contains(sd.log.String(), "each exactly once") {
						t.Errorf("no atomic check: %q", sd.log.String())
					}
				}
			}
		})
	}
}

// TestBidirectionalDuration: -b with -D. ib_write_bw's sides exchange
// their duration reports and print the sums; ib_send_bw's print their
// own (both directions counted), exchanging none.
func TestBidirectionalDuration(t *testing.T) {
	for _, tool := range []pt.Tool{pt.WriteBW, pt.SendBW} {
		t.Run(tool.String(), func(t *testing.T) {
			cfg := Config{Tool: tool, Size: 4096, Duplex: true, Duration: 2 * time.Second}
			s, c := runOK(t, 1500, cfg, cfg)
			if tool == pt.WriteBW {
				checkDuplex(t, s, c, []uint64{4096}, 0)
				return
			}
			for _, sd := range []*side{s, c} {
				ls := lines(t, "side", sd.out.String(), pt.BWHeader(false), bwLineRE)
				if len(ls) != 1 || len(sd.res.RemoteReports) != 0 {
					t.Fatalf("%d lines, remote reports %v", len(ls), sd.res.RemoteReports)
				}
				if m := bwLineRE.FindStringSubmatch(ls[0]); m[2] == "0" || m[3] != "0.00" || m[4] == "0.00" {
					t.Errorf("line %q: want iterations, no peak, an average", ls[0])
				}
			}
		})
	}
}

// TestSendDuration runs ib_send_bw for a time (-D 2, RC and UD): the
// client reports its completions, the server its receives from the
// first one, without a peak.
func TestSendDuration(t *testing.T) {
	for _, ud := range []bool{false, true} {
		t.Run(fmt.Sprintf("ud=%v", ud), func(t *testing.T) {
			cfg := Config{Tool: pt.SendBW, Size: 1024, Duration: 2 * time.Second, UD: ud}
			s, c := runOK(t, 1500, cfg, cfg)
			for _, sd := range []struct {
				who string
				sd  *side
			}{{"server", s}, {"client", c}} {
				ls := results(t, sd.who, sd.sd.out.String(), cfg.Tool, false)
				if len(ls) != 1 {
					t.Fatalf("%s: %d result lines", sd.who, len(ls))
				}
				if m := bwLineRE.FindStringSubmatch(ls[0]); m[1] != "1024" || m[2] == "0" || m[3] != "0.00" || m[4] == "0.00" {
					t.Errorf("%s: line %q: want iterations, no peak, an average", sd.who, ls[0])
				}
			}
			if !strings.Contains(s.out.String(), " RX depth        : 512\n") {
				t.Errorf("server: rx depth not kept in duration mode:\n%s", s.out.String())
			}
			if !ud && s.res.Reports[0].Iters > c.res.Reports[0].Iters+uint64(DefaultCQMod)*2 {
				t.Errorf("the server counted %d receives, the client %d sends", s.res.Reports[0].Iters, c.res.Reports[0].Iters)
			}
		})
	}
}

// TestLatDuration runs the latency tools for a time (-D 2): the sides
// that measure print the duration table (iterations, average latency,
// transactions per second) and agree with each other.
func TestLatDuration(t *testing.T) {
	for _, tc := range []struct {
		tool pt.Tool
		size uint64
		ud   bool
	}{
		{pt.WriteLat, 2, false},
		{pt.ReadLat, 64, false},
		{pt.SendLat, 2, false},
		{pt.SendLat, 500, true},
		{pt.AtomicLat, 0, false},
	} {
		t.Run(fmt.Sprintf("%v/ud=%v", tc.tool, tc.ud), func(t *testing.T) {
			if tc.tool == pt.WriteLat && raceDetector {
				t.Skip("ib_write_lat polls memory the engine writes")
			}
			cfg := Config{Tool: tc.tool, Size: tc.size, Duration: 2 * time.Second, UD: tc.ud}
			s, c := runOK(t, 1500, cfg, cfg)
			measure := []*side{c}
			if tc.tool == pt.WriteLat || tc.tool == pt.SendLat {
				measure = append(measure, s)
			} else if strings.Contains(s.out.String(), pt.LatDurHeader()) {
				t.Errorf("the %v server printed a header", tc.tool)
			}
			for _, sd := range measure {
				ls := lines(t, "side", sd.out.String(), pt.LatDurHeader(), latDurLineRE)
				if len(ls) != 1 || len(sd.res.LatDur) != 1 {
					t.Fatalf("%d lines, %d figures", len(ls), len(sd.res.LatDur))
				}
				st := sd.res.LatDur[0]
				if st.Iters == 0 || st.Avg <= 0 || math.Abs(st.TPS*st.Avg*float64(rtt(tc.tool))-1e6) > 1e6*1e-9 {
					t.Errorf("figures %+v: want iterations, and tps × latency × RTT factor = 1 s", st)
				}
			}
			if len(measure) == 2 {
				a, b := s.res.LatDur[0].Iters, c.res.LatDur[0].Iters
				if a > 2*b || b > 2*a {
					t.Errorf("the sides counted %d and %d iterations", a, b)
				}
			}
		})
	}
}

func rtt(tool pt.Tool) int {
	if tool == pt.ReadLat || tool == pt.AtomicLat {
		return 1
	}
	return 2
}

// TestOptionRefusals: what perftest refuses of -c UD, -b and -D, uroce
// refuses with its messages and exit status (1), before opening a
// device.
func TestOptionRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"write", "-c", "UD"}, 1, "UD connection only possible in SEND verb"},
		{[]string{"read", "--lat", "-c", "UD"}, 1, "UD connection only possible in SEND verb"},
		{[]string{"atomic", "-c", "UD"}, 1, "UD connection only possible in SEND verb"},
		{[]string{"send", "--lat", "-b"}, 1, "Bidirectional is only available in BW test"},
		{[]string{"write", "--lat", "--bidirectional"}, 1, "Bidirectional is only available in BW test"},
		{[]string{"send", "-D", "0"}, 1, "Duration period must be positive"},
		{[]string{"send", "--lat", "-D", "2", "-e"}, 1, "Duration mode doesn't work with events."},
		{[]string{"write", "--lat", "-D", "2", "-a"}, 1, "Duration mode currently doesn't support running on all sizes."},
		{[]string{"send", "-c", "XRC"}, 2, "not supported"},
		{[]string{"send", "-c", "XX"}, 2, "Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}"},
	} {
		var out, errOut strings.Builder
		code := Main(context.Background(), append(tc.args, "-d", "uroce-none"), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.msg)
		}
	}
}

// TestLimits: -w and -y, perftest's verifier. A limit the run stays
// above passes; one it falls below fails the run after the report, with
// perftest's message, on each side that prints a report; -y alone fails
// nothing, as in perftest 4.5.
func TestLimits(t *testing.T) {
	base := Config{Tool: pt.WriteBW, Size: 4096, Iters: 200}
	run := func(mod func(*Config)) (s, c *side) {
		t.Helper()
		srv, cli := base, base
		mod(&srv)
		mod(&cli)
		p := apptest.NewPair(t, 1500, nil)
		srv.GIDIndex, cli.GIDIndex = AutoGID, AutoGID
		return runPair(t, p, srv, cli)
	}
	s, c := run(func(c *Config) { c.LimitBW, c.LimitBWOn = 0.001, true })
	if s.err != nil || c.err != nil {
		t.Fatalf("limit met: server %v, client %v", s.err, c.err)
	}
	// The client fails; the server, which prints the client's report,
	// does too, unless the client's failure ended its run first.
	s, c = run(func(c *Config) { c.LimitBW, c.LimitBWOn = 1e12, true })
	for _, sd := range []*side{c, s} {
		if sd == s && !errors.Is(sd.err, ErrBelowLimit) {
			continue
		}
		if !errors.Is(sd.err, ErrBelowLimit) || !strings.Contains(sd.log.String(), "Error: BW result is below bw limit\n") {
			t.Errorf("bw below the limit: %v, %q", sd.err, sd.log.String())
		}
		if !strings.Contains(sd.out.String(), "#bytes") {
			t.Errorf("no report before the error: %q", sd.out.String())
		}
	}
	s, c = run(func(c *Config) { c.LimitBWOn, c.LimitMsgRate, c.LimitMsgRateOn = true, 1e9, true })
	if !errors.Is(c.err, ErrBelowLimit) || !strings.Contains(c.log.String(), "Error: Msg rate  is below msg_rate limit\n") {
		t.Errorf("msg rate below the limit: %v, %q", c.err, c.log.String())
	}
	s, c = run(func(c *Config) { c.LimitMsgRate, c.LimitMsgRateOn = 1e9, true })
	if s.err != nil || c.err != nil {
		t.Errorf("-y alone: server %v, client %v", s.err, c.err)
	}
}
