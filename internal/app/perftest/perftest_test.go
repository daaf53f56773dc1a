package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/link/fault"
)

type side struct {
	res      *Result
	err      error
	out, log bytes.Buffer
	s        *session
}

func runPair(t *testing.T, p *apptest.Pair, srv, cli Config) (s, c *side) {
	t.Helper()
	if srv.Tool == pt.WriteLat && raceDetector {
		t.Skip("ib_write_lat polls memory the engine writes, as perftest polls DMA'd memory: the race detector reports it")
	}
	ex := apptest.NewExchange(t)
	s, c = &side{}, &side{}
	srv.Connect, srv.Stdout, srv.Stderr, srv.Device = ex.Accept, &s.out, &s.log, "uroceA"
	cli.Connect, cli.Stdout, cli.Stderr, cli.Device = ex.Dial, &c.out, &c.log, "uroceB"
	cli.Client = true
	apptest.RunBoth(60*time.Second,
		func(ctx context.Context) { s.res, s.err = Run(ctx, p.A, srv) },
		func(ctx context.Context) error { c.res, c.err = Run(ctx, p.B, cli); return c.err })
	return s, c
}

var (
	bwLineRE  = regexp.MustCompile(`^ (\d+) +(\d+) +(\d+\.\d\d) +(\d+\.\d\d) *\t\t   (\d+\.\d{6})$`)
	latLineRE = regexp.MustCompile(`^ (\d+) +(\d+) +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\t +\d+\.\d\d +\t\d+\.\d\d *\t\t\d+\.\d\d *\t\t\d+\.\d\d *$`)
)

// results returns the result lines of a tool's output, checking the
// frame around them.
func results(t *testing.T, who, out string, tool pt.Tool, lat bool) []string {
	t.Helper()
	header := pt.BWHeader(false)
	re := bwLineRE
	if lat {
		header, re = pt.LatHeader(), latLineRE
	}
	i := strings.Index(out, pt.ResultLine+header)
	if i < 0 {
		t.Fatalf("%s: no result header in:\n%s", who, out)
	}
	body := out[i+len(pt.ResultLine+header):]
	if !strings.HasSuffix(body, pt.ResultLine) {
		t.Fatalf("%s: output does not end with the rule:\n%s", who, out)
	}
	body = strings.TrimSuffix(body, pt.ResultLine)
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if l == "" {
			continue
		}
		if !re.MatchString(l) {
			t.Errorf("%s: result line %q does not match %s", who, l, re)
		}
		lines = append(lines, l)
	}
	if !strings.Contains(out, "Dual-port       : OFF") || !strings.Contains(out, " local address: LID 0000 QPN 0x") ||
		!strings.Contains(out, " remote address: LID 0000 QPN 0x") || !strings.Contains(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:1") {
		t.Errorf("%s: test information or address lines missing:\n%s", who, out)
	}
	return lines
}

