package dcqcn

import (
	"testing"
	"time"
)

func TestNP(t *testing.T) {
	var n NP
	n.Init(nil) // 2 µs
	for _, tc := range []struct {
		at   Time
		send bool
	}{
		{0, true},
		{1 * us, false},
		{2*us - 1, false},
		{2 * us, true},
		{3 * us, false},
		{10 * us, true},
		{11*us + 999, false},
		{12 * us, true},
	} {
		if got := n.OnCE(tc.at); got != tc.send {
			t.Errorf("CE at %v: CNP %v, want %v", tc.at, got, tc.send)
		}
	}
}

// CE marks every 100 ns for 1 ms: one CNP per 2 µs.
func TestNPRate(t *testing.T) {
	for _, tc := range []struct {
		gap  uint32
		cnps int
	}{
		{2, 500},
		{4, 250},
		{50, 20},
		{0, 10000}, // every CE-marked packet
	} {
		p := Defaults()
		p.MinTimeBetweenCNPs = tc.gap
		var n NP
		n.Init(&p)
		got := 0
		for now := Time(0); now < time.Millisecond; now += 100 {
			if n.OnCE(now) {
				got++
			}
		}
		if got != tc.cnps {
			t.Errorf("gap %d µs: %d CNPs, want %d", tc.gap, got, tc.cnps)
		}
	}
	// The zero value answers every mark.
	var z NP
	if !z.OnCE(5) || !z.OnCE(5) {
		t.Error("zero NP suppressed a CNP")
	}
}
