package mad

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
)

// layout is an expected encoding: byte strings at offsets of the data,
// every other byte zero.
type layout map[int]string

func (l layout) bytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	for off, s := range l {
		h, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		copy(b[off:], h)
	}
	return b
}

// sampleREQ is a REQ with a distinct value in every field, as rdma_cm
// would send it from 192.0.2.2 port 49964 to port 7174 of 192.0.2.1.
func sampleREQ() REQFields {
	f := REQFields{
		LocalCommID: 0x01020304, VendorID: 0x0a0b0c, ServiceID: MakeServiceID(PortSpaceTCP, 7174),
		LocalCAGUID: 0x1112131415161718, LocalQKey: 0x21222324, LocalQPN: 0x313233, ResponderResources: 0x34,
		LocalEECN: 0x414243, InitiatorDepth: 0x44, RemoteEECN: 0x515253, RemoteCMResponseTimeout: 20,
		TransportType: TransportUC, EndToEndFlowControl: true, StartingPSN: 0x616263, LocalCMResponseTimeout: 21,
		RetryCount: 6, PKey: 0xffff, PathMTU: MTU1024, RDCExists: true, RNRRetryCount: 7, MaxCMRetries: 15,
		SRQ: true, ExtTransportType: 1, SAPSupported: true,
		Primary: PathFields{LocalLID: 0xffff, RemoteLID: 0xfffe, LocalGID: netip.MustParseAddr("192.0.2.2"),
			RemoteGID: netip.MustParseAddr("192.0.2.1"), FlowLabel: 0xabcde, PacketRate: 0x2a, TrafficClass: 0x68,
			HopLimit: 0x40, SL: 5, SubnetLocal: true, LocalACKTimeout: 19},
	}
	h := CMAHeaderFields{IPVersion: 4, SrcPort: 49964, SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")}
	h.Encode(f.PrivateData[:])
	copy(f.PrivateData[CMAHeaderLen:], "consumer")
	return f
}

// TestREQLayout encodes a REQ and compares every byte with the layout
// of IBTA §12.6 table 106, written out by hand, then reads each field
// back through the view.
func TestREQLayout(t *testing.T) {
	f := sampleREQ()
	want := layout{
		0: "01020304", 4: "00 0a0b0c", 8: "0000000001061c06", 16: "1112131415161718", 28: "21222324",
		32: "313233 34", 36: "414243 44",
		40: "515253 a3",  // RCMT 20 (10100), transport UC (01), flow control (1)
		44: "616263 ae",  // LCMT 21 (10101), retry count 6 (110)
		48: "ffff 3f f9", // MTU 3, RDC exists, RNR 7 | max CM retries 15, SRQ, ext transport 1
		52: "ffff fffe", 56: "00000000000000000000ffffc0000202", 72: "00000000000000000000ffffc0000201",
		88:  "abcde02a",    // flow label 0xabcde, 6 reserved bits, packet rate 0x2a
		92:  "68 40 58 98", // traffic class, hop limit, SL 5 + subnet local, ACK timeout 19
		139: "04",          // SAP supported
		140: "00 40 c32c 000000000000000000000000c0000202 000000000000000000000000c0000201" + hex.EncodeToString([]byte("consumer")),
	}.bytes(t, DataLen)
	got := make([]byte, DataLen)
	f.Encode(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("REQ\n got %x\nwant %x", got, want)
	}
	r := REQ(got)
	if r.LocalCommID() != 0x01020304 || r.VendorID() != 0x0a0b0c || r.ServiceID() != 0x0000000001061c06 ||
		r.LocalCAGUID() != 0x1112131415161718 || r.LocalQKey() != 0x21222324 || r.LocalQPN() != 0x313233 ||
		r.ResponderResources() != 0x34 || r.LocalEECN() != 0x414243 || r.InitiatorDepth() != 0x44 ||
		r.RemoteEECN() != 0x515253 || r.RemoteCMResponseTimeout() != 20 || r.TransportType() != TransportUC ||
		!r.EndToEndFlowControl() || r.StartingPSN() != 0x616263 || r.LocalCMResponseTimeout() != 21 ||
		r.RetryCount() != 6 || r.PKey() != 0xffff || r.PathMTU() != MTU1024 || !r.RDCExists() ||
		r.RNRRetryCount() != 7 || r.MaxCMRetries() != 15 || !r.SRQ() || r.ExtTransportType() != 1 || !r.SAPSupported() {
		t.Errorf("REQ getters: %+v", r.Fields())
	}
	p := r.Primary()
	if p.LocalLID() != 0xffff || p.RemoteLID() != 0xfffe || p.LocalGID() != netip.MustParseAddr("::ffff:192.0.2.2") ||
		p.RemoteGID().Unmap() != netip.MustParseAddr("192.0.2.1") || p.FlowLabel() != 0xabcde || p.PacketRate() != 0x2a ||
		p.TrafficClass() != 0x68 || p.HopLimit() != 0x40 || p.SL() != 5 || !p.SubnetLocal() || p.LocalACKTimeout() != 19 {
		t.Errorf("primary path: %+v", p.Fields())
	}
	if a := r.Alternate().Fields(); a.LocalGID != netip.IPv6Unspecified() || a.Reserved2 != 4 {
		t.Errorf("alternate path: %+v", a)
	}
	h, ok := r.CMAHeader()
	if !ok || h.SrcPort() != 49964 || h.SrcIP() != netip.MustParseAddr("192.0.2.2") || h.DstIP() != netip.MustParseAddr("192.0.2.1") ||
		h.IPVersion() != 4 || r.ServiceID().Port() != 7174 {
		t.Errorf("CMA header %v %+v", ok, h.Fields())
	}
	// Fields give the same values back; the GIDs come back as the 16
	// bytes they are on the wire.
	g := r.Fields()
	f.Primary.LocalGID, f.Primary.RemoteGID = netip.AddrFrom16(f.Primary.LocalGID.As16()), netip.AddrFrom16(f.Primary.RemoteGID.As16())
	f.Alternate.LocalGID, f.Alternate.RemoteGID = netip.IPv6Unspecified(), netip.IPv6Unspecified()
	if g != f {
		t.Errorf("Fields\n got %+v\nwant %+v", g, f)
	}
}

// TestMessageLayouts does the same for the other messages: each field
// set to a distinct value lands where IBTA §12.6 (tables 107-120) puts it.
func TestMessageLayouts(t *testing.T) {
	path := PathFields{LocalLID: 0x1111, RemoteLID: 0x2222, LocalGID: netip.MustParseAddr("2001:db8::1"),
		RemoteGID: netip.MustParseAddr("2001:db8::2"), FlowLabel: 0xabcde, PacketRate: 0x2a, TrafficClass: 0x68,
		HopLimit: 0x40, SL: 5, SubnetLocal: true, LocalACKTimeout: 19}
	gids := "20010db8000000000000000000000001 20010db8000000000000000000000002"
	for _, c := range []struct {
		name string
		f    interface{ Encode([]byte) }
		want layout
		back func(b []byte) any // the Fields read back from the bytes
	}{
		{"MRA", &MRAFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageMRAed: MsgREP, ServiceTimeout: 23},
			layout{0: "01020304 05060708", 8: "40 b8"}, func(b []byte) any { return MRA(b).Fields() }},
		{"REJ", &REJFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageRejected: MsgOther,
			RejectInfoLength: 8, Reason: RejConsumer, ARI: [72]byte{1, 2, 3, 4, 5, 6, 7, 8}, PrivateData: [148]byte{0xee}},
			layout{0: "01020304 05060708", 8: "80 10 001c 0102030405060708", 84: "ee"}, func(b []byte) any { return REJ(b).Fields() }},
		{"REP", &REPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, LocalQKey: 0x090a0b0c, LocalQPN: 0x0d0e0f,
			VendorID: 0xa1b2c3, LocalEECN: 0x111213, StartingPSN: 0x141516, ResponderResources: 0x17, InitiatorDepth: 0x18,
			TargetACKDelay: 16, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true,
			LocalCAGUID: 0x2122232425262728, PrivateData: [196]byte{0xee}},
			// TAD 16 (10000), failover 2 (10), flow control | RNR 7 (111), SRQ
			layout{0: "01020304 05060708 090a0b0c 0d0e0f a1 111213 b2 141516 c3 17 18 85 f0 2122232425262728 ee"},
			func(b []byte) any { return REP(b).Fields() }},
		{"RTU", &RTUFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, PrivateData: [224]byte{0xee}},
			layout{0: "01020304 05060708 ee"}, func(b []byte) any { return RTU(b).Fields() }},
		{"DREQ", &DREQFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, RemoteQPN: 0x123456, PrivateData: [220]byte{0xee}},
			layout{0: "01020304 05060708 123456 00 ee"}, func(b []byte) any { return DREQ(b).Fields() }},
		{"DREP", &DREPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, PrivateData: [224]byte{0xee}},
			layout{0: "01020304 05060708 ee"}, func(b []byte) any { return DREP(b).Fields() }},
		{"LAP", &LAPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, RemoteQPN: 0x123456,
			RemoteCMResponseTimeout: 20, Alternate: path, PrivateData: [168]byte{0xee}},
			// RCMT 20 (10100) | flow label, 4 reserved bits, traffic class | hop limit, 2 reserved bits
			// and the packet rate, SL 5 + subnet local, ACK timeout 19
			layout{0: "01020304 05060708 00000000 123456 a0 00000000 1111 2222 " + gids + " abcde068 40 2a 58 98 ee"},
			func(b []byte) any { return LAP(b).Fields() }},
		{"APR", &APRFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, AddInfoLength: 4, Status: 9,
			AddInfo: [72]byte{1, 2, 3, 4}, PrivateData: [148]byte{0xee}},
			layout{0: "01020304 05060708 04 09 0000 01020304", 84: "ee"}, func(b []byte) any { return APR(b).Fields() }},
		{"SIDR_REQ", &SIDRREQFields{RequestID: 0x01020304, PKey: 0xffff, ServiceID: MakeServiceID(PortSpaceUDP, 7471), PrivateData: [216]byte{0xee}},
			layout{0: "01020304 ffff 0000 0000000001111d2f ee"}, func(b []byte) any { return SIDRREQ(b).Fields() }},
		{"SIDR_REP", &SIDRREPFields{RequestID: 0x01020304, Status: SIDRRedirect, AddInfoLength: 72, VendorID: 0xa1b2c3,
			QPN: 0x000011, ServiceID: MakeServiceID(PortSpaceUDP, 7471), QKey: 0x01234567, AddInfo: [72]byte{0xaa}, PrivateData: [136]byte{0xee}},
			layout{0: "01020304 04 48 a1b2 000011 c3 0000000001111d2f 01234567 aa", 96: "ee"},
			func(b []byte) any { return SIDRREP(b).Fields() }},
	} {
		got := make([]byte, DataLen)
		c.f.Encode(got)
		if want := c.want.bytes(t, DataLen); !bytes.Equal(got, want) {
			t.Errorf("%s\n got %x\nwant %x", c.name, got, want)
			continue
		}
		// The view reads back what was encoded.
		var again []byte
		switch v := c.back(got).(type) {
		case MRAFields:
			again = enc(&v)
		case REJFields:
			again = enc(&v)
		case REPFields:
			again = enc(&v)
		case RTUFields:
			again = enc(&v)
		case DREQFields:
			again = enc(&v)
		case DREPFields:
			again = enc(&v)
		case LAPFields:
			again = enc(&v)
			if v.Alternate != path {
				t.Errorf("LAP path %+v, want %+v", v.Alternate, path)
			}
		case APRFields:
			again = enc(&v)
		case SIDRREQFields:
			again = enc(&v)
		case SIDRREPFields:
			again = enc(&v)
		}
		if !bytes.Equal(again, got) {
			t.Errorf("%s: Fields of the view encode as %x", c.name, again)
		}
	}
	m := MRA(enc(&MRAFields{MessageMRAed: MsgREP, ServiceTimeout: 23}))
	r := REJ(enc(&REJFields{LocalCommID: 0, RemoteCommID: 9, Reason: RejInvalidServiceID, RejectInfoLength: 3}))
	d := DREQ(enc(&DREQFields{RemoteQPN: 0x11}))
	if m.MessageMRAed() != MsgREP || m.ServiceTimeout() != 23 || r.Reason() != RejInvalidServiceID || r.RemoteCommID() != 9 ||
		r.RejectInfoLength() != 3 || r.MessageRejected() != MsgREQ || d.RemoteQPN() != 0x11 {
		t.Errorf("getters: %+v %+v %+v", m.Fields(), r.Fields(), d.Fields())
	}
}

