package bth

import (
	"bytes"
	"testing"
)

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     Syndrome
		kind  AckKind
		value uint8
		name  string
	}{
		{0x1f, AckKindACK, 31, "credits"}, // ACK, credits not used (rxe, ConnectX)
		{0x00, AckKindACK, 0, "credits"},
		{0x0a, AckKindACK, 10, "credits"},
		{0x20, AckKindRNR, 0, "rnr_timer"}, // RNR NAK, 655.36 ms
		{0x2e, AckKindRNR, 14, "rnr_timer"},
		{0x3f, AckKindRNR, 31, "rnr_timer"},
		{0x60, AckKindNAK, 0, "psn_sequence_error"},
		{0x61, AckKindNAK, 1, "invalid_request"},
		{0x62, AckKindNAK, 2, "remote_access_error"},
		{0x63, AckKindNAK, 3, "remote_operational_error"},
		{0x64, AckKindNAK, 4, "invalid_rd_request"},
		{0x65, AckKindNAK, 5, "reserved_nak"},
		{0x7f, AckKindNAK, 31, "reserved_nak"},
		{0x40, AckKindReserved, 0, "reserved"},
		{0x9f, AckKindACK, 31, "credits"}, // bit 7 is reserved and ignored by Kind
	}
	for _, tt := range tests {
		if tt.s.Kind() != tt.kind || tt.s.Value() != tt.value || tt.s.CodeName() != tt.name {
			t.Errorf("syndrome %#02x: %v %d %q, want %v %d %q", uint8(tt.s), tt.s.Kind(), tt.s.Value(),
				tt.s.CodeName(), tt.kind, tt.value, tt.name)
		}
	}
	if ACKSyndrome(31) != SyndromeACKNoCredits || ACKSyndrome(31) != 0x1f {
		t.Error("ACKSyndrome(31)")
	}
	if RNRSyndrome(14) != 0x2e || NAKSyndrome(NAKRemoteAccessError) != 0x62 || SyndromeRemoteAccess != 0x62 {
		t.Error("RNR/NAK syndrome builders")
	}
	if SyndromePSNSeqErr != 0x60 || SyndromeInvalidReq != 0x61 || SyndromeRemoteOpError != 0x63 {
		t.Error("NAK syndrome constants")
	}
	if ACKSyndrome(0xff) != 0x1f {
		t.Error("ACKSyndrome does not keep 5 bits")
	}
	if AckKindRNR.String() != "rnr_nak" || AckKindNAK.String() != "nak" {
		t.Error("kind names")
	}
	// IBTA table 46: code 1 is 0.01 ms, 14 is 1.28 ms, 31 is 491.52 ms, 0 is 655.36 ms.
	for code, us := range map[int]uint32{0: 655360, 1: 10, 12: 640, 14: 1280, 18: 5120, 31: 491520} {
		if RNRTimerMicros[code] != us {
			t.Errorf("RNR timer %d = %d µs, want %d", code, RNRTimerMicros[code], us)
		}
	}
	for i := 2; i < 32; i++ {
		if RNRTimerMicros[i] <= RNRTimerMicros[i-1] {
			t.Errorf("RNR timer %d not above %d", i, i-1)
		}
	}
}

func TestBTHFields(t *testing.T) {
	f := BTHFields{Opcode: OpWriteFirst, SE: true, MigReq: true, PadCount: 3, TVer: 0,
		PKey: 0xffff, FECN: true, BECN: false, Resv6: 0x15, DestQP: 0xabcdef, AckReq: true,
		Resv7: 0x2a, PSN: 0xfedcba}
	b := make([]byte, BTHLen)
	f.Encode(b)
	want := []byte{0x06, 0xf0, 0xff, 0xff, 0x95, 0xab, 0xcd, 0xef, 0xaa, 0xfe, 0xdc, 0xba}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
	if got := BTH(b).Fields(); got != f {
		t.Errorf("fields %+v, want %+v", got, f)
	}
	v := BTH(b)
	v.SetPSN(0x000001)
	v.SetAckReq(false)
	if v.PSN() != 1 || v.AckReq() || v.Resv7() != 0x2a {
		t.Errorf("setters: psn %#x A %v resv7 %#x", v.PSN(), v.AckReq(), v.Resv7())
	}
	f.TVer = 0x1f // only four bits are written
	f.Encode(b)
	if BTH(b).TVer() != 0xf || BTH(b).PadCount() != 3 {
		t.Errorf("TVer %#x pad %d", BTH(b).TVer(), BTH(b).PadCount())
	}
}

