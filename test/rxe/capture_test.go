package rxe

import "testing"

func TestParseCaptureStats(t *testing.T) {
	for _, c := range []struct {
		stderr   string
		want     CaptureStats
		complete bool
	}{
		{"tcpdump: listening on br0, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n" +
			"19994 packets captured\n19994 packets received by filter\n0 packets dropped by kernel\n",
			CaptureStats{Known: true, Captured: 19994, Received: 19994}, true},
		{"16119 packets captured\r\n19994 packets received by filter\n3875 packets dropped by kernel\n",
			CaptureStats{Known: true, Captured: 16119, Received: 19994, Dropped: 3875}, false},
		// Left in the kernel's buffer when tcpdump stopped.
		{"19976 packets captured\n19994 packets received by filter\n0 packets dropped by kernel\n",
			CaptureStats{Known: true, Captured: 19976, Received: 19994}, false},
		{"1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n",
			CaptureStats{Known: true, Captured: 1, Received: 1}, true},
		{"tcpdump: br0: No such device exists\n", CaptureStats{}, false},
	} {
		got := parseCaptureStats(c.stderr)
		if got != c.want || got.Complete() != c.complete {
			t.Errorf("%q: %+v (complete %v), want %+v (%v)", c.stderr, got, got.Complete(), c.want, c.complete)
		}
	}
}
