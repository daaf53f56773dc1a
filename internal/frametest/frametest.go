// Package frametest builds numbered RoCEv2 frames for the tests of links
// and of the stack.
package frametest

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/bth"
)

// The addresses of the frames UD builds: from A to B.
var (
	MACA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	MACB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	IPA  = netip.MustParseAddr("192.0.2.1")
	IPB  = netip.MustParseAddr("192.0.2.2")
)

// UD builds a valid RoCEv2 UD SEND_ONLY frame whose payload carries seq,
// from MACA/IPA to MACB/IPB, to QPN dqpn.
func UD(t testing.TB, seq uint32, dqpn uint32, payloadLen int) []byte {
	t.Helper()
	h := bth.Headers{
		L2L3: bth.L2L3{
			DstMAC: MACB, SrcMAC: MACA,
			SrcIP: IPA, DstIP: IPB, SrcPort: 0xc000,
		},
		BTH:   bth.BTHFields{Opcode: bth.OpUDSendOnly, PKey: 0xffff, DestQP: dqpn, PSN: bth.MakePSN(seq)},
		QKey:  0x11111111,
		SrcQP: 0x11,
	}
	payload := make([]byte, max(payloadLen, 4))
	binary.BigEndian.PutUint32(payload, seq)
	buf := make([]byte, h.FrameLen(len(payload)))
	n, err := bth.Encode(buf, &h, payload)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf[:n]
}

// Seq returns the sequence number UD put in f, or -1.
func Seq(f []byte) int {
	var p bth.Packet
	if bth.Parse(f, &p) != nil || len(p.Payload()) < 4 {
		return -1
	}
	return int(binary.BigEndian.Uint32(p.Payload()))
}

// MADAttr returns the attribute ID of the MAD a frame carries to QP1 (a
// CM REQ, REP, RTU, ...), or false for any other frame.
func MADAttr(frame []byte) (uint16, bool) {
	var p bth.Packet
	if bth.Parse(frame, &p) != nil || p.BTH().DestQP() != 1 {
		return 0, false
	}
	m := p.Payload()
	if len(m) < 18 {
		return 0, false
	}
	return binary.BigEndian.Uint16(m[16:]), true
}
