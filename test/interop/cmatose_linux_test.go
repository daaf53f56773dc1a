package interop

import (
	"fmt"
	"strings"
	"testing"
)

// TestCmatose runs uroce cmatose and uroce udaddy against the stock
// ucmatose and udaddy on rdma_rxe, both roles: several RC connections
// with SENDs both ways, UD QPs resolved through SIDR with SEND_WITH_IMM
// both ways, and a port nobody listens on, refused both ways.
func TestCmatose(t *testing.T) {
	t.Parallel()
	var steps []step
	for _, guestClient := range []bool{false, true} {
		steps = append(steps,
			cmaStep("ucmatose", "cmatose", "-c 3 -C 20 -S 1000", guestClient),
			cmaStep("udaddy", "udaddy", "-c 2 -C 10 -S 1000", guestClient))
	}
	// udaddy has no port option (its -p is the port space): both sides
	// use its 7174, where the other does not listen.
	steps = append(steps,
		cmaNoListener("ucmatose -p 7476", []string{"cmatose", "-p", "7475"}, "RDMA_CM_EVENT_REJECTED, error: 8", 8),
		cmaNoListener("udaddy", []string{"udaddy"}, "RDMA_CM_EVENT_UNREACHABLE, error: 1", 1))
	g := group{mtu: 1500, pcap: "cmatose.pcap", steps: steps}
	g.run(t)
}

// cmaStep is one run of a stock tool against uroce's, the guest the
// server (uroce connects, retrying while it does not listen yet) or the
// client.
func cmaStep(stock, ours, opts string, guestClient bool) step {
	s := step{guestClient: guestClient}
	if guestClient {
		s.name = stock + "-gc"
		s.guest = stock + " " + opts + " -s" // the harness adds uroce's address
		s.uroce = append([]string{ours}, splitArgs(opts)...)
	} else {
		s.name = stock + "-gs"
		s.guest = stock + " " + opts + " -b " + guestAddr
		s.uroce = append([]string{ours, "--connect-wait=30s"}, splitArgs(opts)...)
	}
	name := s.name
	s.check = func(t *testing.T, g, u string) {
		t.Helper()
		for who, out := range map[string]string{"guest": g, "uroce": u} {
			if !strings.Contains(out, "data transfers complete\n") || !strings.Contains(out, "return status 0\n") {
				t.Errorf("%s: %s did not complete:\n%s", name, who, out)
			}
			// A request acted on twice (a duplicate REQ taken for a
			// new connection) would be one too many for the server.
			if strings.Contains(out, "failing connection request") {
				t.Errorf("%s: %s refused a connection request:\n%s", name, who, out)
			}
		}
		if stock == "ucmatose" {
			server := u
			if !guestClient {
				server = g
			}
			if !strings.Contains(server, "cmatose: disconnecting\ndisconnected\n") {
				t.Errorf("%s: the server did not disconnect:\n%s", name, server)
			}
		}
	}
	return s
}

// cmaNoListener: the stock client to a port of uroce's nobody listens on
// and uroce's client to one of the guest's: both refused, both say so.
// uroce's client retries for 3 s, so that its agent is there to answer
// the guest's; the guest stays up longer, to answer all of uroce's.
func cmaNoListener(stock string, ours []string, want string, status int) step {
	return step{
		name:      strings.Fields(stock)[0] + "-nolistener",
		guest:     fmt.Sprintf("sh -c 'sleep 1; %s -s %s -C 1; rc=$?; sleep 5; exit $rc'", stock, uroceAddr),
		guestExit: status,
		uroce:     append(ours, "-C", "1", "--connect-wait=3s"),
		uroceExit: status,
		check: func(t *testing.T, g, u string) {
			t.Helper()
			for who, out := range map[string]string{"guest": g, "uroce": u} {
				if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("return status %d", status)) {
					t.Errorf("%s: %s: no %q in\n%s", stock, who, want, out)
				}
			}
		},
	}
}

// TestCMLoss loses 20 % of the frames each way, CM MADs among them:
// netem in the guest, uroce's fault injection on its side. Connections
// (RC through REQ/REP/RTU, UD through SIDR) still come up, once each,
// and their traffic completes: the lost MADs are resent, duplicates
// answered, not acted on twice.
func TestCMLoss(t *testing.T) {
	t.Parallel()
	var steps []step
	// rping only with uroce as the client: the guest's client sends its
	// DREQ once, as its process ends (the kernel then destroys the ID and
	// stops resending), so a lost one leaves any rping server, the stock
	// one too, waiting for the disconnection for good. ucmatose's server
	// disconnects, and both CMs resend their DREQs.
	for _, s := range []step{
		cmaStep("ucmatose", "cmatose", "-c 3 -C 5 -S 100", false),
		cmaStep("ucmatose", "cmatose", "-c 3 -C 5 -S 100", true),
		rpingStep(64, false),
	} {
		s.name += "-loss"
		s.uroce = append(s.uroce, "--drop", "0.2", "--fault-seed", "11")
		s.capture = lossCapture
		steps = append(steps, s)
	}
	g := group{mtu: 1500, netem: "loss 20%", pcap: "cm-loss.pcap", stepTimeout: 180e9, steps: steps}
	g.run(t)
}
