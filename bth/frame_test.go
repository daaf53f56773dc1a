package bth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// sharedFile returns the RoCE packets of one reference capture (path
// relative to ../shared/pcaps), skipping the test when it is absent.
func sharedFile(t *testing.T, rel string) []Packet {
	t.Helper()
	path := filepath.Join("..", "..", "shared", "pcaps", rel)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("reference capture %s absent", path)
	}
	var pkts []Packet
	for _, fr := range readFrames(t, path) {
		var p Packet
		if err := Parse(fr, &p); err == nil {
			pkts = append(pkts, p)
		}
	}
	if len(pkts) == 0 {
		t.Fatalf("%s: no roce packets", rel)
	}
	return pkts
}

// reencode checks that decoding then encoding p gives its bytes back.
func reencode(t *testing.T, p *Packet) []byte {
	t.Helper()
	var h Headers
	p.Headers(&h)
	buf := make([]byte, p.End+64)
	n, err := Encode(buf, &h, p.Payload())
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if !bytes.Equal(buf[:n], p.Frame[:p.End]) {
		t.Errorf("%s: re-encoded frame differs:\n got % x\nwant % x", p.Info.Name, buf[:n], p.Frame[:p.End])
	}
	return buf[:n]
}

func TestConnectXCNP(t *testing.T) {
	var cnp *Packet
	pkts := sharedFile(t, "public/scapy_roce_uts__hw_hex_vectors.pcap")
	for i := range pkts {
		if pkts[i].Opcode() == OpCNP {
			cnp = &pkts[i]
		}
	}
	if cnp == nil {
		t.Fatal("no CNP in the ConnectX vectors")
	}
	b := cnp.BTH()
	if cnp.Info.Kind != KindCNP || !b.BECN() || b.FECN() || b.PSN() != 0 || b.DestQP() != 0x118 || b.PKey() != 0xffff {
		t.Errorf("CNP BTH: %+v", b.Fields())
	}
	// ConnectX sends CNPs from UDP port 0 with DSCP 48.
	if cnp.SrcPort() != 0 || cnp.TrafficClass()>>2 != 48 {
		t.Errorf("CNP sport %d dscp %d", cnp.SrcPort(), cnp.TrafficClass()>>2)
	}
	pad := cnp.Frame[cnp.BTHOff+BTHLen : cnp.BTHOff+BTHLen+CNPPadLen]
	if !bytes.Equal(pad, make([]byte, 16)) || cnp.PayloadN != 0 {
		t.Errorf("CNP reserved bytes % x, payload %d", pad, cnp.PayloadN)
	}
	if !cnp.ICRCOK() || !cnp.IPv4ChecksumOK() {
		t.Error("CNP ICRC or IP checksum does not verify")
	}
	reencode(t, cnp)
}

func TestPad(t *testing.T) {
	n := 0
	for _, p := range sharedFile(t, "rxe-6.1/rc_pingpong_pad.pcap") {
		if p.Opcode() != OpSendOnly {
			continue
		}
		n++
		// ibv_rc_pingpong -s 13: 13 bytes and 3 pad bytes.
		if p.Pad != 3 || p.PayloadN != 13 || p.BTH().PadCount() != 3 {
			t.Errorf("pad %d payload %d", p.Pad, p.PayloadN)
		}
		if (p.End-p.BTHOff)%4 != 0 {
			t.Errorf("transport length %d not a multiple of 4", p.End-p.BTHOff)
		}
		if !p.ICRCOK() {
			t.Error("ICRC does not verify")
		}
		reencode(t, &p)
	}
	if n == 0 {
		t.Fatal("no SEND_ONLY")
	}
}

func TestHuawei(t *testing.T) {
	ports := map[uint16]int{}
	for _, p := range sharedFile(t, "public/oferby_proxy__roce.pcap") {
		ports[p.SrcPort()]++
		if id := binary.BigEndian.Uint16(p.Frame[p.L3+4:]); id != 0 {
			t.Errorf("IP ID %d, want 0", id)
		}
		if !p.ICRCOK() {
			t.Errorf("%s psn %#x: ICRC does not verify", p.Info.Name, p.BTH().PSN())
		}
		reencode(t, &p)
	}
	if ports[69] == 0 || ports[72] == 0 || len(ports) != 2 {
		t.Errorf("source ports %v, want 69 and 72", ports)
	}
}