func enc(f interface{ Encode([]byte) }) []byte {
	b := make([]byte, DataLen)
	f.Encode(b)
	return b
}

// TestHeader checks the MAD common header layout (IBTA §13.4).
func TestHeader(t *testing.T) {
	h := CMHeader(AttrREQ, 0x000000021c9ff5db)
	h.Status, h.ClassSpecific, h.AttrModifier = 0x0102, 0x0304, 0x05060708
	var b [Len]byte
	h.Encode(b[:])
	want := layout{0: "01 07 02 03 0102 0304 000000021c9ff5db 0010 0000 05060708"}.bytes(t, Len)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("header %x", b[:HeaderLen])
	}
	m, err := Parse(append(b[:], 0, 0)) // a longer buffer (a pad) is fine
	if err != nil || len(m) != Len || cap(m) != Len || len(m.Data()) != DataLen {
		t.Fatalf("Parse: %v, len %d", err, len(m))
	}
	if m.Header() != h || !m.IsCM() || m.TID() != 0x000000021c9ff5db || m.AttrID() != AttrREQ || m.Method() != MethodSend ||
		m.Method().Response() || !MethodGetResp.Response() {
		t.Errorf("header %+v", m.Header())
	}
	if _, err := Parse(b[:Len-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("Parse of 255 bytes: %v", err)
	}
}

