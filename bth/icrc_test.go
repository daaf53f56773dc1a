package bth

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
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

// capturedICRCs lists frames whose ICRC another implementation computed
// and put on the wire, rdma_rxe (Linux 6.1) or a ConnectX NIC, and one
// frame rxe verified on receipt. The bytes
// of each frame come from its capture file; icrc holds the four ICRC bytes
// as they appear at the end of the frame, read as a big-endian number (as
// a hex dump or tshark's infiniband.invariant.crc shows them), so the CRC
// value is their little-endian reading. src is the sender's address, which
// tells the rxe frames of the committed captures (192.0.2.1) from those
// uroce sent (192.0.2.3), whose ICRC bth itself computed.
//
// No capture holds a RoCE frame over IPv6, with an 802.1Q tag or with
// IPv4 options (IHL > 5). The RoCEv1 frames check the masking of the
// 40-byte GRH, which has the IPv6 header's layout; RoCEv2 over IPv6 is
// checked only against the naive reference (TestICRCFastVsNaive,
// TestBuildParseVLANIPv6). TestVLANNotCovered tags rxe frames and checks
// their ICRC still verifies. The IPv4-options path is checked only
// against the naive reference (TestIPv4Options, NaiveICRC).
var capturedICRCs = []struct {
	shared bool   // in ../shared/pcaps rather than the committed pcaps/rxe-6.1
	file   string // relative to that folder
	frame  int    // 1-based, as tshark numbers frames
	op     Opcode
	src    string
	icrc   uint32
	what   string
}{
	// Committed captures: the rxe side of uroce's interop runs.
	{false, "rc_pingpong-uroce_client.pcap", 18, OpSendOnly, "192.0.2.1", 0xc1d52240, "rxe: 13-byte SEND_ONLY, pad count 3"},
	{false, "rc_pingpong-uroce_client.pcap", 15, OpAck, "192.0.2.1", 0xf2d9f7fd, "rxe: ACK"},
	{false, "write_bw-mtu4096-uroce_server.pcap", 22, OpWriteFirst, "192.0.2.1", 0x991113f2, "rxe: WRITE_FIRST with RETH, 4096 bytes"},
	{false, "write_bw-mtu4096-uroce_server.pcap", 24, OpWriteLast, "192.0.2.1", 0x5c92e6a7, "rxe: WRITE_LAST, 1808 bytes"},
	{false, "bad_rkey-uroce_target.pcap", 20, OpWriteOnly, "192.0.2.1", 0x67fcd417, "rxe: WRITE_ONLY with RETH"},
	{false, "read_bw-uroce_server.pcap", 20, OpReadRequest, "192.0.2.1", 0xe5fb9e81, "rxe: READ_REQUEST"},
	{false, "atomic_bw-uroce_server.pcap", 20, OpFetchAdd, "192.0.2.1", 0x012926db, "rxe: FETCH_ADD"},
	{false, "ud_pingpong-uroce_server.pcap", 12, OpUDSendOnly, "192.0.2.1", 0x27247293, "rxe: UD SEND_ONLY with DETH"},
	// Shared captures between two rxe guests.
	{true, "rxe-6.1/read_bw.pcap", 27, OpReadRespFirst, "192.0.2.1", 0xcb4e2e71, "rxe: READ_RESPONSE_FIRST with AETH"},
	{true, "rxe-6.1/read_bw.pcap", 28, OpReadRespMiddle, "192.0.2.1", 0x9d04b822, "rxe: READ_RESPONSE_MIDDLE"},
	{true, "rxe-6.1/read_bw.pcap", 29, OpReadRespLast, "192.0.2.1", 0xc2481c60, "rxe: READ_RESPONSE_LAST with AETH"},
	{true, "rxe-6.1/atomic_bw.pcap", 29, OpAtomicAck, "192.0.2.1", 0xa8a8dcc3, "rxe: ATOMIC_ACKNOWLEDGE"},
	{true, "rxe-6.1/uc_pingpong.pcap", 17, OpUCBase | OpSendOnly, "192.0.2.1", 0xe9031d9d, "rxe: UC SEND_ONLY"},
	// Not sent by rxe but accepted by it: rxe drops a packet whose ICRC
	// fails, and it acknowledged this one (frame 16). It is the only
	// frame with a UDP checksum (0xc66d) and ECN CE (TOS 0x6b), so it
	// checks that both are masked.
	{true, "rxe-6.1/host_rc_ce_csum.pcap", 15, OpSendOnly, "192.0.2.3", 0x1b5443e1, "accepted by rxe: SEND_ONLY, TOS 0x6b, UDP checksum set"},
	// ConnectX, with non-zero TOS (0x02, 0x6a, ECT(1) 0x01) and MigReq set.
	{true, "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev2_test.pcap", 1, OpSendFirst, "172.17.242.47", 0x003b81b9, "connectx: SEND_FIRST, TOS 0x02"},
	{true, "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev2_test.pcap", 17, OpAck, "172.17.242.56", 0x29fadcca, "connectx: ACK, TOS 0x6a"},
	{true, "public/magnate3_linux-riscv-dev__soft-roce_02-2-write_ibdump_write.pcap", 8, OpWriteOnly, "172.17.242.47", 0xa2ccaaa7, "connectx: WRITE_ONLY with RETH, 1024 bytes"},
	{true, "public/magnate3_linux-riscv-dev__soft-roce_rdma-write-read_ibdump_read2.pcap", 14, OpReadRespOnly, "172.17.242.56", 0x801a9c8a, "connectx: READ_RESPONSE_ONLY"},
	{true, "public/magnate3_linux-riscv-dev__nvme_document_nvme-discover.pcap", 36, OpWriteFirst, "2.2.2.3", 0x3539143f, "connectx: WRITE_FIRST, ECT(1)"},
	{true, "public/scapy_roce_uts__hw_hex_vectors.pcap", 1, OpCNP, "10.0.17.1", 0x82fd002a, "connectx-4 lx: CNP with BECN set (BTH byte 4 0x40), TOS 0xc2"},
	// ConnectX RoCEv1: GRH, no UDP.
	{true, "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap", 1, OpSendFirst, "::ffff:172.17.242.47", 0xe23d9903, "connectx: RoCEv1 SEND_FIRST"},
	{true, "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap", 103, OpAck, "::ffff:172.17.242.47", 0x16b3cd16, "connectx: RoCEv1 ACK"},
}