func TestToolsOverPipe(t *testing.T) {
	for _, tc := range []struct {
		tool    pt.Tool
		size    uint64
		iters   int
		all     bool
		linkMTU int
		busy    bool // Config.BusyPoll: ib_write_lat spins before it sleeps
	}{
		{tool: pt.WriteBW, size: 3000, iters: 50, linkMTU: 1500},
		{tool: pt.WriteBW, size: 1, iters: 200, linkMTU: 1500},
		{tool: pt.WriteBW, size: 1 << 20, iters: 5, linkMTU: 9000},
		{tool: pt.ReadBW, size: 13, iters: 100, linkMTU: 1500},
		{tool: pt.ReadBW, size: 100000, iters: 10, linkMTU: 9000},
		{tool: pt.SendBW, size: 4096, iters: 600, linkMTU: 1500},
		{tool: pt.SendBW, size: 65537, iters: 20, linkMTU: 9000},
		{tool: pt.AtomicBW, iters: 200, linkMTU: 1500},
		{tool: pt.WriteLat, size: 2, iters: 50, linkMTU: 1500},
		{tool: pt.WriteLat, size: 20000, iters: 20, linkMTU: 9000},
		{tool: pt.WriteLat, size: 64, iters: 200, linkMTU: 1500, busy: true},
		{tool: pt.ReadLat, size: 1000, iters: 50, linkMTU: 1500},
		{tool: pt.SendLat, size: 7, iters: 50, linkMTU: 1500},
		{tool: pt.AtomicLat, iters: 100, linkMTU: 1500},
		{tool: pt.SendLat, size: 5000, iters: 20, linkMTU: 9000},
		{tool: pt.WriteBW, iters: 5, all: true, linkMTU: 9000},
		{tool: pt.SendBW, iters: 5, all: true, linkMTU: 1500},
		{tool: pt.ReadLat, iters: 5, all: true, linkMTU: 9000},
	} {
		name := fmt.Sprintf("%v/%d/all=%v", tc.tool, tc.size, tc.all)
		if tc.busy {
			name += "/busy"
		}
		t.Run(name, func(t *testing.T) {
			p := apptest.NewPair(t, tc.linkMTU, nil)
			cfg := Config{Tool: tc.tool, Size: tc.size, Iters: tc.iters, All: tc.all, GIDIndex: AutoGID, BusyPoll: tc.busy}
			s, c := runPair(t, p, cfg, cfg)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v (%s), client: %v (%s)\nserver output:\n%s\nclient output:\n%s", s.err, s.log.String(), c.err, c.log.String(), s.out.String(), c.out.String())
			}
			wantMTU := pt.MTU1024
			if tc.linkMTU == 9000 {
				wantMTU = pt.MTU4096
			}
			if s.res.Agreed.MTU != wantMTU || c.res.Agreed.MTU != wantMTU {
				t.Errorf("agreed MTUs %v, %v, want %v", s.res.Agreed.MTU, c.res.Agreed.MTU, wantMTU)
			}
			runs := 1
			if tc.all {
				runs = 23
			}
			lat := !tc.tool.BW()
			cl := results(t, "client", c.out.String(), tc.tool, lat)
			if len(cl) != runs {
				t.Errorf("client printed %d result lines, want %d", len(cl), runs)
			}
			switch {
			case tc.tool == pt.ReadLat || tc.tool == pt.AtomicLat:
				if strings.Contains(s.out.String(), pt.LatHeader()) {
					t.Errorf("%v server printed a header:\n%s", tc.tool, s.out.String())
				}
			default:
				sl := results(t, "server", s.out.String(), tc.tool, lat)
				if tc.tool.BW() && tc.tool != pt.SendBW {
					// The server prints the client's (last) report.
					if len(sl) != 1 || sl[0] != cl[len(cl)-1] {
						t.Errorf("server's lines %q, want the client's last %q", sl, cl[len(cl)-1])
					}
				} else if len(sl) != runs {
					t.Errorf("server printed %d result lines, want %d", len(sl), runs)
				}
			}
			if tc.tool.BW() {
				for i, l := range cl {
					m := bwLineRE.FindStringSubmatch(l)
					size := tc.size
					if tc.all {
						size = 2 << i
					} else if size == 0 {
						size = 8
					}
					if m == nil || m[1] != fmt.Sprint(size) || m[2] != fmt.Sprint(tc.iters) {
						t.Errorf("result line %q: want size %d, %d iterations", l, size, tc.iters)
					}
				}
			}
		})
	}
}

// TestDataLands checks where the bandwidth tools' data ends up: WRITE
// carries the client's bytes into the server's half of the buffer at the
// cycle-buffer offsets, READ brings the server's bytes back, and each
// FETCH_ADD adds one to the server's words.
func TestDataLands(t *testing.T) {
	p := apptest.NewPair(t, 1500, nil)
	var srvSess, cliSess *session
	capture := func(dst **session) func(*session) { return func(s *session) { *dst = s } }
	testHook = func(s *session) {
		if s.cfg.Client {
			capture(&cliSess)(s)
		} else {
			capture(&srvSess)(s)
		}
	}
	defer func() { testHook = nil }()

	// 100 writes of 100 bytes step INC(100, 64) = 128 bytes through the
	// 4096-byte cycle buffer: 32 slots, wrapping.
	cfg := Config{Tool: pt.WriteBW, Size: 100, Iters: 100, GIDIndex: AutoGID}
	if s, c := runPair(t, p, cfg, cfg); s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v", s.err, c.err)
	}
	rem := srvSess.buf[srvSess.buffSize:]
	loc := cliSess.buf
	for slot := 0; slot < 32; slot++ {
		if !bytes.Equal(rem[slot*128:slot*128+100], loc[slot*128:slot*128+100]) {
			t.Fatalf("write: slot %d differs", slot)
		}
	}

	cfg = Config{Tool: pt.ReadBW, Size: 3000, Iters: 10, GIDIndex: AutoGID}
	if s, c := runPair(t, p, cfg, cfg); s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v", s.err, c.err)
	}
	if !bytes.Equal(cliSess.buf[:3000], srvSess.buf[srvSess.buffSize:srvSess.buffSize+3000]) {
		t.Fatal("read: the client's buffer does not hold the server's bytes")
	}

	cfg = Config{Tool: pt.AtomicBW, Iters: 130, GIDIndex: AutoGID}
	var before []byte
	testHook = func(s *session) {
		if !s.cfg.Client {
			srvSess = s
			before = append([]byte(nil), s.buf...)
		}
	}
	if s, c := runPair(t, p, cfg, cfg); s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v", s.err, c.err)
	}
	// 130 adds over 64 slots of 64 bytes: slots 0 and 1 get three, the
	// rest two.
	for slot := 0; slot < 64; slot++ {
		off := srvSess.buffSize + uint64(slot)*64
		got := binary.LittleEndian.Uint64(srvSess.buf[off:]) - binary.LittleEndian.Uint64(before[off:])
		want := uint64(2)
		if slot < 2 {
			want = 3
		}
		if got != want {
			t.Errorf("atomic slot %d: added %d, want %d", slot, got, want)
		}
	}
}

