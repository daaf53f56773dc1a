package incast

import (
	"strings"
	"testing"
	"time"
)

// TestConfigDefaults checks the figures the package documentation gives
// for the default bed: 500 Mbit/s, MTU 1500, a 1 ms round trip.
func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Senders:    2,
		Bottleneck: 500_000_000,
		MTU:        1500,
		Marking: Marking{
			Min:         15625, // BDP/4
			Max:         62500, // BDP
			Burst:       21,    // (2·15625 + 62500) / (3·1514) + 1
			CEThreshold: 250 * time.Microsecond,
			Target:      time.Millisecond,
			Interval:    20 * time.Millisecond,
		},
		Limit:  250000, // 4·BDP
		Burst:  15625,  // 250 µs at 500 Mbit/s
		Prefix: "uroce-incast",
	}
	if c != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.BDP() != 62500 || c.Frame() != 1514 || c.RTT() != time.Millisecond {
		t.Errorf("BDP %d, frame %d, RTT %v", c.BDP(), c.Frame(), c.RTT())
	}
}

func TestConfigScaling(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Config
		want func(c Config) bool
	}{
		// At 10 Mbit/s the BDP (1250 bytes) is below a frame: the
		// floors of 2 and 4 frames and the limit's 8 frames apply.
		{"slow link floors", Config{Bottleneck: 10_000_000}, func(c Config) bool {
			return c.Marking.Min == 2*1514 && c.Marking.Max == 4*1514 && c.Limit == 12*1514 && c.Burst == 2*1514
		}},
		// 10 Gbit/s: BDP 1.25 MB; the burst stops at 64 KiB.
		{"fast link", Config{Bottleneck: 10_000_000_000}, func(c Config) bool {
			return c.Marking.Min == 312500 && c.Marking.Max == 1250000 && c.Limit == 5000000 && c.Burst == 64<<10 &&
				c.Marking.CEThreshold == 250*time.Microsecond
		}},
		// A delay lengthens the round trip the thresholds are sized for.
		{"delay", Config{Delay: time.Millisecond}, func(c Config) bool {
			return c.RTT() == 2*time.Millisecond && c.BDP() == 125000 && c.Marking.Min == 31250
		}},
		// Jumbo frames.
		{"mtu 9000", Config{MTU: 9000, Bottleneck: 100_000_000}, func(c Config) bool {
			return c.Frame() == 9014 && c.Marking.Min == 2*9014 && c.Burst == 2*9014
		}},
		// Given values stay.
		{"explicit", Config{Limit: 100000, Burst: 4000, Marking: Marking{Kind: RED, Min: 10000, Max: 30000, Burst: 5}}, func(c Config) bool {
			return c.Limit == 100000 && c.Burst == 4000 && c.Marking.Min == 10000 && c.Marking.Max == 30000 && c.Marking.Burst == 5
		}},
	} {
		c, err := tc.in.resolve()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.want(c) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Config
		want string
	}{
		{"senders", Config{Senders: MaxSenders + 1}, "senders"},
		{"negative senders", Config{Senders: -1}, "senders"},
		{"bottleneck", Config{Bottleneck: 1000}, "bottleneck"},
		{"mtu", Config{MTU: 100}, "mtu"},
		{"kind", Config{Marking: Marking{Kind: 42}}, "marking"},
		{"delay", Config{Delay: -time.Second}, "delay"},
		{"negative", Config{Limit: -1}, "negative"},
		{"min over max", Config{Marking: Marking{Min: 50000, Max: 20000}}, "min 50000 > max 20000"},
		{"limit below max", Config{Limit: 10000, Marking: Marking{Min: 5000, Max: 9000}}, "limit 10000"},
		{"huge limit", Config{Limit: 2 << 30}, "at most"},
		{"burst below a frame", Config{Burst: 1000}, "burst 1000"},
		{"interval below target", Config{Marking: Marking{Target: time.Second, Interval: time.Millisecond}}, "interval"},
	} {
		_, err := tc.in.resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k := TailDrop; k <= Step; k++ {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if _, err := ParseKind("codel"); err == nil {
		t.Error("ParseKind(codel) succeeded")
	}
	if s := Kind(9).String(); s != "Kind(9)" {
		t.Errorf("Kind(9).String() = %q", s)
	}
}
