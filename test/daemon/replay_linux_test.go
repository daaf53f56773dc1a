package daemon_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestReplayUroce replays rdma_rxe's recorded perftest clients at a
// uroce perf server on the far end of a veth pair (uroce replay -d, the
// QP set up through perftest's exchange). The report names the real
// differences, and only those: uroce's READ responses and ACKs
// advertise the end-to-end credits of a QP without an SRQ where
// rdma_rxe's say 31 ("not used"), and uroce coalesces ACKs where
// rdma_rxe acknowledged every message (how many it folds depends on
// timing).
func TestReplayUroce(t *testing.T) {
	shared := filepath.Join("..", "..", "..", "shared", "pcaps", "rxe-6.1")
	if _, err := os.Stat(shared); err != nil {
		t.Skipf("no reference captures: %v", err)
	}
	n := newNetDaemons(t, 1500, false)
	for _, c := range []struct {
		server  []string
		replay  []string
		capture string
		exit    int
		want    string
	}{
		{[]string{"perf", "read", "-F", "-n", "5", "-s", "3000"}, []string{"--perftest", "ib_read_bw", "--tolerate", "payload"},
			"read_bw.pcap", 1, `(?s)DIFFERS: syndrome credits=31 -> credits=\d+;.*the live peer differs: syndrome \d+\n`},
		{[]string{"perf", "write", "-F", "-n", "5", "-s", "3000"}, []string{"--perftest", "ib_write_bw"},
			"write_bw.pcap", 1, `the live peer differs: coalesced \d+(, syndrome \d+)?\n`},
	} {
		t.Run(c.capture, func(t *testing.T) {
			srv := n.launchRoot(1, append(c.server, "-d", n.Dev[1], "--xdp-mode", "generic")...)
			args := append([]string{"netns", "exec", n.NS[0].Name(), uroceBin, "replay", "-d", n.Dev[0], "--xdp-mode", "generic"}, c.replay...)
			args = append(args, filepath.Join(shared, c.capture), n.IP[1].String())
			out, err := exec.Command("ip", args...).CombinedOutput()
			code := exitCode(t, err)
			if code != c.exit || !regexp.MustCompile(c.want).Match(out) {
				t.Errorf("replay exited %d (want %d), want %q:\n%s", code, c.exit, c.want, out)
			}
			if err := srv.wait(t, time.Minute); err != nil {
				t.Errorf("uroce perf server: %v\n%s", err, srv.out.String())
			}
		})
	}
}

// TestReplayPeerFailures: a replay at a peer that cannot set the QP up
// (nobody serves perftest's exchange) ends with a message that says so
// and exit status 1; one at a QP nobody answers for (a QPN given by hand,
// the far end's interface without RoCE) reports every answer missing,
// exit status 1, each after --timeout: neither hangs.
func TestReplayPeerFailures(t *testing.T) {
	n := newNetDaemons(t, 1500, false)
	capture := filepath.Join("..", "..", "pcaps", "rxe-6.1", "write_bw-uroce_client.pcap")
	for _, c := range []struct {
		name string
		how  []string
		exit int
		want string
	}{
		{"no exchange", []string{"--perftest", "ib_write_bw", "--port", "18599"}, 1,
			`connection refused \(kept trying for 10s: .*is the ib_write_bw server running at 192\.0\.2\.2:18599\?`},
		{"silent peer", []string{"--dest-qpn", "0x99", "--rkey", "0x1234", "--va", "0x10000"}, 1,
			`(?s)live: none \(timed out\).*the live peer differs: missing \d+\n`},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"netns", "exec", n.NS[0].Name(), uroceBin, "replay", "-d", n.Dev[0], "--xdp-mode", "generic",
				"--timeout", "300ms"}, c.how...)
			args = append(args, capture, n.IP[1].String())
			r := &run{cmd: exec.Command("ip", args...)}
			r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
			if err := r.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			code := exitCode(t, r.wait(t, 2*time.Minute)) // a hang fails in wait
			if code != c.exit || !regexp.MustCompile(c.want).MatchString(r.out.String()) {
				t.Errorf("replay exited %d (want %d), want %q:\n%s", code, c.exit, c.want, r.out.String())
			}
		})
	}
}

// exitCode is the exit status of a command that ended with err (0 for
// nil); an error that is no exit status fails the test.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}
