package netns

import (
	"errors"
	"net/netip"
)

// ErrAddress reports an address outside the documentation ranges.
var ErrAddress = errors.New("address outside 192.0.2.0/24, 198.51.100.0/24 and 2001:db8::/32")

// allowed are the only prefixes AddAddr accepts.
var allowed = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Allowed reports whether every address of p lies in one of the
// documentation ranges 192.0.2.0/24, 198.51.100.0/24 or 2001:db8::/32.
func Allowed(p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	for _, a := range allowed {
		if p.Bits() >= a.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
