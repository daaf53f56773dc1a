package interop

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestRping runs uroce rping against the stock rping on rdma_rxe, both
// roles, with -V (each side's check) and -v (the ping data compared).
func TestRping(t *testing.T) {
	t.Parallel()
	var steps []step
	for _, size := range []int{64, 100, 65535} {
		steps = append(steps, rpingStep(size, false), rpingStep(size, true))
	}
	steps = append(steps, rpingStepN(64, 100, false), rpingStepN(4096, 100, true))
	steps = append(steps, rpingNoListener())
	g := group{mtu: 1500, pcap: "rping.pcap", stepTimeout: 60e9, steps: steps}
	g.run(t)
}

var rpingDataRE = regexp.MustCompile(`(?m)^(?:server )?ping data: (.*)$`)

// rpingStep is 10 pings of size bytes, the guest the server (uroce
// dials it, retrying while it does not listen yet) or the client.
func rpingStep(size int, guestClient bool) step { return rpingStepN(size, 10, guestClient) }

// rpingStepN is rpingStep with count pings.
func rpingStepN(size, count int, guestClient bool) step {
	opts := fmt.Sprintf("-C %d -S %d -V -v", count, size)
	s := step{guestClient: guestClient}
	// The guest's client prints through the harness's retry helper in
	// one burst, which the serial console does not carry whole at 64
	// KiB a line: there the guest only validates (-V).
	guestVerbose := !guestClient || size < 4096
	if guestClient {
		s.name = fmt.Sprintf("rping-gc-S%d", size)
		if count != 10 {
			s.name += fmt.Sprintf("-C%d", count)
		}
		gopts := opts
		if !guestVerbose {
			gopts = fmt.Sprintf("-C %d -S %d -V", count, size)
		}
		s.guest = "rping -c " + gopts + " -a" // the harness adds uroce's address
		s.uroce = append([]string{"rping", "-s"}, splitArgs(opts)...)
	} else {
		s.name = fmt.Sprintf("rping-gs-S%d", size)
		if count != 10 {
			s.name += fmt.Sprintf("-C%d", count)
		}
		s.guest = "rping -s -a " + guestAddr + " " + opts
		s.uroce = append([]string{"rping", "-c", "--connect-wait=30s"}, splitArgs(opts)...)
	}
	name := s.name
	s.check = func(t *testing.T, g, u string) {
		t.Helper()
		gd, ud := rpingData(g), rpingData(u)
		if guestVerbose && strings.Join(gd, "\n") != strings.Join(ud, "\n") {
			t.Errorf("%s: ping data differ:\nguest %.200q\nuroce %.200q", name, gd, ud)
		}
		if len(ud) != count {
			t.Errorf("%s: %d pings printed, want %d", name, len(ud), count)
		}
		for i, d := range ud {
			if want := rpingString(i, size); d != want {
				t.Errorf("%s: ping %d: %d bytes %.40q, want %d bytes %.40q", name, i, len(d), d, len(want), want)
			}
		}
		server := u
		if !guestClient {
			server = g
		}
		if !strings.Contains(server, "server DISCONNECT EVENT...") {
			t.Errorf("%s: the server did not see the disconnect", name)
		}
	}
	return s
}

// rpingString is ping i of size bytes as rping's client writes it (the
// NUL left out): "rdma-ping-i: ", then letters 'A' to 'z' from the i-th
// on, wrapping.
func rpingString(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	for c := byte(65 + i%58); len(b) < size-1; c++ {
		if c > 122 {
			c = 65
		}
		b = append(b, c)
	}
	return string(b)
}

func rpingData(out string) []string {
	var d []string
	for _, m := range rpingDataRE.FindAllStringSubmatch(out, -1) {
		d = append(d, m[1])
	}
	return d
}

// rpingNoListener: connections to ports nobody listens on are refused
// both ways, and both tools say so: uroce's client to the guest (rxe's
// REJ "invalid service ID"), and, while that client retries, the
// guest's client to uroce (uroce's agent answers the same).
func rpingNoListener() step {
	return step{
		name: "rping-nolistener",
		// The guest outlives uroce's retries: its rdma_cm must answer
		// them all.
		guest:     "sh -c 'sleep 1; rping -c -a " + uroceAddr + " -p 7176 -C 1; rc=$?; sleep 3; exit $rc'",
		guestExit: 255,
		uroce:     []string{"rping", "-c", "-p", "7175", "-C", "1", "--connect-wait=2s"},
		uroceExit: 1,
		check: func(t *testing.T, g, u string) {
			t.Helper()
			if !strings.Contains(g, "RDMA_CM_EVENT_REJECTED, error 8") {
				t.Errorf("guest: no rejection in %q", g)
			}
			if !strings.Contains(u, "cma event RDMA_CM_EVENT_REJECTED, error 8") ||
				!strings.Contains(u, "nobody listens on "+guestAddr+":7175") {
				t.Errorf("uroce: no rejection in %q", u)
			}
		},
	}
}
