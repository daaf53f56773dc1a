package bth

import (
	"encoding/binary"
	"net/netip"
)

// L2L3 describes the Ethernet, VLAN, IP and UDP headers of a frame to
// build. A QP keeps one per path and reuses it for every packet.
type L2L3 struct {
	DstMAC, SrcMAC [6]byte
	HasVLAN        bool
	VLANTCI        uint16 // PCP (3 bits), DEI (1), VID (12)
	Version        uint8  // 2 (default when 0): RoCEv2 over UDP; 1: RoCEv1 with a GRH
	SrcIP, DstIP   netip.Addr
	TrafficClass   uint8  // IPv4 TOS or IPv6 traffic class: DSCP<<2 | ECN
	FlowLabel      uint32 // IPv6 / GRH flow label (20 bits)
	HopLimit       uint8  // IPv4 TTL or IPv6 hop limit; 0 means 64
	IPID           uint16 // IPv4 identification
	IPFlags        uint16 // IPv4 flags+fragment field; 0 means DF (0x4000)
	SrcPort        uint16 // UDP source port (see SourcePort)
	DstPort        uint16 // UDP destination port; 0 means 4791
	UDPChecksum    bool   // compute the UDP checksum (rxe sends 0)
	// IPv4Options[:IPv4OptionsLen] are written after the fixed IPv4
	// header (a multiple of 4 bytes, at most 40). They are not covered by
	// the ICRC. (An array keeps L2L3 comparable.)
	IPv4Options    [40]byte
	IPv4OptionsLen uint8
	// Exact writes HopLimit and IPFlags as given even when they are zero
	// (instead of the defaults 64 and DF). Packet.Headers sets it so that
	// a decoded frame re-encodes byte for byte.
	Exact bool
}

// Headers is everything of a RoCE packet but its payload. Only the
// extended headers the opcode carries are written.
type Headers struct {
	L2L3
	BTH BTHFields
	// RETH
	VA     uint64
	RKey   uint32
	DMALen uint32
	// AETH
	Syndrome Syndrome
	MSN      uint32
	// ImmDt and IETH
	Imm    uint32
	InvKey uint32
	// AtomicETH
	AtomicVA      uint64
	AtomicRKey    uint32
	SwapAdd       uint64
	Compare       uint64
	AtomicAckOrig uint64
	// DETH
	QKey  uint32
	SrcQP uint32
	// RDETH, XRCETH, FETH
	EEContext uint32
	XRCSRQ    uint32
	FETH      uint32
	// DC selects the ConnectX Dynamically Connected layout for an RD-range
	// opcode (see DCInfo); DCETH holds the bytes of its DCETH.
	DC    bool
	DCETH [DCETHLen]byte
}

// Info returns the table entry that lays out h: DCInfo for a DC packet,
// the opcode's standard entry otherwise.
func (h *Headers) Info() *OpInfo {
	if h.DC {
		return &dcTable[h.BTH.Opcode]
	}
	return &opTable[h.BTH.Opcode]
}

// L3Len returns the length of the IP header (or GRH) and UDP header.
func (l *L2L3) l3len() (ip, udp int) {
	if l.Version == 1 {
		return ipv6Len, 0
	}
	if l.SrcIP.Is4() {
		return ipv4Len + int(l.IPv4OptionsLen), udpLen
	}
	return ipv6Len, udpLen
}

// HeaderLen returns the bytes before the payload: Ethernet through the
// last extended header.
func (h *Headers) HeaderLen() int {
	ip, udp := h.l3len()
	oi := h.Info()
	n := ethLen + ip + udp + int(oi.HdrLen)
	if !oi.Valid {
		n += BTHLen
	}
	if h.HasVLAN {
		n += vlanLen
	}
	return n
}

// FrameLen returns the frame length for a payload of n bytes.
func (h *Headers) FrameLen(n int) int { return h.HeaderLen() + n + h.padFor(n) + ICRCLen }

