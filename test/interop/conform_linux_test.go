package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/uroce/uroce/conform"
)

// TestConformRxe runs the catalogue's scenarios that a stock perftest
// server can host (its region grants one kind of remote access) against
// rdma_rxe on Debian 12's 6.1 kernel, one server run per scenario, and
// those where rxe is the requester that a stock perftest client can make
// (against `uroce conform --serve`, one client run per scenario), and
// checks each outcome against rxe's checked-in results
// (conform/results/rxe-6.1.txt).
func TestConformRxe(t *testing.T) {
	t.Parallel()
	conformRxe(t, "6.1")
}

// TestConformRxe612 is TestConformRxe on the 6.12 kernel (Debian 12's
// backports), against conform/results/rxe-6.12.txt.
func TestConformRxe612(t *testing.T) {
	t.Parallel()
	conformRxe(t, "6.12")
}

func conformRxe(t *testing.T, kernel string) {
	all, err := conform.Catalogue()
	if err != nil {
		t.Fatal(err)
	}
	table := "rxe-" + kernel
	want, err := conform.Results(table)
	if err != nil {
		t.Fatal(err)
	}
	var steps []step
	peerBin := buildConformPeer(t)
	for _, sc := range all {
		n := sc.Needs()
		if n.Peer {
			if st, ok := conformRequester(t, sc, want); ok {
				steps = append(steps, st)
			} else if st, ok := conformPeerProgram(t, sc, want, peerBin != nil); ok {
				steps = append(steps, st)
			}
			continue
		}
		var tool, guest string
		peerArgs := []string{"--perftest"}
		switch {
		case n.UD && !n.Peer:
			// ibv_ud_pingpong's server answers the datagram it
			// receives: that shows its receive completion.
			tool, guest, peerArgs = "ud", "ibv_ud_pingpong -d rxe0 -g 1 -s 64 -n 1", []string{"--pingpong"}
		case n.Read || n.Write && n.Atomic || n.Flush || sc.Receives > 0 || n.UD || n.Delivered:
			// No stock server grants it: conform_peer -S does.
			if st, ok := conformPeerServer(t, sc, want, peerBin != nil, kernel); ok {
				steps = append(steps, st)
			}
			continue
		case n.Placement && kernel == "6.1":
			continue // rdma_rxe has FLUSH and ATOMIC_WRITE from 6.2 on
		case n.Atomic:
			tool, guest = "ib_atomic_bw", "ib_atomic_bw -d rxe0 -x 1 -n 5"
		default:
			tool, guest = "ib_write_bw", "ib_write_bw -d rxe0 -x 1 -n 5 -s 64"
		}
		_, exit, res, line := expectFor(t, sc.Name, want)
		name := sc.Name
		steps = append(steps, step{name: "conform-" + name, guest: guest, uroceExit: exit, badFrames: sendsBadICRC(sc),
			uroce: append([]string{"conform", "-k", "^" + regexp.QuoteMeta(name) + "$", "--timeout", "2s"}, append(peerArgs, tool)...),
			check: func(t *testing.T, g, u string) {
				if !line.MatchString(u) {
					t.Errorf("%s: want %s:\n%s", name, res, u)
				}
			},
			// The scenarios make NAKs, gaps and drops on purpose; only
			// the frames meant to be bad may be.
			capture: func(t *testing.T, f *findings) {
				if f.counts.ICRCBad != countBadICRC(sc) {
					t.Errorf("%s: %d frames with a bad ICRC, the scenario sends %d: %s", name, f.counts.ICRCBad, countBadICRC(sc), f)
				}
			}})
	}
	g := group{mtu: 1500, pcap: "conform-" + kernel + ".pcap", stepTimeout: 60e9, steps: steps, kernel: kernel}
	if peerBin != nil {
		g.prelude = guestFile("/tmp/conform_peer", peerBin)
	}
	g.run(t)
}