func TestRoCEv1(t *testing.T) {
	pkts := sharedFile(t, "public/magnate3_linux-riscv-dev__soft-roce_mellanox_doc_rocev1_test.pcap")
	v1 := 0
	for _, p := range pkts {
		if p.Version != 1 {
			continue
		}
		v1++
		if !p.IPv6 || p.BTHOff != p.L3+40 || p.SrcPort() != 0 {
			t.Fatalf("RoCEv1 layout: %+v", p)
		}
		if !p.ICRCOK() {
			t.Fatalf("%s: ICRC does not verify", p.Info.Name)
		}
		reencode(t, &p)
	}
	if v1 == 0 {
		t.Fatal("no RoCEv1 packets")
	}
}

func TestUDPChecksum(t *testing.T) {
	pkts := sharedFile(t, "rxe-6.1/host_rc_ce_csum.pcap")
	nonzero := 0
	for _, p := range pkts {
		sum := binary.BigEndian.Uint16(p.Frame[p.L4+6:])
		if sum == 0 {
			continue
		}
		nonzero++
		if !p.UDPChecksumOK() || !p.ICRCOK() {
			t.Fatalf("valid checksum %#x rejected", sum)
		}
		// A wrong checksum is caught, and the ICRC does not cover it.
		f := bytes.Clone(p.Frame)
		f[p.L4+6] ^= 0x10
		var q Packet
		if err := Parse(f, &q); err != nil {
			t.Fatal(err)
		}
		if q.UDPChecksumOK() || !q.ICRCOK() {
			t.Error("corrupt UDP checksum accepted, or ICRC changed")
		}
		// Zero means "not computed" and is accepted.
		f[p.L4+6], f[p.L4+7] = 0, 0
		if !q.UDPChecksumOK() {
			t.Error("zero UDP checksum rejected")
		}
		reencode(t, &p)
	}
	if nonzero == 0 {
		t.Fatal("no packet with a UDP checksum")
	}
	if p := pkts[0]; p.ECN() != 3 || p.TrafficClass()>>2 != 26 {
		t.Errorf("traffic class %#x, want DSCP 26 and CE", p.TrafficClass())
	}
}

// testHeaders returns headers for a RoCEv2 packet between documentation
// addresses.
func testHeaders(v6 bool, op Opcode) Headers {
	h := Headers{L2L3: L2L3{
		DstMAC: [6]byte{0x52, 0x54, 0, 0, 0, 1}, SrcMAC: [6]byte{0x52, 0x54, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("192.0.2.2"), DstIP: netip.MustParseAddr("192.0.2.1"),
		IPID: 0x1234, SrcPort: SourcePort(0, 0x11, 0x12),
	}, BTH: BTHFields{Opcode: op, PKey: 0xffff, DestQP: 0x11, PSN: 0xfffffe, AckReq: true}}
	if v6 {
		h.SrcIP = netip.MustParseAddr("2001:db8::2")
		h.DstIP = netip.MustParseAddr("2001:db8::1")
		h.FlowLabel = 0xabcde
		h.TrafficClass = 0x6a
	}
	h.VA, h.RKey, h.DMALen = 0x7f0000001000, 0x1234, 4096
	h.Syndrome, h.MSN = ACKSyndrome(31), 7
	h.Imm, h.InvKey = 0xdeadbeef, 0x55
	h.QKey, h.SrcQP = 0x11111111, 0x22
	return h
}

func TestBuildParseVLANIPv6(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, vlan := range []bool{false, true} {
			for _, op := range []Opcode{OpSendOnly, OpWriteOnlyImm, OpAck, OpReadRespLast, OpUDSendOnlyImm, OpCNP, OpSendLastInv.On(TransportXRC)} {
				h := testHeaders(v6, op)
				h.HasVLAN, h.VLANTCI = vlan, 0x6064 // PCP 3, VID 100
				payload := []byte("hello, rdma")
				if !op.Info().Payload {
					payload = nil
				}
				buf := make([]byte, 256)
				n, err := Encode(buf, &h, payload)
				if err != nil {
					t.Fatal(err)
				}
				var p Packet
				if err := Parse(buf[:n], &p); err != nil {
					t.Fatalf("v6=%v vlan=%v %v: %v", v6, vlan, op, err)
				}
				if p.HasVLAN != vlan || (vlan && p.VLANTCI != 0x6064) || p.IPv6 != v6 || p.Version != 2 {
					t.Errorf("layout %+v", p)
				}
				if !bytes.Equal(p.Payload(), payload) || p.Pad != -len(payload)&3 {
					t.Errorf("payload %q pad %d", p.Payload(), p.Pad)
				}
				if !p.ICRCOK() || p.ComputeICRC() != NaiveICRC(buf[p.L3:p.End-4], false) {
					t.Error("ICRC")
				}
				if !p.IPv4ChecksumOK() {
					t.Error("IPv4 header checksum")
				}
				if p.SrcIP() != h.SrcIP || p.DstIP() != h.DstIP || p.SrcPort() != h.SrcPort || p.DstPort() != UDPPort {
					t.Error("addresses")
				}
				var g Headers
				p.Headers(&g)
				if g.BTH.PSN != h.BTH.PSN || g.BTH.DestQP != 0x11 || g.FlowLabel != h.FlowLabel {
					t.Errorf("headers %+v", g)
				}
				if e := p.ImmDt(); e != nil && e.Value() != 0xdeadbeef {
					t.Error("ImmDt")
				}
				if e := p.IETH(); (e != nil) != p.Info.Inv || (e != nil && e.RKey() != 0x55) {
					t.Error("IETH")
				}
				if e := p.XRCETH(); (e != nil) != (op.Transport() == TransportXRC) {
					t.Error("XRCETH")
				}
				if e := p.DETH(); e != nil && (e.QKey() != 0x11111111 || e.SrcQP() != 0x22) {
					t.Error("DETH")
				}
				reencode(t, &p)
			}
		}
	}
}

