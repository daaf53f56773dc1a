package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	pp "github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/link/fault"
)

type side struct {
	res      Result
	err      error
	out, log bytes.Buffer
}

// runPair runs cfg as server on device A and as client on device B.
func runPair(t *testing.T, p *apptest.Pair, srv, cli Config) (s, c *side) {
	t.Helper()
	ex := apptest.NewExchange(t)
	s, c = &side{}, &side{}
	srv.Connect, srv.Stdout, srv.Stderr = ex.Accept, &s.out, &s.log
	cli.Connect, cli.Stdout, cli.Stderr = ex.Dial, &c.out, &c.log
	cli.Client = true
	apptest.RunBoth(30*time.Second,
		func(ctx context.Context) { s.res, s.err = Run(ctx, p.A, srv) },
		func(ctx context.Context) error { c.res, c.err = Run(ctx, p.B, cli); return c.err })
	return s, c
}

var (
	localRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::ffff:192\.0\.2\.1[01]$`)
	remoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:192\.0\.2\.1[01]$`)
	bytesRE  = regexp.MustCompile(`^\d+ bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	itersRE  = regexp.MustCompile(`^\d+ iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// checkOutput checks the lines a tool prints for nqp QPs and iters
// exchanges of size bytes.
func checkOutput(t *testing.T, who string, out string, nqp, size, iters int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2*nqp+2 {
		t.Fatalf("%s printed %d lines, want %d:\n%s", who, len(lines), 2*nqp+2, out)
	}
	for i, l := range lines {
		var re *regexp.Regexp
		switch {
		case i < nqp:
			re = localRE
		case i < 2*nqp:
			re = remoteRE
		case i == 2*nqp:
			re = bytesRE
		default:
			re = itersRE
		}
		if !re.MatchString(l) {
			t.Errorf("%s line %d = %q, does not match %s", who, i+1, l, re)
		}
	}
	if want := fmt.Sprintf("%d bytes in ", size*iters*2); !strings.HasPrefix(lines[2*nqp], want) {
		t.Errorf("%s: %q does not start with %q", who, lines[2*nqp], want)
	}
	if want := fmt.Sprintf("%d iters in ", iters); !strings.HasPrefix(lines[2*nqp+1], want) {
		t.Errorf("%s: %q does not start with %q", who, lines[2*nqp+1], want)
	}
}

func TestToolsOverPipe(t *testing.T) {
	for _, tc := range []struct {
		tool            pp.Tool
		size, iters, rx int
		mtu, linkMTU    int
		nqp             int
	}{
		{tool: pp.RC, size: 4096, iters: 50, linkMTU: 1500},
		{tool: pp.RC, size: 13, iters: 20, rx: 4, linkMTU: 1500}, // pad, receive refill
		{tool: pp.RC, size: 1 << 20, iters: 3, mtu: 4096, linkMTU: 9000},
		{tool: pp.UC, size: 5000, iters: 30, linkMTU: 1500},
		{tool: pp.UD, size: 1024, iters: 40, rx: 8, linkMTU: 1500},
		{tool: pp.UD, size: 1, iters: 10, linkMTU: 9000},
		{tool: pp.SRQ, size: 64, iters: 40, nqp: 4, rx: 10, linkMTU: 1500},
		{tool: pp.SRQ, size: 3000, iters: 10, nqp: 1, linkMTU: 1500},
	} {
		for _, viaDaemon := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/%d/%d/daemon=%v", tc.tool, tc.size, tc.nqp, viaDaemon), func(t *testing.T) {
				p := apptest.NewPair(t, tc.linkMTU, nil)
				if viaDaemon {
					p = apptest.NewDaemonPair(t, tc.linkMTU, nil)
				}
				cfg := Config{Tool: tc.tool, Size: tc.size, Iters: tc.iters, RxDepth: tc.rx, MTU: tc.mtu,
					NumQP: tc.nqp, GIDIndex: AutoGID, Check: true, Verify: true}
				s, c := runPair(t, p, cfg, cfg)
				if s.err != nil || c.err != nil {
					t.Fatalf("server: %v (%s), client: %v (%s)", s.err, s.log.String(), c.err, c.log.String())
				}
				nqp := max(tc.nqp, 1)
				checkOutput(t, "server", s.out.String(), nqp, tc.size, tc.iters)
				checkOutput(t, "client", c.out.String(), nqp, tc.size, tc.iters)
				for _, x := range []*side{s, c} {
					if x.res.Recvd < tc.iters || x.res.Sent < tc.iters {
						t.Errorf("sent %d, received %d, want %d each", x.res.Sent, x.res.Recvd, tc.iters)
					}
				}
				// Each side names the other's QPs and PSNs.
				for i := range s.res.Local {
					if s.res.Local[i] != c.res.Remote[i] || c.res.Local[i] != s.res.Remote[i] {
						t.Errorf("QP %d: addresses differ: server %+v/%+v, client %+v/%+v",
							i, s.res.Local[i], s.res.Remote[i], c.res.Local[i], c.res.Remote[i])
					}
				}
			})
		}
	}
}

