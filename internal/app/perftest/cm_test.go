package perftest

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/app/apptest"
	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/verbs"
)

// runCMPair runs srv on p.A and cli on p.B with -R on port.
func runCMPair(t *testing.T, p *apptest.Pair, srv, cli Config, port uint16) (s, c *side) {
	t.Helper()
	// The server's CM agent answers from the start, as a kernel's does: a
	// REQ that came before it would wait for the client's resend.
	sd, _ := verbs.StackDevice(p.A)
	if _, err := rdmacm.AgentFor(sd); err != nil {
		t.Fatal(err)
	}
	s, c = &side{}, &side{}
	srv.RDMACM, srv.CMAddr = true, netip.AddrPortFrom(netip.Addr{}, port)
	cli.RDMACM, cli.CMAddr = true, netip.AddrPortFrom(apptest.IPA, port)
	srv.Stdout, srv.Stderr, srv.Device = &s.out, &s.log, "uroceA"
	cli.Stdout, cli.Stderr, cli.Device = &c.out, &c.log, "uroceB"
	cli.Client = true
	apptest.RunBoth(60*time.Second,
		func(ctx context.Context) { s.res, s.err = Run(ctx, p.A, srv) },
		func(ctx context.Context) error { c.res, c.err = Run(ctx, p.B, cli); return c.err })
	return s, c
}

func TestRDMACMOverPipe(t *testing.T) {
	for _, tc := range []struct {
		tool  pt.Tool
		size  uint64
		iters int
	}{
		{tool: pt.WriteBW, size: 65536, iters: 100},
		{tool: pt.ReadBW, size: 100000, iters: 20},
		{tool: pt.SendBW, size: 4096, iters: 300},
		{tool: pt.AtomicBW, iters: 100},
		{tool: pt.WriteLat, size: 2, iters: 50},
		{tool: pt.ReadLat, size: 1000, iters: 50},
		{tool: pt.SendLat, size: 7, iters: 50},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.tool, tc.size), func(t *testing.T) {
			if tc.tool == pt.WriteLat && raceDetector {
				t.Skip("ib_write_lat polls memory the engine writes")
			}
			p := apptest.NewPair(t, 1500, nil)
			cfg := Config{Tool: tc.tool, Size: tc.size, Iters: tc.iters, GIDIndex: AutoGID}
			s, c := runCMPair(t, p, cfg, cfg, 18515)
			if s.err != nil || c.err != nil {
				t.Fatalf("server: %v (%s), client: %v (%s)\nserver output:\n%s\nclient output:\n%s", s.err, s.log.String(), c.err, c.log.String(), s.out.String(), c.out.String())
			}
			for who, out := range map[string]string{"server": s.out.String(), "client": c.out.String()} {
				if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm") {
					t.Errorf("%s does not say rdma_cm:\n%s", who, out)
				}
			}
			if !strings.Contains(s.out.String(), " Waiting for client rdma_cm QP to connect\n") {
				t.Errorf("server does not wait for the rdma_cm client:\n%s", s.out.String())
			}
			lines := results(t, "client", c.out.String(), tc.tool, !tc.tool.BW())
			if len(lines) != 1 {
				t.Errorf("client printed %d result lines", len(lines))
			}
			// The keys came over the exchange QP: each side knows the
			// other's QP numbers.
			if s.res.Remote[0].QPN != c.res.Local[0].QPN || c.res.Remote[0].QPN != s.res.Local[0].QPN {
				t.Errorf("keys: server saw %+v, client has %+v", s.res.Remote[0], c.res.Local[0])
			}
		})
	}
}

func TestRDMACMRefusesDaemon(t *testing.T) {
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"write", "-R", "--daemon", "-d", "uroce0"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "-R (rdma_cm)") || !strings.Contains(errOut.String(), "--daemon") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}
