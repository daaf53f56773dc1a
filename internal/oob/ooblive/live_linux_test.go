package ooblive

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/test/rxe"
)

// hostAddr is this side's address on the test bridge.
const hostAddr = "192.0.2.3"

var hostGID = netip.MustParseAddr("::ffff:" + hostAddr).As16()

func setup(t *testing.T) (*rxe.Net, context.Context) {
	if testing.Short() {
		t.Skip("skipping: boots an rdma_rxe guest")
	}
	t.Parallel()
	n := rxe.NewNet(t, rxe.NetOptions{})
	n.AddHostVeth("uroce0", hostAddr+"/24", 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return n, ctx
}

func ourKey(tool perftest.Tool) perftest.Dest {
	d := perftest.Dest{OutReads: 1, QPN: 0x345, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, GID: hostGID}
	if v := tool.Verb(); v == perftest.Read || v == perftest.Atomic {
		d.OutReads = 0x10
	}
	return d
}

func ourPingpong(i int) pingpong.Dest {
	return pingpong.Dest{QPN: 0x345 + uint32(i), PSN: 0xabcdef - uint32(i), GID: hostGID}
}

// ourPingpongs returns the addresses of n QPs of ours.
func ourPingpongs(n int) []pingpong.Dest {
	local := make([]pingpong.Dest, n)
	for i := range local {
		local[i] = ourPingpong(i)
	}
	return local
}

// addStep appends cmd to a guest's script, followed by the "== name exit
// N" trailer that section looks for.
func addStep(script *strings.Builder, name, cmd string) {
	fmt.Fprintf(script, "%s; echo \"== %s exit $?\"\n", cmd, name)
}

// killed reports whether a command's exit status says timeout(1) stopped
// it (124, or 143 for SIGTERM from busybox's).
func killed(exit string) bool { return exit == "143" || exit == "124" }

// section returns the part of a guest's output printed by the command named
// in its "== name exit N" trailer.
func section(out, name string) (text string, exit string) {
	out = strings.ReplaceAll(out, "\r", "")
	start := 0
	for _, line := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(line, "== ") {
			f := strings.Fields(line)
			if len(f) == 4 && f[1] == name {
				return out[start:strings.Index(out, line)], f[3]
			}
			start = strings.Index(out, line) + len(line)
		}
	}
	return "", "missing"
}

func contains(t *testing.T, what, text, want string) {
	t.Helper()
	if !strings.Contains(text, want) {
		t.Errorf("%s: output lacks %q:\n%s", what, want, text)
	}
}

// guestOutput waits for the guest's script to end and returns its
// output, which it logs.
func guestOutput(ctx context.Context, t *testing.T, p *rxe.Peer) string {
	t.Helper()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest output:\n%s", res.Output)
	return res.Output
}

// perfAddresses checks that a perftest tool printed its own key as theirs
// (what we parsed) and ours as the remote one.
func perfAddresses(t *testing.T, tool perftest.Tool, text string, theirs perftest.Dest) {
	t.Helper()
	contains(t, tool.String(), text, perftest.AddressLines(false, tool.Verb(), theirs, true))
	contains(t, tool.String(), text, perftest.AddressLines(true, tool.Verb(), ourKey(tool), true))
}

// pingpongAddresses checks that a pingpong tool printed its QPs' addresses
// as theirs (what we parsed) and ours as the remote ones.
func pingpongAddresses(t *testing.T, tool pingpong.Tool, text string, theirs []pingpong.Dest) {
	t.Helper()
	for i, d := range theirs {
		contains(t, tool.String(), text, pingpong.LocalAddressLine(tool, d))
		contains(t, tool.String(), text, pingpong.RemoteAddressLine(ourPingpong(i)))
	}
}

