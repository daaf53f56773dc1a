package bpf

import (
	"testing"

	"github.com/uroce/uroce/internal/netns"
	"github.com/uroce/uroce/internal/netns/netnstest"
	"github.com/uroce/uroce/xdp"
)

// With a socket registered for queue 0 (the queue BPF_PROG_TEST_RUN
// reports), RoCEv2 frames are redirected and everything else passes; with
// the socket on another queue, or unregistered, RoCEv2 passes too.
func TestRedirectVerdicts(t *testing.T) {
	netnstest.RequireAFXDP(t)
	pair := netnstest.NewPair(t, netns.PairConfig{Prefix: "uroce-bpfr", Queues: 2, NoAddrs: true})
	p := loadForTest(t)
	var socks [2]*xdp.Socket
	for q := range socks {
		err := pair.A.Do(func() error {
			var err error
			socks[q], err = xdp.Open(xdp.Config{Interface: pair.DevA, Queue: q, Frames: 16, RingSize: 8})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { socks[q].Close() })
	}
	frames := testFrames(t)
	check := func(label string, roce Action) {
		t.Helper()
		for _, nf := range frames {
			want := Pass
			if nf.roce {
				want = roce
			}
			if a := run(t, p, nf.f); a != want {
				t.Errorf("%s: %s: %v, want %v", label, nf.name, a, want)
			}
		}
	}
	if err := p.Register(1, socks[1].FD()); err != nil {
		t.Fatal(err)
	}
	check("socket on queue 1 only", Pass)
	if err := p.Register(0, socks[0].FD()); err != nil {
		t.Fatal(err)
	}
	check("socket on queue 0", Redirect)
	// PAUSE and PFC frames go to the socket as RoCE does.
	for _, f := range macControlFrames() {
		if a := run(t, p, f); a != Redirect {
			t.Errorf("MAC control frame % x: %v, want XDP_REDIRECT", f[:16], a)
		}
	}

	if err := p.SetDropEvery(2); err != nil {
		t.Fatal(err)
	}
	f := frames[0].f
	for i, want := range []Action{Redirect, Drop, Redirect, Drop} {
		if a := run(t, p, f); a != want {
			t.Errorf("drop every 2, frame %d: %v, want %v", i, a, want)
		}
	}
	if err := p.SetDropEvery(0); err != nil {
		t.Fatal(err)
	}

	if err := p.Unregister(0); err != nil {
		t.Fatal(err)
	}
	check("after Unregister", Pass)
	if err := p.Unregister(0); err != nil {
		t.Errorf("second Unregister: %v", err)
	}
	// A closed socket leaves the map by itself.
	if err := p.Register(0, socks[0].FD()); err != nil {
		t.Fatal(err)
	}
	if err := socks[0].Close(); err != nil {
		t.Fatal(err)
	}
	check("after the socket closed", Pass)
	// Only bound AF_XDP sockets can be registered.
	if err := p.Register(0, p.prog.FD()); err == nil {
		t.Error("registered a non-socket descriptor")
	}
}