// TestLossyPipe runs RC and SRQ through a pipe that loses, duplicates and
// reorders frames both ways: every exchange completes with intact data.
func TestLossyPipe(t *testing.T) {
	for _, tool := range []pp.Tool{pp.RC, pp.SRQ} {
		t.Run(tool.String(), func(t *testing.T) {
			p := apptest.NewPair(t, 1500, &fault.Config{Seed: 7, Drop: 0.05, Dup: 0.02, Reorder: 0.02})
			cfg := Config{Tool: tool, Size: 2500, Iters: 40, NumQP: 1, GIDIndex: AutoGID, Check: true, Verify: true}
			s, c := runPair(t, p, cfg, cfg)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v, client: %v", s.err, c.err)
			}
			if st := p.FA.Stats(); st.Dropped == 0 {
				t.Errorf("no frame was dropped: %+v", st)
			}
		})
	}
}

// TestVerifyCatchesMismatch runs a client without -c against a server
// that expects it: the server's -c check and Verify both report it.
func TestVerifyCatchesMismatch(t *testing.T) {
	p := apptest.NewPair(t, 1500, nil)
	srv := Config{Tool: pp.RC, Size: 8192, Iters: 3, GIDIndex: AutoGID, Check: true, Verify: true}
	cli := Config{Tool: pp.RC, Size: 8192, Iters: 3, GIDIndex: AutoGID}
	s, c := runPair(t, p, srv, cli)
	if c.err != nil {
		t.Fatalf("client: %v", c.err)
	}
	if !errors.Is(s.err, ErrBadData) || s.res.BadMessages != 3 || s.res.BadPages != 2 {
		t.Fatalf("server: %v, %d bad messages, %d bad pages; want ErrBadData, 3, 2", s.err, s.res.BadMessages, s.res.BadPages)
	}
	if !strings.Contains(s.out.String(), "invalid data in page 0\ninvalid data in page 1\n") {
		t.Errorf("server output lacks the page lines:\n%s", s.out.String())
	}
}

// TestRetryExceededIsReported: when nothing gets through, the client
// gives up after seven retries and prints the status as the tools do.
func TestRetryExceededIsReported(t *testing.T) {
	p := apptest.NewPair(t, 1500, &fault.Config{Seed: 1, Drop: 1})
	cfg := Config{Tool: pp.RC, Size: 64, Iters: 1, GIDIndex: AutoGID}
	s, c := runPair(t, p, cfg, cfg)
	if !errors.Is(c.err, ErrStatus) {
		t.Fatalf("client: %v, want a failed completion", c.err)
	}
	if want := "Failed status transport retry counter exceeded (12) for wr_id 2\n"; c.log.String() != want {
		t.Errorf("client stderr = %q, want %q", c.log.String(), want)
	}
	if s.err == nil {
		t.Errorf("server finished without traffic")
	}
}

func TestConfigErrors(t *testing.T) {
	p := apptest.NewPair(t, 1500, nil)
	for name, cfg := range map[string]Config{
		"mtu":        {Tool: pp.RC, MTU: 1000},
		"srq rx":     {Tool: pp.SRQ, NumQP: 20, RxDepth: 10},
		"srq qps":    {Tool: pp.SRQ, NumQP: 256, RxDepth: 500},
		"ud size":    {Tool: pp.UD, Size: 2048},
		"no connect": {Tool: pp.RC, Size: 10},
		"bad gid":    {Tool: pp.RC, GIDIndex: 7},
	} {
		if name != "no connect" {
			cfg.Connect = failConnect
		}
		if _, err := Run(context.Background(), p.A, cfg); err == nil || strings.Contains(err.Error(), "unused") {
			t.Errorf("%s: Run succeeded", name)
		}
	}
}

func failConnect(context.Context) (net.Conn, error) { return nil, errors.New("unused") }
