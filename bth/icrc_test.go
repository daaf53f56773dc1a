package bth

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// validOps lists the defined opcodes. It is a function because the
// table is filled by init, after package variables.
func validOps() []Opcode {
	var ops []Opcode
	for i := 0; i < 256; i++ {
		if Opcode(i).Valid() {
			ops = append(ops, Opcode(i))
		}
	}
	return ops
}

// randomHeaders returns headers with random values: IPv4, IPv6 or
// RoCEv1, with or without VLAN, any valid opcode, DC or not.
func randomHeaders(rng *rand.Rand) Headers {
	var h Headers
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	fill(h.DstMAC[:])
	fill(h.SrcMAC[:])
	h.HasVLAN = rng.IntN(4) == 0
	h.VLANTCI = uint16(rng.Uint32())
	switch rng.IntN(3) {
	case 0:
		var a, b [4]byte
		fill(a[:])
		fill(b[:])
		h.SrcIP, h.DstIP = netip.AddrFrom4(a), netip.AddrFrom4(b)
		if rng.IntN(4) == 0 {
			h.IPv4OptionsLen = uint8(4 * rng.IntN(11))
			fill(h.IPv4Options[:h.IPv4OptionsLen])
		}
	case 1:
		var a, b [16]byte
		fill(a[:])
		fill(b[:])
		h.SrcIP, h.DstIP = netip.AddrFrom16(a), netip.AddrFrom16(b)
	default:
		var a, b [16]byte
		fill(a[:])
		fill(b[:])
		h.Version = 1
		h.SrcIP, h.DstIP = netip.AddrFrom16(a), netip.AddrFrom16(b)
	}
	h.TrafficClass = uint8(rng.Uint32())
	h.FlowLabel = rng.Uint32() & 0xfffff
	h.HopLimit = uint8(rng.Uint32())
	h.IPID = uint16(rng.Uint32())
	h.IPFlags = uint16(rng.Uint32()) & 0xc000
	h.Exact = rng.IntN(2) == 0
	h.SrcPort = uint16(rng.Uint32())
	h.UDPChecksum = rng.IntN(2) == 0
	ops := validOps()
	h.BTH = BTHFields{Opcode: ops[rng.IntN(len(ops))], SE: rng.IntN(2) == 0, MigReq: rng.IntN(2) == 0,
		TVer: uint8(rng.Uint32()) & 15, PKey: uint16(rng.Uint32()), FECN: rng.IntN(2) == 0, BECN: rng.IntN(2) == 0,
		DestQP: rng.Uint32() & 0xffffff, AckReq: rng.IntN(2) == 0, PSN: MakePSN(rng.Uint32()),
		Resv6: uint8(rng.Uint32()) & 0x3f, Resv7: uint8(rng.Uint32()) & 0x7f}
	if h.BTH.Opcode.Transport() == TransportRD && rng.IntN(2) == 0 {
		h.DC = true
		fill(h.DCETH[:])
		h.DCETH[0] |= 0x10
	}
	h.VA, h.RKey, h.DMALen = rng.Uint64(), rng.Uint32(), rng.Uint32()
	h.Syndrome, h.MSN = Syndrome(rng.Uint32()), rng.Uint32()&0xffffff
	h.Imm, h.InvKey = rng.Uint32(), rng.Uint32()
	h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare, h.AtomicAckOrig = rng.Uint64(), rng.Uint32(), rng.Uint64(), rng.Uint64(), rng.Uint64()
	h.QKey, h.SrcQP = rng.Uint32(), rng.Uint32()&0xffffff
	h.EEContext, h.XRCSRQ, h.FETH = rng.Uint32()&0xffffff, rng.Uint32()&0xffffff, rng.Uint32()
	return h
}

// randomFrame builds a valid frame from random headers and a payload of
// random length (up to a 4 KiB MTU and a little over).
func randomFrame(rng *rand.Rand) []byte {
	h := randomHeaders(rng)
	n := rng.IntN(64)
	if rng.IntN(3) == 0 {
		n = rng.IntN(4200)
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	buf := make([]byte, h.FrameLen(n))
	if _, err := Encode(buf, &h, payload); err != nil {
		panic(err)
	}
	return buf
}

// TestICRCFastVsNaive compares the fast ICRC with the bitwise reference
// on random frames of every shape and length.
func TestICRCFastVsNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	kinds := map[string]int{}
	for i := 0; i < 3000; i++ {
		f := randomFrame(rng)
		var p Packet
		if err := Parse(f, &p); err != nil {
			t.Fatalf("random frame %d: %v", i, err)
		}
		kinds[map[bool]string{true: "v6", false: "v4"}[p.IPv6]+map[uint8]string{1: "/v1", 2: ""}[p.Version]]++
		fast := p.ComputeICRC()
		naive := NaiveICRC(f[p.L3:p.End-ICRCLen], p.Version == 1)
		if fast != naive || fast != p.ICRC() {
			t.Fatalf("frame %d (%s, %d bytes): fast %08x naive %08x stored %08x", i, p.Info.Name, len(f), fast, naive, p.ICRC())
		}
	}
	if kinds["v4"] == 0 || kinds["v6"] == 0 || kinds["v6/v1"] == 0 {
		t.Errorf("shapes %v", kinds)
	}
}