// TestVLANNotCovered inserts an 802.1Q tag into captured frames: the
// frame still parses and the ICRC still verifies, as the tag is not
// part of it.
func TestVLANNotCovered(t *testing.T) {
	for _, p := range sharedFile(t, "rxe-6.1/write_bw.pcap")[:8] {
		f := make([]byte, 0, len(p.Frame)+4)
		f = append(f, p.Frame[:12]...)
		f = append(f, 0x81, 0x00, 0xa0, 0x05) // PCP 5, VID 5
		f = append(f, p.Frame[12:]...)
		var q Packet
		if err := Parse(f, &q); err != nil {
			t.Fatal(err)
		}
		if !q.HasVLAN || q.VLANTCI != 0xa005 || q.L3 != 18 || !q.ICRCOK() {
			t.Errorf("tagged %s: vlan %v tci %#x icrc %v", q.Info.Name, q.HasVLAN, q.VLANTCI, q.ICRCOK())
		}
		reencode(t, &q)
	}
}

// TestIPv4Options inserts IPv4 options into captured frames: the fixed
// header (with its new IHL and length) is covered by the ICRC, the
// options are not.
func TestIPv4Options(t *testing.T) {
	opts := []byte{0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00} // router alert, NOPs, EOL
	for _, p := range sharedFile(t, "rxe-6.1/read_bw.pcap")[:6] {
		f := make([]byte, 0, len(p.Frame)+len(opts))
		f = append(f, p.Frame[:p.L3+20]...)
		f = append(f, opts...)
		f = append(f, p.Frame[p.L3+20:]...)
		ip := f[p.L3:]
		ip[0] = 0x47
		binary.BigEndian.PutUint16(ip[2:], binary.BigEndian.Uint16(ip[2:])+uint16(len(opts)))
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		var q Packet
		if err := Parse(f, &q); err != nil {
			t.Fatal(err)
		}
		if q.L4 != q.L3+28 || !bytes.Equal(q.IPv4Options(), opts) || !q.IPv4ChecksumOK() {
			t.Fatalf("options: L4 %d opts % x", q.L4-q.L3, q.IPv4Options())
		}
		fast := q.ComputeICRC()
		if fast != NaiveICRC(f[q.L3:q.End-4], false) {
			t.Error("fast and naive ICRC differ with options")
		}
		// Store the ICRC for the new header, then check a change inside
		// the options leaves it valid.
		putICRC(f[q.End-4:], fast)
		f[q.L3+22] ^= 0xff
		if !q.ICRCOK() {
			t.Error("ICRC covers the options")
		}
		f[q.L3+22] ^= 0xff
		reencode(t, &q)
	}
	if p := sharedFile(t, "rxe-6.1/read_bw.pcap")[0]; p.IPv4Options() != nil {
		t.Error("options reported on a plain header")
	}
	h := testHeaders(false, OpSendOnly)
	h.IPv4OptionsLen = 3
	if _, err := Encode(make([]byte, 200), &h, nil); !errors.Is(err, ErrBadOptions) {
		t.Errorf("3 bytes of options: %v", err)
	}
}

