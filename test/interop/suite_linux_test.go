package interop

import (
	"strings"
	"testing"
)

// both returns the step in both directions: rxe server and uroce client,
// then uroce server and rxe client.
func both(mk func(guestClient bool) step) []step {
	return []step{mk(false), mk(true)}
}

func ppBoth(tool, args string, extra ...string) []step {
	return both(func(gc bool) step { return ppStep(tool, args, gc, extra...) })
}

func perfBoth(tool perfTool, args string, extra ...string) []step {
	return both(func(gc bool) step { return perfStep(tool, args, gc, extra...) })
}

func concat(ss ...[]step) []step {
	var out []step
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

// TestMTU1024 runs every tool both ways at path MTU 1024 (netdev 1500)
// without loss, with message sizes from 1 byte to 1 MiB, including sizes
// that need padding.
func TestMTU1024(t *testing.T) {
	t.Parallel()
	g := group{mtu: 1500, pcap: "mtu1024.pcap", steps: concat(
		ppBoth("rc", "-n 50 -s 4096"),
		ppBoth("rc", "-n 10 -s 1"),
		[]step{ppStep("rc", "-n 10 -s 13", false), ppStep("rc", "-n 3 -s 1048576", true)},
		ppBoth("uc", "-n 20 -s 4097"),
		[]step{ppStep("ud", "-n 20 -s 1024", false), ppStep("ud", "-n 20 -s 1", true)},
		ppBoth("srq", "-n 40 -s 64 -q 4"),
		[]step{perfStep(writeBW, "-n 200 -s 1", false), perfStep(writeBW, "-n 5 -s 1048576", true)},
		[]step{perfStep(readBW, "-n 20 -s 1048576", false), perfStep(readBW, "-n 100 -s 13", true)},
		[]step{perfStep(sendBW, "-n 200 -s 3", false), perfStep(sendBW, "-n 5 -s 1048576", true)},
		perfBoth(atomicBW, "-n 200"),
		[]step{perfStep(writeLat, "-n 50 -s 2", false), perfStep(writeLat, "-n 20 -s 65537", true)},
		[]step{perfStep(readLat, "-n 20 -s 1048576", false), perfStep(readLat, "-n 50 -s 1", true)},
		[]step{perfStep(sendLat, "-n 50 -s 5", false), perfStep(sendLat, "-n 20 -s 100000", true)},
	)}
	g.run(t)
}

var _ = strings.Fields