// TestICRCCapturedFrames checks the fast ICRC and the naive bitwise
// reference against ICRCs that rdma_rxe and ConnectX NICs computed. The
// masking rule (which IP, UDP and BTH bytes become ones) is the part both
// bth implementations share, so only values from another implementation
// can show it is right: a wrong rule would give another CRC for these
// frames. The frames cover RC, UC and UD, RETH, AETH, AtomicETH, DETH,
// padding, large payloads, non-zero TOS and UDP checksum, a set BECN bit
// and RoCEv1. Frames from ../shared/pcaps are skipped when it is absent.
func TestICRCCapturedFrames(t *testing.T) {
	for _, c := range capturedICRCs {
		t.Run(fmt.Sprintf("%s#%d", filepath.Base(c.file), c.frame), func(t *testing.T) {
			path := filepath.Join("..", "pcaps", "rxe-6.1", c.file)
			if c.shared {
				path = filepath.Join("..", "..", "shared", "pcaps", c.file)
				if _, err := os.Stat(path); err != nil {
					t.Skipf("reference capture absent: %v", err)
				}
			}
			frames := readFrames(t, path)
			if c.frame > len(frames) {
				t.Fatalf("%d frames, want frame %d", len(frames), c.frame)
			}
			f := frames[c.frame-1]
			var p Packet
			if err := Parse(f, &p); err != nil {
				t.Fatalf("parse: %v", err)
			}
			if p.Opcode() != c.op || p.SrcIP().String() != c.src {
				t.Fatalf("frame is %v from %v, want %v from %s (%s)", p.Opcode(), p.SrcIP(), c.op, c.src, c.what)
			}
			stored := f[p.End-ICRCLen : p.End]
			if got := binary.BigEndian.Uint32(stored); got != c.icrc {
				t.Fatalf("icrc bytes in the capture % x, want %08x", stored, c.icrc)
			}
			want := binary.LittleEndian.Uint32(stored)
			fast := p.ComputeICRC()
			naive := NaiveICRC(f[p.L3:p.End-ICRCLen], p.Version == 1)
			if fast != want || naive != want {
				t.Errorf("%s: fast icrc %08x, naive %08x, on the wire %08x", c.what, fast, naive, want)
			}
		})
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