func TestNames(t *testing.T) {
	for a, want := range map[AttrID]string{AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
		AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
		AttrClassPortInfo: "ClassPortInfo", 0x42: "Attr_0x0042", 0xffff: "Attr_0xffff"} {
		if a.String() != want {
			t.Errorf("%#x: %q, want %q", uint16(a), a.String(), want)
		}
	}
	if AttrClassPortInfo.CMName() != "" || AttrDREP.CMName() != "DREP" {
		t.Error("CMName")
	}
	if MethodSend.String() != "Send" || Method(0x7f).String() != "Method_0x7f" {
		t.Error("method names")
	}
	// Every reason in the table has both names, and the codes without
	// one print as numbers.
	n := 0
	for code := RejectReason(0); code < 64; code++ {
		i := code.Info()
		if (i.Name == "") != (i.Title == "") {
			t.Errorf("reason %d: %+v", code, i)
		}
		if i.Name != "" {
			n++
			if code.String() != i.Name {
				t.Errorf("reason %d: %q", code, code.String())
			}
		} else if code.String() != "reason_"+strconv.Itoa(int(code)) {
			t.Errorf("reason %d: %q", code, code.String())
		}
	}
	if n != 34 || RejInvalidServiceID.String() != "invalid_service_id" || RejConsumer.Info().Title != "Consumer Reject" {
		t.Errorf("%d reasons", n)
	}
	if MsgREQ.String() != "REQ" || MsgOther.String() != "other" || SIDRRedirect.String() != "redirect" || SIDRStatus(9).String() != "reserved" {
		t.Error("message and status names")
	}
	if TransportRC.String() != "RC" || TransportExtended.String() != "extended" {
		t.Error("transport names")
	}
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   PortSpace
		port uint16
		id   ServiceID
		ip   bool
		s    string
	}{
		{PortSpaceTCP, 7174, 0x0000000001061c06, true, "0x0000000001061c06 (tcp:7174)"},
		{PortSpaceUDP, 7471, 0x0000000001111d2f, true, "0x0000000001111d2f (udp:7471)"},
		{PortSpaceIPoIB, 1, 0x0000000000020001, true, "0x0000000000020001 (ipoib:1)"},
		{PortSpaceIB, 0xffff, 0x00000000013fffff, false, "0x00000000013fffff (ib:65535)"},
	} {
		id := MakeServiceID(c.ps, c.port)
		ps, ok := id.PortSpace()
		if id != c.id || !ok || ps != c.ps || id.Port() != c.port || id.IsIP() != c.ip || id.String() != c.s {
			t.Errorf("%v %d: %#x %v %v %v %q", c.ps, c.port, uint64(id), ps, ok, id.IsIP(), id.String())
		}
	}
	for _, id := range []ServiceID{0x0000000101061c06, 0x0000000001071c06, 0x1000000000000000} {
		if _, ok := id.PortSpace(); ok || id.IsIP() || strings.Contains(id.String(), "(") {
			t.Errorf("%#x taken for rdma_cm's", uint64(id))
		}
	}
	if PortSpace(0x1234).String() != "ps_0x1234" {
		t.Error(PortSpace(0x1234).String())
	}
}

