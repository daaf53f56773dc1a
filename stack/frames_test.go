package stack

import (
	"net/netip"
	"testing"

	"github.com/uroce/uroce/internal/frametest"
)

// testFrame builds a valid RoCEv2 UD SEND_ONLY frame whose payload carries
// seq, from macA/ipA to macB/ipB, to QPN dqpn.
func testFrame(t testing.TB, seq uint32, dqpn uint32, payloadLen int) []byte {
	t.Helper()
	return frametest.UD(t, seq, dqpn, payloadLen)
}

var (
	macA = frametest.MACA
	macB = frametest.MACB
	ipA  = frametest.IPA
	ipB  = frametest.IPB
	ip6A = netip.MustParseAddr("2001:db8::a")
	ip6B = netip.MustParseAddr("2001:db8::b")
)

// frameSeq returns the sequence number testFrame put in f, or -1.
func frameSeq(f []byte) int { return frametest.Seq(f) }
