package rdmacm

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/mad"
)

// TestRequestData: the addressing header and the application's data
// after it, as rping's REQ carries them (rping.pcap frame 5:
// 192.0.2.2:47877 → 192.0.2.1:7174, IP version 4), and back.
func TestRequestData(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"192.0.2.2:47877", "192.0.2.1:7174"},
		{"[2001:db8::2]:40000", "[2001:db8::1]:18515"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		r := mad.REQFields{ServiceID: ServiceID(dst.Port())}
		if err := requestData(r.PrivateData[:], src, dst, []byte("app")); err != nil {
			t.Fatal(err)
		}
		h := mad.CMAHeader(r.PrivateData[:mad.CMAHeaderLen])
		if v := h.IPVersion(); (v == 4) != src.Addr().Is4() {
			t.Errorf("%s: ip version %d", c.src, v)
		}
		if src.Addr().Is4() && !bytes.Equal(r.PrivateData[4:16], make([]byte, 12)) {
			t.Errorf("ipv4 source not in the last 4 bytes: % x", r.PrivateData[4:20])
		}
		s, d, data, ok := parseRequest(&r)
		if !ok || s != src || d != dst || !bytes.HasPrefix(data, []byte("app")) || len(data) != MaxDialData {
			t.Errorf("%s: parsed %v %v %q %v", c.src, s, d, data, ok)
		}
	}
	var r mad.REQFields
	if err := requestData(r.PrivateData[:], netip.AddrPort{}, netip.AddrPort{}, make([]byte, MaxDialData+1)); err == nil {
		t.Error("57 bytes of private data accepted")
	}
	r.ServiceID = mad.MakeServiceID(mad.PortSpaceIB, 1)
	if _, _, _, ok := parseRequest(&r); ok {
		t.Error("an IB port space REQ parsed as addressed")
	}
	if ServiceID(7174) != 0x0000000001061c06 {
		t.Errorf("service id %v", ServiceID(7174))
	}
}