func TestCMAHeader(t *testing.T) {
	for _, f := range []CMAHeaderFields{
		{IPVersion: 4, SrcPort: 1, SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")},
		{IPVersion: 4, SrcPort: 2, SrcIP: netip.MustParseAddr("::ffff:192.0.2.2"), DstIP: netip.MustParseAddr("::ffff:192.0.2.1")},
		{IPVersion: 6, SrcPort: 3, SrcIP: netip.MustParseAddr("2001:db8::1"), DstIP: netip.MustParseAddr("2001:db8::2")},
	} {
		b := make([]byte, REQPrivateLen)
		f.Encode(b)
		h, ok := ParseCMAHeader(b)
		want := f
		want.SrcIP, want.DstIP = f.SrcIP.Unmap(), f.DstIP.Unmap()
		if !ok || h.Fields() != want {
			t.Errorf("%+v: %v %+v", f, ok, h.Fields())
		}
	}
	// An IPv4 header with an IPv6 address writes zeros, not a panic.
	b := make([]byte, CMAHeaderLen)
	(&CMAHeaderFields{IPVersion: 4, SrcIP: netip.MustParseAddr("2001:db8::1")}).Encode(b)
	if !bytes.Equal(b, layout{1: "40"}.bytes(t, CMAHeaderLen)) {
		t.Errorf("%x", b)
	}
	for _, bad := range [][]byte{make([]byte, 35), layout{1: "40", 0: "10"}.bytes(t, 36), layout{1: "50"}.bytes(t, 36)} {
		if _, ok := ParseCMAHeader(bad); ok {
			t.Errorf("%x taken for a CMA header", bad)
		}
	}
	// A REQ outside the IP port spaces has no CMA header, whatever its
	// private data holds.
	f := sampleREQ()
	f.ServiceID = MakeServiceID(PortSpaceIB, 7174)
	if _, ok := REQ(enc(&f)).CMAHeader(); ok {
		t.Error("CMA header in the IB port space")
	}
}

func TestMTUAndTimeout(t *testing.T) {
	for m, n := range map[MTU]int{0: 0, MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 6: 0, 15: 0} {
		if m.Bytes() != n || (n != 0 && MTUOf(n) != m) {
			t.Errorf("MTU %d: %d bytes", m, m.Bytes())
		}
	}
	if MTUOf(1500) != 0 {
		t.Error("MTUOf(1500)")
	}
	if Timeout(0) != 4096*time.Nanosecond || Timeout(19) != 2147483648*time.Nanosecond || Timeout(20) <= Timeout(19) {
		t.Errorf("timeouts %v %v", Timeout(0), Timeout(19))
	}
}

// udFrame builds a UD SEND to qp with q_key and payload, from QP1.
func udFrame(t testing.TB, op bth.Opcode, qp, qkey uint32, payload []byte) []byte {
	t.Helper()
	h := bth.Headers{L2L3: bth.L2L3{SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"), SrcPort: 55410},
		BTH: bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qp, AckReq: true}, QKey: qkey, SrcQP: 1}
	buf := make([]byte, h.FrameLen(len(payload)))
	if _, err := bth.Encode(buf, &h, payload); err != nil {
		t.Fatal(err)
	}
	return buf
}

// sampleMAD returns a whole REQ MAD.
func sampleMAD() []byte {
	b := make([]byte, Len)
	h := CMHeader(AttrREQ, 0x21c9ff5db)
	h.Encode(b)
	f := sampleREQ()
	f.Encode(b[HeaderLen:])
	return b
}

func TestFromPacket(t *testing.T) {
	mad := sampleMAD()
	for _, c := range []struct {
		name  string
		frame []byte
		ok    bool
	}{
		{"CM REQ", udFrame(t, bth.OpUDSendOnly, GSIQPN, GSIQKey, mad), true},
		{"other Q_Key", udFrame(t, bth.OpUDSendOnly, GSIQPN, 0x11111111, mad), false},
		{"other QP", udFrame(t, bth.OpUDSendOnly, 2, GSIQKey, mad), false},
		{"with immediate", udFrame(t, bth.OpUDSendOnlyImm, GSIQPN, GSIQKey, mad), false},
		{"255 bytes", udFrame(t, bth.OpUDSendOnly, GSIQPN, GSIQKey, mad[:255]), false},
		{"257 bytes", udFrame(t, bth.OpUDSendOnly, GSIQPN, GSIQKey, append(mad[:Len:Len], 0)), false},
	} {
		var p bth.Packet
		if err := bth.Parse(c.frame, &p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, ok := FromPacket(&p)
		if ok != c.ok || (ok && (!bytes.Equal(m, mad) || &m[0] != &c.frame[p.PayloadAt])) {
			t.Errorf("%s: %v", c.name, ok)
		}
	}
	// An RC SEND_ONLY to QP1 has no DETH.
	h := bth.Headers{L2L3: bth.L2L3{SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1")},
		BTH: bth.BTHFields{Opcode: bth.OpSendOnly, PKey: 0xffff, DestQP: 1}}
	buf := make([]byte, h.FrameLen(Len))
	bth.Encode(buf, &h, mad)
	var p bth.Packet
	bth.Parse(buf, &p)
	if _, ok := FromPacket(&p); ok {
		t.Error("RC SEND to QP1 taken for a MAD")
	}
}

// TestParseAllocs checks that finding a MAD in a packet and reading
// every CM message through its view and Fields does not allocate.
func TestParseAllocs(t *testing.T) {
	frame := udFrame(t, bth.OpUDSendOnly, GSIQPN, GSIQKey, sampleMAD())
	var p bth.Packet
	var sink uint64
	n := testing.AllocsPerRun(100, func() {
		if bth.Parse(frame, &p) != nil {
			t.Fatal("parse")
		}
		m, ok := FromPacket(&p)
		if !ok {
			t.Fatal("not a MAD")
		}
		h := m.Header()
		r := REQ(m.Data())
		f := r.Fields()
		c, _ := r.CMAHeader()
		cf := c.Fields()
		d := m.Data()
		sink += h.TID + uint64(f.LocalQPN) + uint64(cf.SrcPort) + uint64(REP(d).Fields().LocalQPN) +
			uint64(MRA(d).Fields().ServiceTimeout) + uint64(REJ(d).Fields().Reason) + uint64(RTU(d).Fields().LocalCommID) +
			uint64(DREQ(d).Fields().RemoteQPN) + uint64(DREP(d).Fields().RemoteCommID) + uint64(LAP(d).Fields().RemoteQPN) +
			uint64(APR(d).Fields().Status) + uint64(SIDRREQ(d).Fields().ServiceID) + uint64(SIDRREP(d).Fields().QKey)
		if _, ok := r.ServiceID().PortSpace(); !ok || !r.Primary().LocalGID().IsValid() {
			t.Fatal("port space")
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per MAD", n)
	}
	_ = sink
}
