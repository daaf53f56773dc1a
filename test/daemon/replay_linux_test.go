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
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.exit || !regexp.MustCompile(c.want).Match(out) {
				t.Errorf("replay exited %d (want %d), want %q:\n%s", code, c.exit, c.want, out)
			}
			if err := srv.wait(t, time.Minute); err != nil {
				t.Errorf("uroce perf server: %v\n%s", err, srv.out.String())
			}
		})
	}
}