func TestBadRKey(t *testing.T) {
	for _, tc := range []struct {
		tool       pt.Tool
		clientSide bool // the client uses a bad key (else the server advertises one)
	}{{pt.WriteBW, true}, {pt.ReadBW, false}, {pt.AtomicBW, true}, {pt.WriteLat, false}} {
		t.Run(fmt.Sprintf("%v/%v", tc.tool, tc.clientSide), func(t *testing.T) {
			p := apptest.NewPair(t, 1500, nil)
			srv := Config{Tool: tc.tool, Size: 64, Iters: 10, GIDIndex: AutoGID, BadRKey: !tc.clientSide}
			cli := Config{Tool: tc.tool, Size: 64, Iters: 10, GIDIndex: AutoGID, BadRKey: tc.clientSide}
			if tc.tool == pt.AtomicBW {
				srv.Size, cli.Size = 0, 0
			}
			s, c := runPair(t, p, srv, cli)
			if !errors.Is(c.err, ErrCompletion) && !errors.Is(s.err, ErrCompletion) {
				t.Fatalf("no failed completion: server %v, client %v", s.err, c.err)
			}
			log := c.log.String() + s.log.String()
			if !strings.Contains(log, " Completion with error at client\n Failed status 10: wr_id 0 syndrom 0x0\n") {
				t.Errorf("error output:\n%s", log)
			}
		})
	}
}