// padFor returns the pad after a payload of n bytes. A reserved opcode
// has no known layout: its bytes after the BTH are written as given and
// the BTH pad count is kept, as Parse reads them.
func (h *Headers) padFor(n int) int {
	if !h.Info().Valid {
		return 0
	}
	return -n & 3
}

// Encode writes a complete frame with h's headers and the payload into buf
// and returns its length. It sets the pad count, IP and UDP lengths, the
// IPv4 header checksum, the optional UDP checksum and the ICRC. It does
// not allocate.
func Encode(buf []byte, h *Headers, payload []byte) (int, error) {
	n := h.FrameLen(len(payload))
	if len(buf) < n {
		return 0, ErrBufferTooSmall
	}
	if h.Version != 1 && h.SrcIP.Is4() != h.DstIP.Is4() {
		return 0, ErrBadAddress
	}
	if h.Version != 1 && h.SrcIP.Is4() && (h.IPv4OptionsLen&3 != 0 || h.IPv4OptionsLen > 40) {
		return 0, ErrBadOptions
	}
	pad := h.padFor(len(payload))
	copy(buf[0:6], h.DstMAC[:])
	copy(buf[6:12], h.SrcMAC[:])
	off := 12
	if h.HasVLAN {
		binary.BigEndian.PutUint16(buf[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(buf[14:], h.VLANTCI)
		off += vlanLen
	}
	ipLen, udpL := h.l3len()
	l3 := off + 2
	l4 := l3 + ipLen
	bthOff := l4 + udpL
	hop := h.HopLimit
	if hop == 0 && !h.Exact {
		hop = 64
	}
	ipPayload := n - l3 - ipLen // UDP header onwards (or BTH onwards for v1)
	switch {
	case h.Version == 1:
		binary.BigEndian.PutUint16(buf[off:], EtherTypeRoCEv1)
		putIPv6(buf[l3:], h, uint16(ipPayload), grhNextHeaderIB, hop)
	case h.SrcIP.Is4():
		binary.BigEndian.PutUint16(buf[off:], EtherTypeIPv4)
		ip := buf[l3 : l3+ipLen]
		ip[0] = 0x40 | uint8(ipLen/4)
		ip[1] = h.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(n-l3))
		binary.BigEndian.PutUint16(ip[4:], h.IPID)
		flags := h.IPFlags
		if flags == 0 && !h.Exact {
			flags = 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], flags)
		ip[8] = hop
		ip[9] = ipProtoUDP
		ip[10], ip[11] = 0, 0
		s, d := h.SrcIP.As4(), h.DstIP.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		copy(ip[ipv4Len:], h.IPv4Options[:h.IPv4OptionsLen])
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	default:
		binary.BigEndian.PutUint16(buf[off:], EtherTypeIPv6)
		putIPv6(buf[l3:], h, uint16(ipPayload), ipProtoUDP, hop)
	}
	if udpL != 0 {
		u := buf[l4 : l4+udpLen]
		binary.BigEndian.PutUint16(u[0:], h.SrcPort)
		dp := h.DstPort
		if dp == 0 {
			dp = UDPPort
		}
		binary.BigEndian.PutUint16(u[2:], dp)
		binary.BigEndian.PutUint16(u[4:], uint16(n-l4))
		u[6], u[7] = 0, 0
	}
	f := h.BTH
	if h.Info().Valid {
		f.PadCount = uint8(pad)
	}
	f.Encode(buf[bthOff:])
	oi := h.Info()
	ib := buf[bthOff:]
	for i := 0; i < numHdr; i++ {
		if oi.Hdrs&(1<<i) == 0 {
			continue
		}
		e := ib[oi.Off[i]:]
		switch Hdr(1 << i) {
		case HdrRDETH:
			e[0] = 0
			put24(e[1:], h.EEContext)
		case HdrDETH:
			PutDETH(e, h.QKey, h.SrcQP)
		case HdrXRCETH:
			e[0] = 0
			put24(e[1:], h.XRCSRQ)
		case HdrFETH:
			binary.BigEndian.PutUint32(e, h.FETH)
		case HdrRETH:
			PutRETH(e, h.VA, h.RKey, h.DMALen)
		case HdrAtomicETH:
			PutAtomicETH(e, h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare)
		case HdrAETH:
			PutAETH(e, h.Syndrome, h.MSN)
		case HdrAtomicAck:
			binary.BigEndian.PutUint64(e, h.AtomicAckOrig)
		case HdrImmDt:
			binary.BigEndian.PutUint32(e, h.Imm)
		case HdrIETH:
			binary.BigEndian.PutUint32(e, h.InvKey)
		case HdrCNPPad:
			clear(e[:CNPPadLen])
		case HdrDCETH:
			copy(e, h.DCETH[:])
		}
	}
	hl := int(oi.HdrLen)
	if !oi.Valid {
		hl = BTHLen
	}
	po := bthOff + hl
	copy(buf[po:], payload)
	clear(buf[po+len(payload) : po+len(payload)+pad])
	ibEnd := n - ICRCLen
	var crc uint32
	switch {
	case h.Version == 1:
		crc = ICRCv6(buf[l3:], nil, buf[bthOff:ibEnd])
	case h.SrcIP.Is4():
		crc = ICRCv4(buf[l3:], buf[l4:], buf[bthOff:ibEnd])
	default:
		crc = ICRCv6(buf[l3:], buf[l4:], buf[bthOff:ibEnd])
	}
	putICRC(buf[ibEnd:], crc)
	if udpL != 0 && h.UDPChecksum {
		binary.BigEndian.PutUint16(buf[l4+6:], udpChecksum(buf[l3:], !h.SrcIP.Is4(), buf[l4:n]))
	}
	return n, nil
}

