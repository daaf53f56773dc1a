package main

import (
	"strings"
	"testing"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
)

// The UD scenarios against uroce's own ibv_ud_pingpong server, on a veth
// pair, as against the stock one on an rdma_rxe guest: the server's
// answers show what it received.
func TestConformUDPingpong(t *testing.T) {
	netnstest.RequireAFXDP(t)
	if code, _, errOut := runArgs("conform", "-d", "lo", "--pingpong", "rc", "192.0.2.2"); code != 2 || !strings.Contains(errOut, "want ud") {
		t.Errorf("--pingpong rc: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runArgs("conform", "-d", "lo", "--pingpong", "ud", "--perftest", "ib_send_bw", "192.0.2.2"); code != 2 || !strings.Contains(errOut, "give one") {
		t.Errorf("--pingpong and --perftest: exit %d: %s", code, errOut)
	}
	p := netnstest.NewPair(t, netns.PairConfig{Prefix: "ucud", MTU: 1500})
	peer := p.AddrB[0].Addr().String()
	for _, name := range []string{"ud-qkey-match", "ud-wrong-qkey"} {
		server := make(chan string, 1)
		go func() {
			var out string
			p.B.Do(func() error {
				_, o, e := runArgs("pingpong", "--ud", "-d", p.DevB, "-s", "64", "-n", "1")
				out = o + e
				return nil
			})
			server <- out
		}()
		var code int
		var out, errOut string
		p.A.Do(func() error {
			code, out, errOut = runArgs("conform", "-d", p.DevA, "--pingpong", "ud", "-k", "^"+name+"$", "--timeout", "2s", peer)
			return nil
		})
		srv := <-server
		if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, "1 passed") {
			t.Errorf("%s: exit %d\n%s%s\nserver:\n%s", name, code, out, errOut, srv)
		}
	}
	// The others are not for this peer, and say why.
	p.A.Do(func() error {
		code, out, errOut := runArgs("conform", "-d", p.DevA, "--pingpong", "ud", "-k", "^(ud-qkey-high-bit|write-ack)$", peer)
		if code != 0 || !strings.Contains(out, "ibv_ud_pingpong's server does not") || !strings.Contains(out, "run it with --perftest") {
			t.Errorf("skips: exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
}