// TestStockServers runs our clients against the stock servers.
func TestStockServers(t *testing.T) {
	n, ctx := setup(t)
	perf := []struct {
		tool perftest.Tool
		args string
	}{
		{perftest.WriteBW, "-s 3000"},
		{perftest.ReadBW, "-s 3000"},
		{perftest.AtomicBW, ""},
		{perftest.ReadLat, "-s 64"},
	}
	pp := []struct {
		tool pingpong.Tool
		qps  int
		args string
	}{
		{pingpong.RC, 1, ""},
		{pingpong.UD, 1, ""},
		{pingpong.SRQ, 2, "-q 2"},
	}
	var script strings.Builder
	for _, p := range perf {
		addStep(&script, p.tool.String(), fmt.Sprintf("%s -d rxe0 -x 1 -F -n 5 %s", p.tool, p.args))
	}
	for _, p := range pp {
		// The servers wait for RDMA traffic that never comes.
		addStep(&script, p.tool.String(), fmt.Sprintf("timeout 3 %s -d rxe0 -g 1 -n 5 -s 64 %s", p.tool, p.args))
	}
	srv, err := n.StartPeer(ctx, rxe.PeerOptions{Name: "server", IP: "192.0.2.1/24", Script: script.String(), Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	dial := func() net.Conn {
		var c net.Conn
		err := n.Do(func() error {
			var err error
			c, err = oob.Dial(ctx, fmt.Sprintf("192.0.2.1:%d", oob.Port), 100*time.Millisecond)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	report := perftest.Report{Size: 3000, Iters: 5, BWPeak: 1.5, BWAvg: 1.25, MsgRate: 0.000123}
	gotKeys := map[perftest.Tool]perftest.Dest{}
	for _, p := range perf {
		c := dial()
		res, err := perftest.Run(ctx, c, perftest.Config{Tool: p.tool, Role: perftest.Client}, perftest.Params{MTU: perftest.MTU1024}, perftest.Hooks{
			Local:   func(perftest.Agreed) ([]perftest.Dest, error) { return []perftest.Dest{ourKey(p.tool)}, nil },
			Connect: func([]perftest.Dest) error { return nil },
			Report:  func() perftest.Report { return report },
		})
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v\nguest output so far:\n%s", p.tool, err, srv.Output())
		}
		if res.Agreed.RemoteVersion != perftest.Version || res.Agreed.MTU != perftest.MTU1024 {
			t.Errorf("%s: agreed %+v", p.tool, res.Agreed)
		}
		gotKeys[p.tool] = res.Remote[0]
	}
	gotPP := map[pingpong.Tool][]pingpong.Dest{}
	for _, p := range pp {
		c := dial()
		remote, err := pingpong.Client(ctx, c, ourPingpongs(p.qps), p.tool.Messages())
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v\nguest output so far:\n%s", p.tool, err, srv.Output())
		}
		gotPP[p.tool] = remote
	}
	out := guestOutput(ctx, t, srv)

	for _, p := range perf {
		text, exit := section(out, p.tool.String())
		if exit != "0" {
			t.Errorf("%s exited %s", p.tool, exit)
		}
		// What the server printed about itself is what we parsed, and what
		// it printed about us is what we sent.
		perfAddresses(t, p.tool, text, gotKeys[p.tool])
		if p.tool.BW() {
			contains(t, p.tool.String(), text, perftest.BWHeader(false))
			contains(t, p.tool.String(), text, perftest.BWLine(report, false))
		}
		if p.tool == perftest.AtomicBW {
			// The parameter block, as rxe and these flags make it.
			contains(t, p.tool.String(), text, perftest.TestInfo{Tool: p.tool, Role: perftest.Server, AtomicType: "FETCH_AND_ADD",
				Device: "rxe0", QPs: 1, Transport: "IB", Connection: "RC", PCIeRelaxOrder: "ON", CQMod: 5,
				MTU: perftest.MTU1024, LinkType: "Ethernet", GIDIndex: 1, OutReads: 128}.String())
		}
		if k := gotKeys[p.tool]; k.GID != netip.MustParseAddr("::ffff:192.0.2.1").As16() || k.QPN == 0 {
			t.Errorf("%s: server key %+v", p.tool, k)
		}
	}
	for _, p := range pp {
		text, exit := section(out, p.tool.String())
		if !killed(exit) {
			t.Errorf("%s exited %s, want killed by timeout", p.tool, exit)
		}
		pingpongAddresses(t, p.tool, text, gotPP[p.tool][:p.qps])
		for i := p.qps; i < p.tool.Messages(); i++ {
			if gotPP[p.tool][i] != (pingpong.Dest{}) {
				t.Errorf("%s: slot %d = %+v, want zero", p.tool, i, gotPP[p.tool][i])
			}
		}
	}
}

// TestStockClients runs the stock clients against our servers. The clients
// start their RDMA traffic after the exchange and never finish it, so they
// are stopped with timeout(1); the servers here end with the client's
// connection when they wait in a barrier the client never reaches.
func TestStockClients(t *testing.T) {
	n, ctx := setup(t)
	perf := []struct {
		tool perftest.Tool
		args string
		// failsAt is the step at which our server loses the client, "" when
		// the sequence ends before the client would close.
		failsAt string
	}{
		{perftest.WriteBW, "-s 3000", "sync"},
		{perftest.SendBW, "-s 3000", "sync"},
		{perftest.SendLat, "-s 64", "sync"},
		{perftest.WriteLat, "-s 64", ""},
	}
	pp := []struct {
		tool pingpong.Tool
		qps  int
		args string
	}{
		{pingpong.RC, 1, ""},
		{pingpong.SRQ, 2, "-q 2"},
	}
	var script strings.Builder
	for _, p := range perf {
		addStep(&script, p.tool.String(), fmt.Sprintf("timeout 3 %s -d rxe0 -x 1 -F -n 5 %s %s", p.tool, p.args, hostAddr))
	}
	for _, p := range pp {
		addStep(&script, p.tool.String(), fmt.Sprintf("timeout 3 %s -d rxe0 -g 1 -n 5 -s 64 %s %s", p.tool, p.args, hostAddr))
	}
	var ln net.Listener
	if err := n.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("%s:%d", hostAddr, oob.Port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err := n.StartPeer(ctx, rxe.PeerOptions{Name: "client", IP: "192.0.2.2/24", Script: script.String(), Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	gotKeys := map[perftest.Tool]perftest.Dest{}
	for _, p := range perf {
		c, err := oob.Accept(ctx, ln)
		if err != nil {
			t.Fatal(err)
		}
		var connected []perftest.Dest
		var runs int
		_, err = perftest.Run(ctx, c, perftest.Config{Tool: p.tool, Role: perftest.Server}, perftest.Params{MTU: perftest.MTU1024}, perftest.Hooks{
			Local:   func(perftest.Agreed) ([]perftest.Dest, error) { return []perftest.Dest{ourKey(p.tool)}, nil },
			Connect: func(r []perftest.Dest) error { connected = r; return nil },
			Run:     func(int) error { runs++; return nil },
		})
		c.Close()
		switch {
		case p.failsAt == "" && err != nil:
			t.Errorf("%s: %v", p.tool, err)
		case p.failsAt != "" && (err == nil || !strings.Contains(err.Error(), " "+p.failsAt+": ")):
			t.Errorf("%s: error %v, want one at step %q once the client is stopped", p.tool, err, p.failsAt)
		}
		if len(connected) != 1 || connected[0].GID != netip.MustParseAddr("::ffff:192.0.2.2").As16() {
			t.Errorf("%s: connect hook got %+v", p.tool, connected)
		} else {
			gotKeys[p.tool] = connected[0]
		}
		if wantRuns := map[bool]int{true: 1, false: 0}[p.tool != perftest.WriteBW]; runs != wantRuns {
			t.Errorf("%s: %d runs, want %d", p.tool, runs, wantRuns)
		}
	}
	gotPP := map[pingpong.Tool][]pingpong.Dest{}
	for _, p := range pp {
		c, err := oob.Accept(ctx, ln)
		if err != nil {
			t.Fatal(err)
		}
		remote, err := pingpong.Server(ctx, c, ourPingpongs(p.qps), p.tool.Messages(), nil)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", p.tool, err)
		}
		gotPP[p.tool] = remote
	}
	out := guestOutput(ctx, t, cli)
	for _, p := range perf {
		// Every client is stopped in its RDMA traffic.
		text, exit := section(out, p.tool.String())
		if !killed(exit) {
			t.Errorf("%s exited %s, want killed by timeout", p.tool, exit)
		}
		perfAddresses(t, p.tool, text, gotKeys[p.tool])
		if p.tool == perftest.SendLat {
			contains(t, p.tool.String(), text, perftest.TestInfo{Tool: p.tool, Role: perftest.Client, Device: "rxe0", QPs: 1,
				Transport: "IB", Connection: "RC", PCIeRelaxOrder: "ON", TxDepth: 1, MTU: perftest.MTU1024,
				LinkType: "Ethernet", GIDIndex: 1}.String()+perftest.AddressLines(false, p.tool.Verb(), gotKeys[p.tool], true))
			contains(t, p.tool.String(), text, perftest.ResultLine+perftest.LatHeader())
		}
	}
	for _, p := range pp {
		text, exit := section(out, p.tool.String())
		if !killed(exit) {
			t.Errorf("%s exited %s, want killed by timeout", p.tool, exit)
		}
		pingpongAddresses(t, p.tool, text, gotPP[p.tool][:p.qps])
	}
}