func putIPv6(ip []byte, h *Headers, payloadLen uint16, next, hop uint8) {
	binary.BigEndian.PutUint32(ip, 6<<28|uint32(h.TrafficClass)<<20|h.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(ip[4:], payloadLen)
	ip[6] = next
	ip[7] = hop
	s, d := h.SrcIP.As16(), h.DstIP.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
}

func csumAdd(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func ipv4Checksum(ip []byte) uint16 { return csumFold(csumAdd(0, ip[:int(ip[0]&0x0f)*4])) }

// udpChecksum computes the UDP checksum of seg (UDP header with a zero
// checksum field, and data) with the pseudo-header from ip.
func udpChecksum(ip []byte, v6 bool, seg []byte) uint16 {
	var sum uint32
	if v6 {
		sum = csumAdd(sum, ip[8:40])
	} else {
		sum = csumAdd(sum, ip[12:20])
	}
	sum += ipProtoUDP + uint32(len(seg))
	c := csumFold(csumAdd(sum, seg))
	if c == 0 {
		c = 0xffff
	}
	return c
}

// UDPChecksumOK reports whether the UDP checksum is zero (not used) or valid.
func (p *Packet) UDPChecksumOK() bool {
	if p.Version != 2 {
		return true
	}
	seg := p.Frame[p.L4:p.End]
	got := binary.BigEndian.Uint16(seg[6:])
	if got == 0 {
		return true
	}
	var sum uint32
	if p.IPv6 {
		sum = csumAdd(sum, p.Frame[p.L3+8:p.L3+40])
	} else {
		sum = csumAdd(sum, p.Frame[p.L3+12:p.L3+20])
	}
	sum += ipProtoUDP + uint32(len(seg))
	return csumFold(csumAdd(sum, seg)) == 0
}

// IPv4ChecksumOK reports whether the IPv4 header checksum is valid
// (always true for IPv6 and RoCEv1).
func (p *Packet) IPv4ChecksumOK() bool {
	if p.IPv6 {
		return true
	}
	ip := p.Frame[p.L3:]
	return csumFold(csumAdd(0, ip[:int(ip[0]&0x0f)*4])) == 0
}

// Headers fills h with every header field of p, so that Encode(buf, h,
// p.Payload()) rebuilds the frame.
func (p *Packet) Headers(h *Headers) {
	*h = Headers{}
	f := p.Frame
	h.DstMAC = [6]byte(f[0:6])
	h.SrcMAC = [6]byte(f[6:12])
	h.HasVLAN, h.VLANTCI = p.HasVLAN, p.VLANTCI
	h.Exact = true
	h.IPv4OptionsLen = uint8(copy(h.IPv4Options[:], p.IPv4Options()))
	h.Version = p.Version
	h.SrcIP, h.DstIP = p.SrcIP(), p.DstIP()
	h.TrafficClass = p.TrafficClass()
	ip := f[p.L3:]
	if p.IPv6 {
		h.FlowLabel = binary.BigEndian.Uint32(ip) & 0xfffff
		h.HopLimit = ip[7]
	} else {
		h.HopLimit = ip[8]
		h.IPID = binary.BigEndian.Uint16(ip[4:])
		h.IPFlags = binary.BigEndian.Uint16(ip[6:])
	}
	if p.Version == 2 {
		h.SrcPort, h.DstPort = p.SrcPort(), p.DstPort()
		h.UDPChecksum = binary.BigEndian.Uint16(f[p.L4+6:]) != 0
	}
	h.BTH = p.BTH().Fields()
	if e := p.RETH(); e != nil {
		h.VA, h.RKey, h.DMALen = e.VA(), e.RKey(), e.DMALen()
	}
	if e := p.AETH(); e != nil {
		h.Syndrome, h.MSN = e.Syndrome(), e.MSN()
	}
	if e := p.ImmDt(); e != nil {
		h.Imm = e.Value()
	}
	if e := p.IETH(); e != nil {
		h.InvKey = e.RKey()
	}
	if e := p.AtomicETH(); e != nil {
		h.AtomicVA, h.AtomicRKey, h.SwapAdd, h.Compare = e.VA(), e.RKey(), e.SwapAdd(), e.Compare()
	}
	if e := p.AtomicAck(); e != nil {
		h.AtomicAckOrig = e.Orig()
	}
	if e := p.DETH(); e != nil {
		h.QKey, h.SrcQP = e.QKey(), e.SrcQP()
	}
	if e := p.RDETH(); e != nil {
		h.EEContext = e.EEContext()
	}
	if e := p.XRCETH(); e != nil {
		h.XRCSRQ = e.XRCSRQ()
	}
	if e := p.DCETH(); e != nil {
		h.DC = true
		copy(h.DCETH[:], e)
	}
	if o := p.Info.Offset(HdrFETH); o >= 0 {
		h.FETH = binary.BigEndian.Uint32(f[p.BTHOff+o:])
	}
}

// SourcePort returns the RoCEv2 UDP source port of an RC or UC QP pair
// (rdma_get_udp_sport in Linux, as rxe, mlx5 and irdma use it): the flow
// label, or when it is zero a hash of both QPNs, folded into 14 bits in
// the range 0xC000-0xFFFF. It is the same in both directions.
func SourcePort(flowLabel uint32, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xfffff
	if fl == 0 {
		v := uint64(lqpn) * uint64(rqpn)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v & 0xfffff)
	}
	return uint16(0xc000 | ((fl & 0x3fff) ^ (fl >> 14)))
}

// UDSourcePort returns the UDP source port rxe uses for a UD QP:
// 0xC000 plus the top 14 bits of the QPN's 32-bit golden-ratio hash.
func UDSourcePort(qpn uint32) uint16 {
	return uint16(0xc000 + ((qpn * 0x61c88647) >> 18))
}
