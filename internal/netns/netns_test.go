package netns_test

import (
	"net/netip"
	"testing"

	"github.com/uroce/uroce/internal/netns"
)

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		p    string
		want bool
	}{
		{"192.0.2.1/24", true},
		{"192.0.2.255/32", true},
		{"198.51.100.7/24", true},
		{"2001:db8::1/64", true},
		{"2001:db8:ffff::1/48", true},
		{"192.0.2.1/16", false}, // wider than the range
		{"192.0.3.1/24", false},
		{"203.0.113.1/24", false},
		{"10.0.0.1/8", false},
		{"2001:db9::1/64", false},
		{"::ffff:192.0.2.1/120", false},
		{"fe80::1/64", false},
	} {
		if got := netns.Allowed(netip.MustParsePrefix(tc.p)); got != tc.want {
			t.Errorf("Allowed(%s) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if netns.Allowed(netip.Prefix{}) {
		t.Error("Allowed(zero prefix) = true")
	}
}