// TestRNR: a send_bw server with one receive posted at a time completes
// the run (its ACKs' credits pace the client); one that posts its
// receives late makes the client meet an RNR NAK, and with rnr_retry 0
// fail with "RNR retry counter exceeded".
func TestRNR(t *testing.T) {
	p := apptest.NewPair(t, 1500, nil)
	srv := Config{Tool: pt.SendBW, Size: 64, Iters: 20, RxDepth: 1, GIDIndex: AutoGID}
	cli := Config{Tool: pt.SendBW, Size: 64, Iters: 20, GIDIndex: AutoGID}
	// One receive at a time: the server's ACKs advertise its credits,
	// and the client sends within them (one probe past them at most), so
	// the run completes.
	s, c := runPair(t, p, srv, cli)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v", s.err, c.err)
	}
	// Receives posted only after the run started: the first SENDs meet
	// none, and the client's rnr_retry 0 fails at once.
	srv.LateRecv, srv.RxDepth = 50*time.Millisecond, 0
	ctrA := p.A.Counters()
	before := ctrA.Map()["send_rnr_err"]
	cli.SetRNRRetry, cli.RNRRetry = true, 0
	s, c = runPair(t, p, srv, cli)
	ctrA = p.A.Counters()
	if ctrA.Map()["send_rnr_err"] == before {
		t.Errorf("no RNR NAK with late receives")
	}
	if !errors.Is(c.err, ErrCompletion) || !strings.Contains(c.log.String(), "Failed status 13:") {
		t.Fatalf("client: %v\n%s", c.err, c.log.String())
	}
	_ = s
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"atomic size": {Tool: pt.AtomicBW, Size: 16},
		"atomic all":  {Tool: pt.AtomicBW, All: true},
		"iters":       {Tool: pt.WriteBW, Iters: 4},
		"mtu":         {Tool: pt.WriteBW, MTU: 1000},
		"rx on write": {Tool: pt.WriteBW, RxDepth: 5},
		"cq mod":      {Tool: pt.WriteBW, CQMod: 2000},
		"rnr":         {Tool: pt.SendBW, SetRNRRetry: true, RNRRetry: 8},
		"inline":      {Tool: pt.WriteBW, Inline: 913},
		"list on lat": {Tool: pt.WriteLat, PostList: 2},
		"list iters":  {Tool: pt.WriteBW, Iters: 10, PostList: 3},
		"list cq mod": {Tool: pt.WriteBW, PostList: 4, CQMod: 3},
		"list tx":     {Tool: pt.WriteBW, PostList: 256, TxDepth: 128},
		"uc read":     {Tool: pt.ReadBW, UC: true},
		"uc atomic":   {Tool: pt.AtomicBW, UC: true},
		"uc rdma_cm":  {Tool: pt.WriteBW, UC: true, RDMACM: true},
		"-D margin":   {Tool: pt.WriteBW, Duration: 4 * time.Second, Margin: 2 * time.Second, marginSet: true},
		"-D all":      {Tool: pt.WriteBW, Duration: time.Second, All: true},
		"-D lat all":  {Tool: pt.SendLat, Duration: time.Second, All: true},
		"ud write":    {Tool: pt.WriteBW, UD: true},
		"ud read lat": {Tool: pt.ReadLat, UD: true},
		"ud atomic":   {Tool: pt.AtomicBW, UD: true},
		"ud rdma_cm":  {Tool: pt.SendBW, UD: true, RDMACM: true},
		"-b lat":      {Tool: pt.SendLat, Duplex: true},
		"-b rdma_cm":  {Tool: pt.WriteBW, Duplex: true, RDMACM: true},
	} {
		cfg.Connect = func(context.Context) (net.Conn, error) { return nil, errors.New("unused") }
		if err := cfg.normalize(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := Config{Tool: pt.WriteBW, Size: 10000, Iters: 50, TxDepth: 200, Connect: func(context.Context) (net.Conn, error) { return nil, nil }}
	if err := c.normalize(); err != nil || c.TxDepth != 50 || c.CQMod != 1 {
		t.Errorf("normalize: %v, tx %d, cq_mod %d; want tx 50, cq_mod 1", err, c.TxDepth, c.CQMod)
	}
}

// TestDuration runs the WRITE, READ and atomic bandwidth clients for a
// second each (-D 1, no margin) and checks their reports: some
// iterations, no peak (as perftest's duration mode), an average.
func TestDuration(t *testing.T) {
	for _, tool := range []pt.Tool{pt.WriteBW, pt.ReadBW, pt.AtomicBW} {
		t.Run(tool.String(), func(t *testing.T) {
			p := apptest.NewPair(t, 1500, nil)
			cfg := Config{Tool: tool, Size: 4096, Duration: time.Second, GIDIndex: AutoGID}
			if tool == pt.AtomicBW {
				cfg.Size = 0
			}
			s, c := runPair(t, p, cfg, cfg)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v, client: %v\n%s\n%s", s.err, c.err, s.out.String(), c.out.String())
			}
			lines := results(t, "client", c.out.String(), tool, false)
			if len(lines) != 1 {
				t.Fatalf("%d result lines", len(lines))
			}
			m := bwLineRE.FindStringSubmatch(lines[0])
			if m == nil || m[2] == "0" || m[3] != "0.00" || m[4] == "0.00" {
				t.Errorf("duration report %q: want iterations, no peak, an average", lines[0])
			}
			if r := c.res.Reports; len(r) != 1 || r[0].Iters%uint64(DefaultCQMod) != 0 {
				t.Errorf("reports %+v: iterations not counted in CQ moderation units", r)
			}
		})
	}
}

// TestUC runs the write and send tools over UC QPs (-c UC).
func TestUC(t *testing.T) {
	for _, cfg := range []Config{
		{Tool: pt.WriteBW, Size: 4096, Iters: 300},
		{Tool: pt.SendBW, Size: 1000, Iters: 300},
		{Tool: pt.WriteLat, Size: 64, Iters: 100},
		{Tool: pt.SendLat, Size: 3000, Iters: 50},
	} {
		t.Run(fmt.Sprintf("%v/s%d", cfg.Tool, cfg.Size), func(t *testing.T) {
			cfg.GIDIndex, cfg.UC = AutoGID, true
			sout, out := runBoth(t, cfg)
			if lines := results(t, "client", out, cfg.Tool, !cfg.Tool.BW()); len(lines) != 1 {
				t.Errorf("%d result lines", len(lines))
			}
			if !strings.Contains(out, " Connection type : UC\t\t") {
				t.Errorf("not UC:\n%s", out)
			}
			if cfg.Tool == pt.SendBW && !strings.Contains(sout, " RX depth        : 300\n") {
				t.Errorf("UC send server: rx depth not the iterations:\n%s", sout)
			}
		})
	}
}

