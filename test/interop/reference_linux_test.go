package interop

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteReferenceCaptures writes the small captures of pcaps/ (see
// pcaps/README.md): one file per step, cut out of the group's capture by
// the time the step ran. It runs only with UROCE_PCAPS_OUT set to the
// directory to write to; TestReferenceCaptures checks the files.
func TestWriteReferenceCaptures(t *testing.T) {
	out := os.Getenv("UROCE_PCAPS_OUT")
	if out == "" {
		t.Skip("set UROCE_PCAPS_OUT to a directory to write the reference captures")
	}
	named := func(name string, s step) step {
		s.name = name
		return s
	}
	rnr := perfStep(sendBW, "-n 5 -s 64", true, "--late-recv", "100ms")
	rnr.capture = expectRNR(uroceAddr)
	bad := perfStep(writeBW, "-n 5 -s 64", true, "--bad-rkey")
	bad.uroceExit, bad.guestExit = 1, 1
	bad.capture = expectNAKs("remote_access_error", uroceAddr)
	bad = outputHas(bad, []string{" Failed status 10: wr_id 0"}, nil)
	loss := ppStep("rc", "-n 5 -s 64", false, "--drop", "0.3", "--fault-seed", "3")
	loss.capture = lossCapture
	groups := []group{
		{mtu: 1500, steps: []step{
			named("rc_pingpong-uroce_client", ppStep("rc", "-n 3 -s 13", false)),
			named("rc_pingpong-uroce_server", ppStep("rc", "-n 3 -s 64", true)),
			named("ud_pingpong-uroce_server", ppStep("ud", "-n 3 -s 64", true)),
			named("srq_pingpong-uroce_client", ppStep("srq", "-n 4 -s 64 -q 2", false)),
			named("write_bw-uroce_client", perfStep(writeBW, "-n 5 -s 3000", false)),
			named("read_bw-uroce_server", perfStep(readBW, "-n 5 -s 3000", true)),
			named("atomic_bw-uroce_server", perfStep(atomicBW, "-n 5", true, "--verify")),
			named("send_lat-uroce_client", perfStep(sendLat, "-n 5 -s 64", false)),
			named("rnr-uroce_receiver", rnr),
			named("bad_rkey-uroce_target", bad),
			named("retransmit-uroce_client", loss),
		}},
		{mtu: 9000, steps: []step{
			named("write_bw-mtu4096-uroce_server", perfStep(writeBW, "-n 5 -s 10000", true)),
		}},
	}
	for _, g := range groups {
		g.pcap = "reference.pcap"
		path, windows := g.runKeep(t)
		for i, w := range windows {
			// A little past the step's end, for late ACKs, but not into
			// the next step.
			to := w.to.Add(200 * time.Millisecond)
			if i+1 < len(windows) && windows[i+1].from.Before(to) {
				to = windows[i+1].from
			}
			dst := filepath.Join(out, w.name+".pcap")
			n, err := writeWindow(path, dst, w.from, to)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d frames", dst, n)
		}
	}
}