// buildConformPeer builds conform_peer (conform/peer) with gcc against
// the system's libibverbs, for the guest; nil (the scenarios it makes are
// left out, and said so) without gcc or the headers.
func buildConformPeer(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "conform_peer")
	out, err := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-o", bin, "../../conform/peer/conform_peer.c", "-libverbs").CombinedOutput()
	if err != nil {
		t.Logf("conform_peer not built, its scenarios left out: %v\n%s", err, out)
		return nil
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// conformPeerProgram is the step of a scenario where rxe is the
// requester of requests no stock client makes: conform_peer, run on the
// guest on rxe0, posts them against `uroce conform --serve-peer`. It
// reports false for a scenario conform_peer cannot make either.
func conformPeerProgram(t *testing.T, sc *conform.Scenario, want map[string]conform.Expected, built bool) (step, bool) {
	p, err := sc.PeerProgram()
	if err != nil || !built {
		t.Logf("%s: skipped: conform_peer: %v", sc.Name, err)
		return step{}, false
	}
	w, exit, res, line := expectFor(t, sc.Name, want)
	name := sc.Name
	// The catalogue's scenarios that set the peer's retry counts answer
	// its request never (or with RNR NAKs only): it must fail with the
	// count exceeded, and conform_peer then exits 1. Otherwise every
	// operation succeeds.
	status, guestExit := "success", 0
	switch {
	case sc.RetryCnt >= 0:
		status, guestExit = "transport retry counter exceeded", 1
	case sc.RNRRetry >= 0:
		status, guestExit = "RNR retry counter exceeded", 1
	}
	st := step{name: "conform-" + name, guest: "/tmp/" + p.Command("rxe0", "1", conform.ServeRKey, conform.ServeVA), guestClient: true,
		uroceExit: exit, guestExit: guestExit,
		uroce: []string{"conform", "-k", "^" + regexp.QuoteMeta(name) + "$", "--serve-peer", "--timeout", "2s"},
		check: func(t *testing.T, g, u string) {
			if !line.MatchString(u) {
				t.Errorf("%s: want %s:\n%s", name, res, u)
			}
			if w.Pass && (strings.Count(g, "completion ") != len(p.Ops) || strings.Count(g, ": "+status+"\n") != len(p.Ops)) {
				t.Errorf("%s: want conform_peer's %d operations to end with %q:\n%s", name, len(p.Ops), status, g)
			}
		},
		// The scenario's NAKs, drops and silences are on purpose.
		capture: func(t *testing.T, f *findings) {
			if f.counts.ICRCBad != 0 {
				t.Errorf("%s: %d frames with a bad ICRC: %s", name, f.counts.ICRCBad, f)
			}
		}}
	return st, true
}

// conformRequester is the step of a scenario where rxe is the
// requester: the stock perftest client the scenario names runs on the
// guest against `uroce conform --serve`, which plays the responder. It
// reports false for a scenario no stock client can make (skipped, as
// uroce conform prints).
func conformRequester(t *testing.T, sc *conform.Scenario, want map[string]conform.Expected) (step, bool) {
	c, err := sc.StockClient()
	if err != nil {
		t.Logf("%s: skipped: %v", sc.Name, err)
		return step{}, false
	}
	_, exit, res, line := expectFor(t, sc.Name, want)
	name := sc.Name
	return step{name: "conform-" + name, guest: c.Command("rxe0", "1"), guestClient: true, uroceExit: exit,
		uroce: []string{"conform", "-k", "^" + regexp.QuoteMeta(name) + "$", "--serve", "--timeout", "2s"},
		check: func(t *testing.T, g, u string) {
			if !line.MatchString(u) {
				t.Errorf("%s: want %s:\n%s", name, res, u)
			}
		},
		// The scenario's NAKs, drops and ghost ACKs are on purpose.
		capture: func(t *testing.T, f *findings) {
			if f.counts.ICRCBad != 0 {
				t.Errorf("%s: %d frames with a bad ICRC: %s", name, f.counts.ICRCBad, f)
			}
		}}, true
}

// expectFor returns a scenario's outcome in rxe's results table, the
// exit status of `uroce conform` running it alone, PASS or FAIL, and
// the line it prints for it.
func expectFor(t *testing.T, name string, want map[string]conform.Expected) (conform.Expected, int, string, *regexp.Regexp) {
	t.Helper()
	w, ok := want[name]
	if !ok {
		t.Fatalf("no rxe result for %s in the results table", name)
	}
	exit, res := 0, "PASS"
	if !w.Pass {
		exit, res = 1, "FAIL"
	}
	return w, exit, res, regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +` + res + ` `)
}

func countBadICRC(sc *conform.Scenario) int {
	n := 0
	for _, st := range sc.Steps {
		if st.Kind == conform.Send && st.P.BadICRC {
			n++
		}
	}
	return n
}

func sendsBadICRC(sc *conform.Scenario) bool { return countBadICRC(sc) > 0 }

// conformPeerServer is the step of a responder scenario no stock server
// can host: conform_peer -S on the guest, on rxe0 (its region open to
// WRITEs, READs and atomics, the scenario's receives posted), against
// `uroce conform --conform-peer`. It reports false for a scenario
// conform_peer cannot host either, or one rdma_rxe of this kernel does
// not implement (FLUSH and ATOMIC_WRITE before 6.2).
func conformPeerServer(t *testing.T, sc *conform.Scenario, want map[string]conform.Expected, built bool, kernel string) (step, bool) {
	p, err := sc.PeerServer()
	if err != nil || !built || sc.Needs().Placement && kernel == "6.1" {
		t.Logf("%s: skipped: conform_peer -S: %v", sc.Name, err)
		return step{}, false
	}
	_, exit, res, line := expectFor(t, sc.Name, want)
	name := sc.Name
	return step{name: "conform-" + name, guest: "/tmp/" + p.Command("rxe0", "1"), uroceExit: exit, badFrames: sendsBadICRC(sc),
		uroce: []string{"conform", "-k", "^" + regexp.QuoteMeta(name) + "$", "--conform-peer", "--timeout", "2s"},
		check: func(t *testing.T, g, u string) {
			if !line.MatchString(u) {
				t.Errorf("%s: want %s:\n%s\nconform_peer:\n%s", name, res, u, g)
			}
		},
		capture: func(t *testing.T, f *findings) {
			if f.counts.ICRCBad != countBadICRC(sc) {
				t.Errorf("%s: %d frames with a bad ICRC, the scenario sends %d: %s", name, f.counts.ICRCBad, countBadICRC(sc), f)
			}
		}}, true
}