// TestInlineAndPostList runs write and send bandwidth with inline data
// (-I) and post lists (-l), and write latency inline: the results come,
// and the tools say what perftest says of them.
func TestInlineAndPostList(t *testing.T) {
	for _, cfg := range []Config{
		{Tool: pt.WriteBW, Size: 64, Iters: 400, Inline: 64, PostList: 8},
		{Tool: pt.SendBW, Size: 200, Iters: 400, Inline: 220, PostList: 4},
		{Tool: pt.WriteBW, Size: 4096, Iters: 100, Inline: 64, PostList: 5},
		{Tool: pt.WriteLat, Size: 32, Iters: 100, Inline: 220},
	} {
		t.Run(fmt.Sprintf("%v/s%d/I%d/l%d", cfg.Tool, cfg.Size, cfg.Inline, cfg.PostList), func(t *testing.T) {
			cfg.GIDIndex = AutoGID
			_, out := runBoth(t, cfg)
			if lines := results(t, "client", out, cfg.Tool, !cfg.Tool.BW()); len(lines) != 1 {
				t.Errorf("%d result lines", len(lines))
			}
			if !strings.Contains(out, fmt.Sprintf(" Max inline data : %d[B]\n", cfg.Inline)) {
				t.Errorf("no inline size in:\n%s", out)
			}
			if cfg.PostList > 1 {
				if !strings.Contains(out, fmt.Sprintf(" Post List       : %d\n", cfg.PostList)) ||
					!strings.Contains(out, "Post List BW Test\n") ||
					!strings.Contains(out, "Post List requested - CQ moderation will be the size of the post list\n") ||
					!strings.Contains(out, fmt.Sprintf(" CQ Moderation   : %d\n", cfg.PostList)) {
					t.Errorf("post list not said:\n%s", out)
				}
			}
		})
	}
}

// TestLossyPipe runs the RC tools through a pipe that loses, duplicates
// and reorders frames both ways: every run completes, and the atomic
// server finds every addition made exactly once.
func TestLossyPipe(t *testing.T) {
	for _, tc := range []struct {
		tool  pt.Tool
		size  uint64
		iters int
	}{
		{pt.WriteBW, 5000, 100},
		{pt.ReadBW, 3000, 100},
		{pt.SendBW, 2000, 100},
		{pt.AtomicBW, 0, 300},
		{pt.WriteLat, 1500, 50},
		{pt.ReadLat, 64, 50},
		{pt.SendLat, 3000, 50},
	} {
		t.Run(tc.tool.String(), func(t *testing.T) {
			p := apptest.NewPair(t, 1500, &fault.Config{Seed: uint64(tc.tool) + 3, Drop: 0.03, Dup: 0.02, Reorder: 0.02})
			cfg := Config{Tool: tc.tool, Size: tc.size, Iters: tc.iters, GIDIndex: AutoGID, Verify: true, QPTimeout: 8}
			s, c := runPair(t, p, cfg, cfg)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v (%s), client: %v (%s)", s.err, s.log.String(), c.err, c.log.String())
			}
			if tc.tool == pt.AtomicBW && !strings.Contains(s.log.String(), "each exactly once") {
				t.Errorf("the atomic server did not verify: %q", s.log.String())
			}
			if st := p.FA.Stats(); st.Dropped == 0 {
				t.Errorf("nothing dropped: %+v", st)
			}
		})
	}
}

// TestReadWindow: with 64 KiB READs, CQ moderation asked for 16 and a
// read window of 128 KiB, the client keeps two READs in flight and
// signals each, and the test completes.
func TestReadWindow(t *testing.T) {
	p := apptest.NewPair(t, 9000, nil)
	cfg := Config{Tool: pt.ReadBW, Size: 65536, Iters: 40, CQMod: 16, ReadWindow: 128 << 10, GIDIndex: AutoGID}
	s, c := runPair(t, p, cfg, cfg)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v", s.err, c.err)
	}
	if r := c.res.Reports[0]; r.Iters != 40 || r.Size != 65536 {
		t.Errorf("report %+v", r)
	}
}

// runBoth runs cfg as server and client on a new pair, and fails the
// test unless both succeed; it returns their outputs.
func runBoth(t *testing.T, cfg Config) (server, client string) {
	t.Helper()
	p := apptest.NewPair(t, 1500, nil)
	s, c := runPair(t, p, cfg, cfg)
	if s.err != nil || c.err != nil {
		t.Fatalf("server: %v, client: %v\n%s\n%s", s.err, c.err, s.out.String(), c.out.String())
	}
	return s.out.String(), c.out.String()
}