// TestICRCRandomBytes runs the fast and naive code on random bytes (no
// frame structure at all) at every length from a bare BTH to 300 bytes
// and at a few large ones.
func TestICRCRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	buf := make([]byte, 60+9000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{4096, 4096 + 12, 8192 + 7, 9000}
	for n := BTHLen; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		// IPv4: the fixed header, version 4 and IHL 5.
		l3 := bytes.Clone(buf[:28+n])
		l3[0] = 0x45
		if got, want := ICRCv4(l3, l3[20:], l3[28:]), NaiveICRC(l3, false); got != want {
			t.Fatalf("ipv4 len %d: %08x != %08x", n, got, want)
		}
		// IPv6.
		l3 = bytes.Clone(buf[:48+n])
		l3[0] = 0x60 | l3[0]&0x0f
		if got, want := ICRCv6(l3, l3[40:], l3[48:]), NaiveICRC(l3, false); got != want {
			t.Fatalf("ipv6 len %d: %08x != %08x", n, got, want)
		}
		// RoCEv1: GRH and no UDP.
		l3 = bytes.Clone(buf[:40+n])
		if got, want := ICRCv6(l3, nil, l3[40:]), NaiveICRC(l3, true); got != want {
			t.Fatalf("roce v1 len %d: %08x != %08x", n, got, want)
		}
	}
}

// TestICRCKnownVector checks one packet by hand: ibv_rc_pingpong's
// SEND_ONLY as rxe computes it gives the same value as crc32 over the
// masked bytes built here field by field.
func TestICRCKnownVector(t *testing.T) {
	h := testHeaders(false, OpSendOnly)
	buf := make([]byte, 200)
	n, _ := Encode(buf, &h, []byte("abcd"))
	f := buf[:n]
	var m []byte
	m = append(m, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	ip := bytes.Clone(f[14:34])
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	m = append(m, ip...)
	udp := bytes.Clone(f[34:42])
	udp[6], udp[7] = 0xff, 0xff
	m = append(m, udp...)
	ib := bytes.Clone(f[42 : n-4])
	ib[4] = 0xff
	m = append(m, ib...)
	want := crc32.ChecksumIEEE(m)
	var p Packet
	if err := Parse(f, &p); err != nil {
		t.Fatal(err)
	}
	if p.ICRC() != want || f[n-4] != byte(want) {
		t.Errorf("icrc %08x (first byte %02x), want %08x stored LSB first", p.ICRC(), f[n-4], want)
	}
}

// TestICRCMaskedFields changes each masked field and checks the ICRC
// does not move, and changes an unmasked byte and checks it does.
func TestICRCMaskedFields(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		h := testHeaders(v6, OpWriteOnly)
		buf := make([]byte, 200)
		n, _ := Encode(buf, &h, []byte("0123456789"))
		var p Packet
		if err := Parse(buf[:n], &p); err != nil {
			t.Fatal(err)
		}
		base := p.ComputeICRC()
		var masked []int
		if v6 {
			masked = []int{p.L3 + 1, p.L3 + 2, p.L3 + 3, p.L3 + 7, p.L4 + 6, p.L4 + 7, p.BTHOff + 4}
		} else {
			masked = []int{p.L3 + 1, p.L3 + 8, p.L3 + 10, p.L3 + 11, p.L4 + 6, p.L4 + 7, p.BTHOff + 4}
		}
		for _, i := range masked {
			buf[i] ^= 0x5a
			if p.ComputeICRC() != base {
				t.Errorf("v6=%v: byte %d changed the ICRC", v6, i)
			}
			buf[i] ^= 0x5a
		}
		if v6 {
			buf[p.L3] ^= 0x05 // low nibble of the first byte: traffic class
			if p.ComputeICRC() != base {
				t.Error("IPv6 traffic class nibble changed the ICRC")
			}
			buf[p.L3] ^= 0x05
		}
		for _, i := range []int{p.L3 + 4, p.L4, p.BTHOff + 3, p.BTHOff + 5, p.PayloadAt, n - 5} {
			buf[i] ^= 1
			if p.ComputeICRC() == base {
				t.Errorf("v6=%v: byte %d did not change the ICRC", v6, i)
			}
			buf[i] ^= 1
		}
	}
}
