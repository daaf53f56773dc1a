package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/conform"
)

// TestConformPeerUroce runs every requester scenario conform_peer can
// make with uroce as the requester (those no stock client makes too: a
// WRITE and a READ outstanding on one QP, UD sends with a controlled and
// a plain Q_Key, retry counts set): conform_peer, built with gcc against
// the system's libibverbs, runs unmodified through uroce's libibverbs and
// a daemon on one end of a veth pair, as user nobody; `uroce conform
// --serve-peer` plays the responder on the other end. Each outcome is
// uroce's in its results table, and conform_peer's operations end as the
// scenario has them: with the retry count exceeded where it sets one
// (the catalogue's such scenarios never answer, or with RNR NAKs only),
// successfully otherwise.
func TestConformPeerUroce(t *testing.T) {
	bin := buildConformPeer(t)
	all, want, n := conformNet(t)
	ran := 0
	for _, sc := range all {
		p, err := sc.PeerProgram()
		if err != nil {
			continue
		}
		ran++
		t.Run(sc.Name, func(t *testing.T) {
			srv := n.launchRoot(0, "conform", "-d", n.Dev[0], "--xdp-mode", "generic", "--serve-peer",
				"-k", "^"+regexp.QuoteMeta(sc.Name)+"$", "--timeout", "2s", n.IP[1].String())
			args := strings.Fields(p.Command("uroce0", "1", conform.ServeRKey, conform.ServeVA))
			args[0] = bin
			status := "success"
			switch {
			case sc.RetryCnt >= 0:
				status = "transport retry counter exceeded"
			case sc.RNRRetry >= 0:
				status = "RNR retry counter exceeded"
			}
			cli, err := retryClient(t, n, args)
			if (err != nil) != (status != "success") {
				t.Errorf("conform_peer: %v\n%s", err, cli.out.String())
			}
			if err := srv.wait(t, time.Minute); (err != nil) == want[sc.Name].Pass {
				t.Errorf("uroce conform: %v\n%s", err, srv.out.String())
			}
			checkOutcome(t, sc.Name, want, srv.out.String(), cli.out.String())
			if c := strings.Count(cli.out.String(), ": "+status+"\n"); c != len(p.Ops) {
				t.Errorf("%d of conform_peer's %d operations ended with %q:\n%s", c, len(p.Ops), status, cli.out.String())
			}
		})
	}
	if ran < 8 {
		t.Errorf("conform_peer makes %d requester scenarios", ran)
	}
}

// buildConformPeer builds conform_peer with gcc into a directory user
// nobody can read, removed when the test ends.
func buildConformPeer(t *testing.T) string {
	t.Helper()
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("skipping: building conform_peer needs gcc")
	}
	dir, err := os.MkdirTemp("", "uroce-conform-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "conform_peer")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-o", bin, "../../conform/peer/conform_peer.c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("building conform_peer: %v\n%s", err, out)
	}
	return bin
}

// TestConformPeerServerUroce runs every responder scenario conform_peer
// -S can host (all but FLUSH's and QP1's) with uroce as the responder:
// conform_peer, unmodified, through uroce's libibverbs and a daemon on
// one end of a veth pair, as user nobody, its region open to WRITEs,
// READs and atomics and the scenario's receives posted; `uroce conform
// --conform-peer` on the other end. Each outcome must be uroce's in its
// results table (conform/results/uroce.txt).
func TestConformPeerServerUroce(t *testing.T) {
	bin := buildConformPeer(t)
	all, want, n := conformNet(t)
	ran := 0
	for _, sc := range all {
		ps, err := sc.PeerServer()
		if err != nil {
			continue
		}
		ran++
		t.Run(sc.Name, func(t *testing.T) {
			args := strings.Fields(ps.Command("uroce0", "1"))
			args[0] = bin
			srv := n.stockTool(1, args...)
			time.Sleep(100 * time.Millisecond)
			cli := n.launchRoot(0, "conform", "-d", n.Dev[0], "--xdp-mode", "generic", "--conform-peer",
				"-k", "^"+regexp.QuoteMeta(sc.Name)+"$", "--timeout", "2s", n.IP[1].String())
			cli.wait(t, time.Minute)
			if err := srv.wait(t, time.Minute); err != nil {
				t.Errorf("conform_peer -S: %v\n%s", err, srv.out.String())
			}
			checkOutcome(t, sc.Name, want, cli.out.String(), srv.out.String())
		})
	}
	if ran < 20 {
		t.Errorf("conform_peer hosts %d scenarios", ran)
	}
}

// TestConformServeUroce runs the requester scenarios a stock perftest
// client makes with uroce as the requester: the stock client of each
// (ib_write_bw, ib_read_bw or ib_send_bw -n 5 -t 1), unmodified, through
// uroce's libibverbs and a daemon, as user nobody, against `uroce
// conform --serve` on the other end of the veth pair. Each outcome must
// be uroce's in its results table, and the client must end normally.
func TestConformServeUroce(t *testing.T) {
	if !haveLib {
		t.Skip("skipping: " + libErr)
	}
	all, want, n := conformNet(t)
	ran := 0
	for _, sc := range all {
		c, err := sc.StockClient()
		if err != nil {
			continue
		}
		ran++
		t.Run(sc.Name, func(t *testing.T) {
			srv := n.launchRoot(0, "conform", "-d", n.Dev[0], "--xdp-mode", "generic", "--serve",
				"-k", "^"+regexp.QuoteMeta(sc.Name)+"$", "--timeout", "2s", n.IP[1].String())
			args := strings.Fields(c.Command("uroce0", "1"))
			cli, err := retryClient(t, n, args)
			if err != nil {
				t.Errorf("%s: %v\n%s", c.Tool, err, cli.out.String())
			}
			srv.wait(t, time.Minute)
			checkOutcome(t, sc.Name, want, srv.out.String(), cli.out.String())
		})
	}
	if ran < 4 {
		t.Errorf("%d requester scenarios have a stock client", ran)
	}
}

// conformNet is what the conformance tests share: the catalogue, uroce's
// results table, and a veth pair whose end 1 runs a daemon (end 0 is
// uroce conform's, raw).
func conformNet(t *testing.T) ([]*conform.Scenario, map[string]conform.Expected, *net2) {
	t.Helper()
	all, err := conform.Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	want, err := conform.Results("uroce")
	if err != nil {
		t.Fatal(err)
	}
	n := newNetDaemons(t, 1500, false)
	n.Start(1)
	return all, want, n
}

// checkOutcome fails t unless uroce conform's output shows scenario
// name's outcome in uroce's results table; peer is the live peer's
// output, shown with a failure.
func checkOutcome(t *testing.T, name string, want map[string]conform.Expected, out, peer string) {
	t.Helper()
	res := "PASS"
	if !want[name].Pass {
		res = "FAIL"
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +` + res + ` `).MatchString(out) {
		t.Errorf("want %s:\n%s\nthe peer:\n%s", res, out, peer)
	}
}

// retryClient runs args on daemon 1 through uroce run, again while the
// server on end 0 does not listen yet ("Couldn't connect to"), and
// returns the last run.
func retryClient(t *testing.T, n *net2, args []string) (*run, error) {
	t.Helper()
	for tries := 0; ; tries++ {
		time.Sleep(200 * time.Millisecond)
		cli := n.stockTool(1, append(args, n.IP[0].String())...)
		err := cli.wait(t, time.Minute)
		if err == nil || tries == 20 || !strings.Contains(cli.out.String(), "Couldn't connect to ") {
			return cli, err
		}
	}
}