// TestDCPackets checks the ConnectX DC captures decode with a DCETH.
func TestDCPackets(t *testing.T) {
	pkts := sharedFile(t, "public/sniffer-sport-fixed/magnate3_linux-riscv-dev__soft-roce_rdma-ping_dc_dc-small2.sport-fixed.pcap")
	names := map[string]int{}
	for _, p := range pkts {
		names[p.Info.Name]++
		if !p.Info.Has(HdrDCETH) || p.DCETH() == nil {
			t.Fatalf("%s: no DCETH", p.Info.Name)
		}
		if !p.ICRCOK() {
			t.Errorf("%s: ICRC", p.Info.Name)
		}
		d := p.DCETH()
		switch p.Info.Kind {
		case KindWrite:
			if d.Flags() != 0x11 || d.SenderQP() != 0x9035 || d.Conn() != 0x61e97d {
				t.Errorf("write DCETH % x", []byte(d))
			}
			if p.Info.Pos == PosFirst && (p.RETH().DMALen() != 0x40000 || p.PayloadN != 4096) {
				t.Errorf("DC write first: dma len %#x payload %d", p.RETH().DMALen(), p.PayloadN)
			}
		case KindAck:
			if d.Flags() != 0x10 || d.SenderQP() != 0x807ff4 {
				t.Errorf("ack DCETH % x", []byte(d))
			}
		case KindDCConnect:
			if p.BTH().DestQP() != 0xffffff || d.Conn() != 0xffffff || p.PayloadN != 16 {
				t.Errorf("connect: dqp %#x conn %#x payload %d", p.BTH().DestQP(), d.Conn(), p.PayloadN)
			}
		}
		reencode(t, &p)
	}
	if names["DC_RDMA_WRITE_FIRST"] != 1 || names["DC_RDMA_WRITE_MIDDLE"] == 0 || names["DC_ACKNOWLEDGE"] != 2 || names["DC_CONNECT"] != 1 {
		t.Errorf("opcodes %v", names)
	}
	// A standard RD packet (reserved byte zero) keeps the IBTA layout.
	h := testHeaders(false, OpRDBase|OpWriteOnly)
	h.EEContext = 0x42
	buf := make([]byte, 256)
	n, err := Encode(buf, &h, []byte{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := Parse(buf[:n], &p); err != nil || p.Info != (OpRDBase|OpWriteOnly).Info() || p.RDETH().EEContext() != 0x42 {
		t.Fatalf("standard RD: %v %s", err, p.Info.Name)
	}
}

// TestTruncatedAndMalformed cuts and corrupts frames of every kind: Parse
// never panics, a cut frame is ErrTruncated (or not RoCE when the cut
// falls before the UDP header), and a frame whose IP length is shorter
// than its headers is ErrMalformed.
func TestTruncatedAndMalformed(t *testing.T) {
	var frames [][]byte
	for _, v6 := range []bool{false, true} {
		for _, op := range []Opcode{OpSendOnly, OpWriteFirst, OpAtomicAck, OpFetchAdd, OpUDSendOnly, OpCNP, 0x55} {
			h := testHeaders(v6, op)
			h.HasVLAN = op == OpFetchAdd
			buf := make([]byte, 300)
			n, _ := Encode(buf, &h, []byte("0123456"))
			frames = append(frames, buf[:n])
		}
	}
	h := testHeaders(false, OpSendOnly)
	h.Version = 1
	buf := make([]byte, 300)
	n, _ := Encode(buf, &h, []byte("v1"))
	frames = append(frames, buf[:n])

	for _, f := range frames {
		var full Packet
		if err := Parse(f, &full); err != nil && !errors.Is(err, ErrBadOpcode) {
			t.Fatalf("%v: %v", full.Info, err)
		}
		for cut := 0; cut < len(f); cut++ {
			var p Packet
			err := Parse(f[:cut], &p)
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrNotRoCE) {
				t.Errorf("%s cut at %d of %d: %v", full.Info.Name, cut, len(f), err)
			}
			if cut >= full.L4+8 && full.Version == 2 && !errors.Is(err, ErrTruncated) {
				t.Errorf("%s cut at %d after the UDP header: %v", full.Info.Name, cut, err)
			}
			if cut >= full.BTHOff+BTHLen && p.Info != full.Info {
				t.Errorf("%s cut at %d: BTH not decoded", full.Info.Name, cut)
			}
		}
		// Shrink the IP and UDP lengths below what the opcode needs.
		for short := 0; short < full.End-full.L3; short++ {
			g := bytes.Clone(f)
			setLengths(g, &full, short)
			var p Packet
			err := Parse(g, &p)
			if err == nil && p.End-p.BTHOff < int(p.Info.HdrLen)+ICRCLen {
				t.Errorf("%s: ip length %d accepted", full.Info.Name, short)
			}
			if err == nil || errors.Is(err, ErrBadOpcode) {
				_ = p.ComputeICRC()
				_ = p.Payload()
			}
		}
	}
}

// setLengths rewrites the IP (and UDP) lengths so the packet after the
// IP header is n bytes long.
func setLengths(f []byte, p *Packet, n int) {
	ip := f[p.L3:]
	switch {
	case p.Version == 1:
		binary.BigEndian.PutUint16(ip[4:], uint16(n-40))
	case p.IPv6:
		binary.BigEndian.PutUint16(ip[4:], uint16(n-40))
		binary.BigEndian.PutUint16(f[p.L4+4:], uint16(n-40))
	default:
		binary.BigEndian.PutUint16(ip[2:], uint16(n))
		binary.BigEndian.PutUint16(f[p.L4+4:], uint16(n-20))
	}
}

// TestRandomCorruption flips random bytes of valid frames and checks that
// Parse and, when it succeeds, every accessor stay within bounds.
func TestRandomCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p Packet
	for i := 0; i < 20000; i++ {
		f := randomFrame(rng)
		for k := rng.IntN(4) + 1; k > 0; k-- {
			f[rng.IntN(len(f))] = byte(rng.Uint32())
		}
		f = f[:rng.IntN(len(f)+1)]
		err := Parse(f, &p)
		if err == nil || errors.Is(err, ErrBadOpcode) {
			touchAll(&p)
		}
	}
}