func TestExtendedHeaderViews(t *testing.T) {
	b := make([]byte, 32)
	PutRETH(b, 0x0102030405060708, 0x0a0b0c0d, 0x11223344)
	if !bytes.Equal(b[:16], []byte{1, 2, 3, 4, 5, 6, 7, 8, 0xa, 0xb, 0xc, 0xd, 0x11, 0x22, 0x33, 0x44}) {
		t.Errorf("RETH % x", b[:16])
	}
	r := RETH(b)
	if r.VA() != 0x0102030405060708 || r.RKey() != 0x0a0b0c0d || r.DMALen() != 0x11223344 {
		t.Error("RETH view")
	}
	PutAETH(b, NAKSyndrome(NAKRemoteAccessError), 0x123456)
	if !bytes.Equal(b[:4], []byte{0x62, 0x12, 0x34, 0x56}) || AETH(b).MSN() != 0x123456 || AETH(b).Syndrome() != 0x62 {
		t.Errorf("AETH % x", b[:4])
	}
	PutDETH(b, 0x80010000, 0xabcdef)
	if !bytes.Equal(b[:8], []byte{0x80, 0x01, 0, 0, 0, 0xab, 0xcd, 0xef}) || DETH(b).QKey() != 0x80010000 || DETH(b).SrcQP() != 0xabcdef {
		t.Errorf("DETH % x", b[:8])
	}
	PutAtomicETH(b, 0x1111111111111111, 0x22222222, 0x3333333333333333, 0x4444444444444444)
	a := AtomicETH(b)
	if a.VA() != 0x1111111111111111 || a.RKey() != 0x22222222 || a.SwapAdd() != 0x3333333333333333 || a.Compare() != 0x4444444444444444 {
		t.Error("AtomicETH view")
	}
	if b[12] != 0x33 || b[27] != 0x44 {
		t.Errorf("AtomicETH layout % x", b[:28])
	}
	copy(b, []byte{0, 0, 0, 0, 0, 0, 0, 7})
	if AtomicAck(b).Orig() != 7 || ImmDt(b[4:]).Value() != 7 || IETH(b[4:]).RKey() != 7 {
		t.Error("AtomicAck/ImmDt/IETH views")
	}
	copy(b, []byte{0xff, 0x01, 0x02, 0x03})
	if RDETH(b).EEContext() != 0x010203 || XRCETH(b).XRCSRQ() != 0x010203 {
		t.Error("RDETH/XRCETH ignore the reserved byte")
	}
	// A DCETH as ConnectX sends it on a request (seen).
	dc := DCETH([]byte{0x11, 0x00, 0x90, 0x36, 0x00, 0x71, 0x50, 0x01, 0x00, 0x61, 0xe2, 0x4e,
		0x00, 0x00, 0xc0, 0xdc, 0, 0, 0, 0})
	if dc.Flags() != 0x11 || dc.SenderQP() != 0x9036 || dc.Word() != 0x00715001 || dc.Conn() != 0x61e24e || dc.Tail() != 0xc0dc00000000 {
		t.Errorf("DCETH view: %#x %#x %#x %#x %#x", dc.Flags(), dc.SenderQP(), dc.Word(), dc.Conn(), dc.Tail())
	}
}
