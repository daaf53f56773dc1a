package mad

import (
	"bytes"
	"testing"

	"github.com/uroce/uroce/bth"
)

// FuzzParse parses arbitrary bytes as a MAD. Parse must not panic and
// must refuse less than 256 bytes; a MAD it accepts must give working
// accessors, and its header and data, read as each CM message in turn,
// must encode back byte for byte: the Fields hold every bit.
func FuzzParse(f *testing.F) {
	mad := sampleMAD()
	f.Add(mad)                             // a CM REQ with every field set
	f.Add(append(mad[:Len:Len], 1, 2, 3))  // the same with a pad after it
	f.Add(mad[:Len-1])                     // a truncated one
	f.Add(mad[:HeaderLen])                 // a header alone
	f.Add(make([]byte, Len))               // zeros
	f.Add(bytes.Repeat([]byte{0xff}, Len)) // every bit set
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if len(b) >= Len {
				t.Fatalf("Parse of %d bytes: %v", len(b), err)
			}
			return
		}
		if len(m) != Len || len(m.Data()) != DataLen {
			t.Fatalf("MAD of %d bytes", len(m))
		}
		_ = m.Method().String() + m.AttrID().String() + m.Class().String()
		out := make([]byte, Len)
		h := m.Header()
		h.Encode(out)
		for _, attr := range []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP,
			AttrSIDRREQ, AttrSIDRREP, AttrLAP, AttrAPR} {
			clear(out[HeaderLen:])
			encodeData(attr, m.Data(), out[HeaderLen:])
			if !bytes.Equal(out, m) {
				t.Fatalf("as %v: re-encoded\n%x\nwant\n%x", attr, out, []byte(m))
			}
		}
		d := m.Data()
		_ = REJ(d).Reason().String() + REQ(d).ServiceID().String() + SIDRREP(d).Status().String() +
			MRA(d).MessageMRAed().String() + REQ(d).TransportType().String()
		_ = REQ(d).PathMTU().Bytes() + int(Timeout(REQ(d).RemoteCMResponseTimeout()))
		if h, ok := REQ(d).CMAHeader(); ok {
			checkCMA(t, h)
		}
		if h, ok := SIDRREQ(d).CMAHeader(); ok {
			checkCMA(t, h)
		}
	})
}

// FuzzCMAHeader parses arbitrary private data. A header it accepts
// encodes back to the same values, and to the same bytes when the
// unused bytes of an IPv4 address are zero.
func FuzzCMAHeader(f *testing.F) {
	req := sampleREQ()
	f.Add(req.PrivateData[:])                           // an IPv4 header and consumer data
	f.Add(req.PrivateData[:CMAHeaderLen-1])             // a truncated one
	f.Add(append([]byte{0, 0x60}, make([]byte, 34)...)) // IPv6, all zeros
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := ParseCMAHeader(b)
		if !ok {
			return
		}
		checkCMA(t, h)
	})
}

func checkCMA(t *testing.T, h CMAHeader) {
	t.Helper()
	f := h.Fields()
	var b [CMAHeaderLen]byte
	f.Encode(b[:])
	g, ok := ParseCMAHeader(b[:])
	if !ok || g.Fields() != f {
		t.Fatalf("CMA header %+v re-encodes as %+v", f, g.Fields())
	}
	zeroPad := h.IPVersion() == 6 || (bytes.Count(h[4:16], []byte{0}) == 12 && bytes.Count(h[20:32], []byte{0}) == 12)
	if zeroPad && !bytes.Equal(b[:], h) {
		t.Fatalf("CMA header %x re-encodes as %x", []byte(h), b)
	}
}

// FuzzFromPacket parses arbitrary frames and looks for a MAD in them,
// whatever the parse returned: no panic, and a MAD found is the 256
// bytes of a UD SEND_ONLY to QP1 with the GSI Q_Key, inside the frame.
func FuzzFromPacket(f *testing.F) {
	mad := sampleMAD()
	f.Add(udFrame(f, bth.OpUDSendOnly, GSIQPN, GSIQKey, mad))         // a CM REQ on QP1
	f.Add(udFrame(f, bth.OpUDSendOnly, GSIQPN, GSIQKey, mad[:Len-4])) // 252 bytes: no MAD
	f.Add(udFrame(f, bth.OpUDSendOnly, 2, GSIQKey, mad))              // to QP2: no MAD
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p bth.Packet
		bth.Parse(frame, &p)
		m, ok := FromPacket(&p)
		if !ok {
			return
		}
		if len(m) != Len || p.Opcode() != bth.OpUDSendOnly || p.BTH().DestQP() != GSIQPN || p.DETH().QKey() != GSIQKey ||
			!bytes.Equal(m, p.Payload()) {
			t.Fatalf("MAD %x from %s", []byte(m), p.Info.Name)
		}
	})
}
