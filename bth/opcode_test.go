package bth

import (
	"strings"
	"testing"
)

// Header sizes as the IBTA tables give them, written out again here so
// that the table is checked against independent numbers.
var wantSize = map[Hdr]int{
	HdrRDETH: 4, HdrDETH: 8, HdrXRCETH: 4, HdrFETH: 4, HdrRETH: 16, HdrAtomicETH: 28,
	HdrAETH: 4, HdrAtomicAck: 8, HdrImmDt: 4, HdrIETH: 4, HdrCNPPad: 16, HdrDCETH: 20,
}

type opRow struct {
	op      Opcode
	name    string
	kind    Kind
	pos     Position
	hdrs    []Hdr // in wire order
	payload bool
	request bool
	hdrLen  int // BTH plus extended headers (rxe_opcode.c .length)
}

// rcRows is the RC transport as rxe_opcode.c and IBTA table 35 describe
// it: header order, offsets and lengths.
var rcRows = []opRow{
	{0x00, "RC_SEND_FIRST", KindSend, PosFirst, nil, true, true, 12},
	{0x01, "RC_SEND_MIDDLE", KindSend, PosMiddle, nil, true, true, 12},
	{0x02, "RC_SEND_LAST", KindSend, PosLast, nil, true, true, 12},
	{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", KindSend, PosLast, []Hdr{HdrImmDt}, true, true, 16},
	{0x04, "RC_SEND_ONLY", KindSend, PosOnly, nil, true, true, 12},
	{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, []Hdr{HdrImmDt}, true, true, 16},
	{0x06, "RC_RDMA_WRITE_FIRST", KindWrite, PosFirst, []Hdr{HdrRETH}, true, true, 28},
	{0x07, "RC_RDMA_WRITE_MIDDLE", KindWrite, PosMiddle, nil, true, true, 12},
	{0x08, "RC_RDMA_WRITE_LAST", KindWrite, PosLast, nil, true, true, 12},
	{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", KindWrite, PosLast, []Hdr{HdrImmDt}, true, true, 16},
	{0x0a, "RC_RDMA_WRITE_ONLY", KindWrite, PosOnly, []Hdr{HdrRETH}, true, true, 28},
	{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PosOnly, []Hdr{HdrRETH, HdrImmDt}, true, true, 32},
	{0x0c, "RC_RDMA_READ_REQUEST", KindReadRequest, PosOnly, []Hdr{HdrRETH}, false, true, 28},
	{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", KindReadResponse, PosFirst, []Hdr{HdrAETH}, true, false, 16},
	{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", KindReadResponse, PosMiddle, nil, true, false, 12},
	{0x0f, "RC_RDMA_READ_RESPONSE_LAST", KindReadResponse, PosLast, []Hdr{HdrAETH}, true, false, 16},
	{0x10, "RC_RDMA_READ_RESPONSE_ONLY", KindReadResponse, PosOnly, []Hdr{HdrAETH}, true, false, 16},
	{0x11, "RC_ACKNOWLEDGE", KindAck, PosOnly, []Hdr{HdrAETH}, false, false, 16},
	{0x12, "RC_ATOMIC_ACKNOWLEDGE", KindAtomicAck, PosOnly, []Hdr{HdrAETH, HdrAtomicAck}, false, false, 24},
	{0x13, "RC_COMPARE_SWAP", KindCompareSwap, PosOnly, []Hdr{HdrAtomicETH}, false, true, 40},
	{0x14, "RC_FETCH_ADD", KindFetchAdd, PosOnly, []Hdr{HdrAtomicETH}, false, true, 40},
	{0x16, "RC_SEND_LAST_WITH_INVALIDATE", KindSend, PosLast, []Hdr{HdrIETH}, true, true, 16},
	{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", KindSend, PosOnly, []Hdr{HdrIETH}, true, true, 16},
	{0x1c, "RC_FLUSH", KindFlush, PosOnly, []Hdr{HdrFETH, HdrRETH}, false, true, 32},
	{0x1d, "RC_ATOMIC_WRITE", KindAtomicWrite, PosOnly, []Hdr{HdrRETH}, true, true, 28},
}

var otherRows = []opRow{
	// UC: the SEND and WRITE forms of RC, same headers.
	{0x20, "UC_SEND_FIRST", KindSend, PosFirst, nil, true, true, 12},
	{0x21, "UC_SEND_MIDDLE", KindSend, PosMiddle, nil, true, true, 12},
	{0x22, "UC_SEND_LAST", KindSend, PosLast, nil, true, true, 12},
	{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", KindSend, PosLast, []Hdr{HdrImmDt}, true, true, 16},
	{0x24, "UC_SEND_ONLY", KindSend, PosOnly, nil, true, true, 12},
	{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, []Hdr{HdrImmDt}, true, true, 16},
	{0x26, "UC_RDMA_WRITE_FIRST", KindWrite, PosFirst, []Hdr{HdrRETH}, true, true, 28},
	{0x27, "UC_RDMA_WRITE_MIDDLE", KindWrite, PosMiddle, nil, true, true, 12},
	{0x28, "UC_RDMA_WRITE_LAST", KindWrite, PosLast, nil, true, true, 12},
	{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", KindWrite, PosLast, []Hdr{HdrImmDt}, true, true, 16},
	{0x2a, "UC_RDMA_WRITE_ONLY", KindWrite, PosOnly, []Hdr{HdrRETH}, true, true, 28},
	{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PosOnly, []Hdr{HdrRETH, HdrImmDt}, true, true, 32},
	// UD: SEND_ONLY with a DETH (rxe: DETH at 12, ImmDt at 20, payload at 20/24).
	{0x64, "UD_SEND_ONLY", KindSend, PosOnly, []Hdr{HdrDETH}, true, true, 20},
	{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, []Hdr{HdrDETH, HdrImmDt}, true, true, 24},
	// CNP: BTH and 16 reserved bytes (Annex A17.9.3).
	{0x81, "CNP", KindCNP, PosOnly, []Hdr{HdrCNPPad}, false, false, 28},
	// RD (rxe_opcode.c): RDETH on every packet, DETH on requests, RDETH first.
	{0x40, "RD_SEND_FIRST", KindSend, PosFirst, []Hdr{HdrRDETH, HdrDETH}, true, true, 24},
	{0x4a, "RD_RDMA_WRITE_ONLY", KindWrite, PosOnly, []Hdr{HdrRDETH, HdrDETH, HdrRETH}, true, true, 40},
	{0x4b, "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PosOnly, []Hdr{HdrRDETH, HdrDETH, HdrRETH, HdrImmDt}, true, true, 44},
	{0x4c, "RD_RDMA_READ_REQUEST", KindReadRequest, PosOnly, []Hdr{HdrRDETH, HdrDETH, HdrRETH}, false, true, 40},
	{0x4d, "RD_RDMA_READ_RESPONSE_FIRST", KindReadResponse, PosFirst, []Hdr{HdrRDETH, HdrAETH}, true, false, 20},
	{0x4e, "RD_RDMA_READ_RESPONSE_MIDDLE", KindReadResponse, PosMiddle, []Hdr{HdrRDETH}, true, false, 16},
	{0x51, "RD_ACKNOWLEDGE", KindAck, PosOnly, []Hdr{HdrRDETH, HdrAETH}, false, false, 20},
	{0x52, "RD_ATOMIC_ACKNOWLEDGE", KindAtomicAck, PosOnly, []Hdr{HdrRDETH, HdrAETH, HdrAtomicAck}, false, false, 28},
	{0x53, "RD_COMPARE_SWAP", KindCompareSwap, PosOnly, []Hdr{HdrRDETH, HdrDETH, HdrAtomicETH}, false, true, 52},
	{0x54, "RD_FETCH_ADD", KindFetchAdd, PosOnly, []Hdr{HdrRDETH, HdrDETH, HdrAtomicETH}, false, true, 52},
	{0x55, "RD_RESYNC", KindResync, PosOnly, []Hdr{HdrRDETH, HdrDETH}, false, true, 24},
}

func checkRow(t *testing.T, oi *OpInfo, r opRow) {
	t.Helper()
	if !oi.Valid {
		t.Errorf("%#02x: not valid", uint8(r.op))
		return
	}
	if oi.Name != r.name {
		t.Errorf("%#02x: name %q, want %q", uint8(r.op), oi.Name, r.name)
	}
	if oi.Kind != r.kind || oi.Pos != r.pos || oi.Payload != r.payload || oi.Request != r.request {
		t.Errorf("%s: kind/pos/payload/request = %v/%v/%v/%v, want %v/%v/%v/%v", r.name,
			oi.Kind, oi.Pos, oi.Payload, oi.Request, r.kind, r.pos, r.payload, r.request)
	}
	if oi.Transport != Transport(r.op>>5) {
		t.Errorf("%s: transport %v", r.name, oi.Transport)
	}
	var all Hdr
	off := 12
	for _, h := range r.hdrs {
		all |= h
		if !oi.Has(h) {
			t.Errorf("%s: lacks %v", r.name, h)
		}
		if got := oi.Offset(h); got != off {
			t.Errorf("%s: %v at offset %d, want %d", r.name, h, got, off)
		}
		off += wantSize[h]
	}
	if oi.Hdrs != all {
		t.Errorf("%s: headers %v, want %v", r.name, oi.Hdrs, all)
	}
	if int(oi.HdrLen) != r.hdrLen || off != r.hdrLen {
		t.Errorf("%s: header length %d (sum %d), want %d", r.name, oi.HdrLen, off, r.hdrLen)
	}
	if oi.Imm != oi.Has(HdrImmDt) || oi.Inv != oi.Has(HdrIETH) {
		t.Errorf("%s: Imm/Inv flags disagree with headers", r.name)
	}
	for h := Hdr(1); h < 1<<numHdr; h <<= 1 {
		if !oi.Has(h) && oi.Offset(h) != -1 {
			t.Errorf("%s: offset of absent %v is %d", r.name, h, oi.Offset(h))
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	seen := map[Opcode]bool{}
	check := func(r opRow) {
		seen[r.op] = true
		checkRow(t, r.op.Info(), r)
		if r.op.String() != r.name {
			t.Errorf("%#02x: String %q", uint8(r.op), r.op.String())
		}
	}
	for _, r := range rcRows {
		check(r)
		// XRC (IBTA annex A14): the same operations; requests carry an
		// XRCETH right after the BTH, responses do not.
		x := r
		x.op |= 0xa0
		x.name = "XRC_" + strings.TrimPrefix(r.name, "RC_")
		if r.request {
			x.hdrs = append([]Hdr{HdrXRCETH}, r.hdrs...)
			x.hdrLen += 4
		}
		check(x)
	}
	for _, r := range otherRows {
		check(r)
	}
	// The RD rows not listed above follow the same rule as the listed ones.
	for _, r := range rcRows {
		if r.op > 0x14 {
			continue
		}
		d := r
		d.op |= 0x40
		d.name = "RD_" + strings.TrimPrefix(r.name, "RC_")
		if seen[d.op] {
			continue
		}
		if r.request {
			d.hdrs = append([]Hdr{HdrRDETH, HdrDETH}, r.hdrs...)
			d.hdrLen += 12
		} else {
			d.hdrs = append([]Hdr{HdrRDETH}, r.hdrs...)
			d.hdrLen += 4
		}
		check(d)
	}
	n := 0
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		if op.Valid() {
			n++
			if !seen[op] {
				t.Errorf("%#02x (%v) is valid but not expected", i, op)
			}
		} else if !strings.HasPrefix(op.String(), "RESERVED_0x") {
			t.Errorf("%#02x: reserved opcode named %q", i, op.String())
		}
	}
	// RC 25, XRC 25, UC 12, RD 22, UD 2, CNP 1.
	if n != 87 {
		t.Errorf("%d valid opcodes, want 87", n)
	}
}

// TestDCTable checks the ConnectX DC layout against the DC captures: a
// 20-byte DCETH right after the BTH, then the RC operation's headers.
func TestDCTable(t *testing.T) {
	rows := []opRow{
		{0x46, "DC_RDMA_WRITE_FIRST", KindWrite, PosFirst, []Hdr{HdrDCETH, HdrRETH}, true, true, 48},
		{0x47, "DC_RDMA_WRITE_MIDDLE", KindWrite, PosMiddle, []Hdr{HdrDCETH}, true, true, 32},
		{0x4a, "DC_RDMA_WRITE_ONLY", KindWrite, PosOnly, []Hdr{HdrDCETH, HdrRETH}, true, true, 48},
		{0x51, "DC_ACKNOWLEDGE", KindAck, PosOnly, []Hdr{HdrDCETH, HdrAETH}, true, false, 36},
		{0x55, "DC_CONNECT", KindDCConnect, PosOnly, []Hdr{HdrDCETH}, true, true, 32},
		{0x4c, "DC_RDMA_READ_REQUEST", KindReadRequest, PosOnly, []Hdr{HdrDCETH, HdrRETH}, false, true, 48},
		{0x52, "DC_ATOMIC_ACKNOWLEDGE", KindAtomicAck, PosOnly, []Hdr{HdrDCETH, HdrAETH, HdrAtomicAck}, false, false, 44},
	}
	for _, r := range rows {
		checkRow(t, DCInfo(r.op), r)
	}
	for i := 0; i < 256; i++ {
		if DCInfo(Opcode(i)).Valid != (i >= 0x40 && i <= 0x55) {
			t.Errorf("DCInfo(%#02x).Valid = %v", i, DCInfo(Opcode(i)).Valid)
		}
	}
}

func TestOpcodeHelpers(t *testing.T) {
	if got := OpSendOnly.On(TransportUC); got != 0x24 {
		t.Errorf("SEND_ONLY on UC = %#x", got)
	}
	if got := OpWriteFirst.On(TransportXRC); got != 0xa6 {
		t.Errorf("WRITE_FIRST on XRC = %#x", got)
	}
	if got := Opcode(0x65).On(TransportRC); got != OpSendOnlyImm {
		t.Errorf("UD_SEND_ONLY_IMM on RC = %#x", got)
	}
	if s := (HdrDCETH | HdrRETH | HdrImmDt | HdrRDETH).String(); s != "DCETH+RDETH+RETH+ImmDt" {
		t.Errorf("Hdr.String = %q", s)
	}
	for h, n := range wantSize {
		if HdrLen(h) != n {
			t.Errorf("HdrLen(%v) = %d, want %d", h, HdrLen(h), n)
		}
	}
	if HdrLen(HdrRETH|HdrAETH) != 0 {
		t.Error("HdrLen of a set is not 0")
	}
	if TransportCNP.String() != "CNP" || Transport(7).String() != "T7" {
		t.Error("transport names")
	}
	if KindDCConnect.String() != "dc_connect" || Kind(200).String() != "invalid" || PosMiddle.String() != "middle" {
		t.Error("kind/position names")
	}
}

func TestLookup(t *testing.T) {
	for c := 0; c < 256; c++ {
		o := Opcode(c)
		oi := o.Info()
		if !oi.Valid {
			continue
		}
		got, ok := Lookup(oi.Transport, oi.Kind, oi.Pos, oi.Imm, oi.Inv)
		if !ok || got != o {
			t.Errorf("Lookup(%s) = %s, %v; want %s", oi.Name, got, ok, o)
		}
	}
	for _, c := range []struct {
		t        Transport
		k        Kind
		pos      Position
		imm, inv bool
		want     Opcode
		ok       bool
	}{
		{TransportRC, KindSend, PosLast, true, false, OpSendLastImm, true},
		{TransportRC, KindSend, PosOnly, false, true, OpSendOnlyInv, true},
		{TransportUC, KindWrite, PosOnly, true, false, OpUCBase | OpWriteOnlyImm, true},
		{TransportUD, KindSend, PosOnly, true, false, OpUDSendOnlyImm, true},
		{TransportUD, KindSend, PosFirst, false, false, 0, false},
		{TransportUC, KindReadRequest, PosOnly, false, false, 0, false},
		{TransportUC, KindSend, PosOnly, false, true, 0, false},
		{TransportRC, KindWrite, PosMiddle, true, false, 0, false},
		{TransportRC, KindSend, PosOnly, true, true, 0, false},
	} {
		got, ok := Lookup(c.t, c.k, c.pos, c.imm, c.inv)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("Lookup(%s, %s, %s, imm %v, inv %v) = %s, %v; want %s, %v", c.t, c.k, c.pos, c.imm, c.inv, got, ok, c.want, c.ok)
		}
	}
}
