package guestbed

import (
	"strings"
	"testing"
	"time"
)

// Each guest deletes its rxe0 right before its first uroce step and adds
// it back right before a later stock step; every step has its own port.
func TestScripts(t *testing.T) {
	var steps []step
	for _, p := range pairings {
		for _, tl := range tools {
			steps = append(steps, step{p: p, t: tl, port: 18515 + len(steps)})
		}
	}
	iters := map[bool]int{false: 10, true: 10}
	for _, c := range []struct {
		client      bool
		deleteAt    string
		addAt       string
		first, last string
	}{
		{true, "uroce-rxe-ib_write_bw", "rxe-uroce-ib_write_bw", "try timeout 60 ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 10 -p 18515 192.0.2.2",
			"try timeout 60 ib_write_lat -d rxe0 -x 1 -F -s 64 -n 10 -p 18526 192.0.2.2"},
		{false, "uroce-uroce-ib_write_bw", "", "timeout 60 ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 10 -p 18515 2>&1",
			"timeout 60 uroce perf write --lat -d eth0 --xdp-mode generic -s 64 -n 10 -p 18526 --stats 2>&1"},
	} {
		s := script(steps, c.client, iters, "generic", "", time.Minute)
		if n := strings.Count(s, "rdma link delete rxe0 ||"); n != 1 {
			t.Errorf("client %v: %d deletions of rxe0, want 1:\n%s", c.client, n, s)
		}
		if !strings.Contains(s, "rdma link delete rxe0 || echo 'rdma link delete rxe0 failed'\necho '== begin "+c.deleteAt+"'") {
			t.Errorf("client %v: rxe0 not deleted right before %s:\n%s", c.client, c.deleteAt, s)
		}
		adds := strings.Count(s, "rdma link add rxe0 type")
		switch {
		case c.addAt == "" && adds != 0:
			t.Errorf("client %v: rxe0 added again:\n%s", c.client, s)
		case c.addAt != "" && (adds != 1 || !strings.Contains(s, "done\necho '== begin "+c.addAt+"'")):
			t.Errorf("client %v: rxe0 not added once right before %s:\n%s", c.client, c.addAt, s)
		}
		for _, line := range []string{c.first, c.last} {
			if !strings.Contains(s, "\n"+line+"\n") {
				t.Errorf("client %v: no line %q in:\n%s", c.client, line, s)
			}
		}
	}
}

// The result lines as perftest 4.5 and uroce perf print them.
func TestParse(t *testing.T) {
	bw := parse(tools[0], " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      1000             5.94               5.49   \t\t   0.000088\n")
	if !bw.ok || bw.peak != 5.94 || bw.avg != 5.49 {
		t.Errorf("bw line: %+v", bw)
	}
	lat := parse(tools[2], " 64      1000          345.16         5033.93      650.22   \t       869.86      \t660.15 \t\t3522.88 \t\t5033.93\n")
	if !lat.ok || lat.typical != 650.22 || lat.mean != 869.86 || lat.p99 != 3522.88 {
		t.Errorf("lat line: %+v", lat)
	}
	if f := parse(tools[1], "Completion with error at client\n"); f.ok {
		t.Errorf("no result line, parsed %+v", f)
	}
}