// touchAll calls every accessor of a parsed packet.
func touchAll(p *Packet) {
	_ = p.BTH().Fields()
	_, _, _ = p.RETH(), p.AETH(), p.ImmDt()
	_, _, _ = p.IETH(), p.AtomicETH(), p.AtomicAck()
	_, _, _, _ = p.DETH(), p.RDETH(), p.XRCETH(), p.DCETH()
	_, _ = p.Payload(), p.IPv4Options()
	_, _, _ = p.ICRCOK(), p.UDPChecksumOK(), p.IPv4ChecksumOK()
	_, _, _, _ = p.SrcIP(), p.DstIP(), p.SrcPort(), p.DstPort()
	_, _, _ = p.SrcMAC(), p.DstMAC(), p.ECN()
	var h Headers
	p.Headers(&h)
}

func TestAllocs(t *testing.T) {
	h := testHeaders(false, OpWriteFirst)
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	n, err := Encode(buf, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	var hh Headers
	if err := Parse(buf[:n], &p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Parse", func() { _ = Parse(buf[:n], &p) }},
		{"ComputeICRC", func() { _ = p.ComputeICRC() }},
		{"Encode", func() { _, _ = Encode(buf, &h, payload) }},
		{"Headers", func() { p.Headers(&hh) }},
		{"Accessors", func() { _, _, _ = p.RETH(), p.SrcIP(), p.UDPChecksumOK() }},
	} {
		if a := testing.AllocsPerRun(200, c.f); a != 0 {
			t.Errorf("%s: %v allocations per run", c.name, a)
		}
	}
}
