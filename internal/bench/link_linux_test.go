package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/internal/netns/netnstest"
)

// TestLink runs both phases briefly and checks that each moved data; the
// rates themselves are measurements, not test results.
func TestLink(t *testing.T) {
	netnstest.RequireAFXDP(t)
	for _, mtu := range []int{1500, 9000} {
		r, err := Link(context.Background(), LinkOptions{MTU: mtu, Duration: 200 * time.Millisecond, Rounds: 1, Size: 16384})
		if err != nil {
			t.Fatal(err)
		}
		want := 1024 + 74
		if mtu == 9000 {
			want = 4096 + 74
		}
		if r.Frame != want || r.FramePayload != want-74 {
			t.Errorf("mtu %d: frame %d, payload %d", mtu, r.Frame, r.FramePayload)
		}
		m := &r.Median
		if len(r.Rounds) != 1 || m.RawFramesPerSec <= 0 || m.RoCEMessages == 0 || m.RoCEGoodput <= 0 || r.Ratio(m) <= 0 ||
			m.TCPGoodput <= 0 || m.RoCECPUPerGB <= 0 || m.TCPCPUPerGB <= 0 || m.ReadGoodput <= 0 || m.Write64Rate <= 0 || m.UDP64Rate <= 0 {
			t.Errorf("mtu %d: nothing measured: %+v", mtu, r)
		}
		var out strings.Builder
		r.Write(&out)
		if !strings.Contains(out.String(), "ratio") || !strings.Contains(out.String(), "one kernel TCP stream") ||
			!strings.Contains(out.String(), "64 B UDP Mdgram/s") {
			t.Errorf("report:\n%s", out.String())
		}
		t.Log("\n" + out.String())
	}
}

func TestLinkOptions(t *testing.T) {
	for _, o := range []LinkOptions{{MTU: 100}, {Frame: 20}, {MTU: 1500, Frame: 9000}, {Size: -1}, {Window: 5000}, {Duration: time.Microsecond}, {Rounds: 1000}, {RawWindow: -1}} {
		if _, err := Link(context.Background(), o); err == nil || err == ErrNotRoot {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestLat runs the ping-pong briefly in both modes; the figures are
// measurements, the test checks that they were taken.
func TestLat(t *testing.T) {
	netnstest.RequireAFXDP(t)
	r, err := Lat(context.Background(), LatOptions{Iters: 200, Warmup: 20, Size: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 4 || r.Results[0].BusyPoll || !r.Results[1].BusyPoll || r.Results[2].Kernel != "UDP" || r.Results[3].Kernel != "TCP" {
		t.Fatalf("results %+v", r.Results)
	}
	for _, x := range r.Results {
		if x.Iters != 200 || x.Min <= 0 || x.Min > x.Median || x.Median > x.P99 || x.P99 > x.Max {
			t.Errorf("figures out of order: %+v", x)
		}
	}
	var out strings.Builder
	r.Write(&out)
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "/ kernel UDP: median") {
		t.Errorf("report:\n%s", out.String())
	}
	if _, err := Lat(context.Background(), LatOptions{Size: -1}); err == nil {
		t.Error("negative size accepted")
	}
}
