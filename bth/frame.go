package bth

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// UDPPort is the IANA port of RoCEv2.
const UDPPort = 4791

// EtherTypes and IP protocol numbers used by RoCE.
const (
	EtherTypeIPv4   = 0x0800
	EtherTypeIPv6   = 0x86dd
	EtherTypeVLAN   = 0x8100
	EtherTypeRoCEv1 = 0x8915
	EtherTypePause  = 0x8808
	ipProtoUDP      = 17
	grhNextHeaderIB = 0x1b
	ethLen          = 14
	vlanLen         = 4
	ipv4Len         = 20
	ipv6Len         = 40
	udpLen          = 8
)

// Parse errors. They are sentinels: parsing never allocates.
var (
	// ErrNotRoCE means the frame is not RoCE (not UDP 4791, not EtherType 0x8915).
	ErrNotRoCE = errors.New("not a roce packet")
	// ErrTruncated means the frame is shorter than its IP header says: it
	// was cut by a capture snap length or a short buffer.
	ErrTruncated = errors.New("truncated frame")
	// ErrMalformed means lengths or headers are inconsistent.
	ErrMalformed = errors.New("malformed roce packet")
	// ErrBadOpcode means the BTH opcode is reserved.
	ErrBadOpcode = errors.New("reserved opcode")
	// ErrBufferTooSmall is returned by the builder.
	ErrBufferTooSmall = errors.New("buffer too small for frame")
	// ErrBadAddress is returned by the builder for mismatched IP families.
	ErrBadAddress = errors.New("source and destination ip families differ")
	// ErrBadOptions is returned by the builder for IPv4 options that are
	// not a multiple of 4 bytes or longer than 40.
	ErrBadOptions = errors.New("bad ipv4 options length")
)

// Packet is a parsed RoCE frame: offsets into Frame, which it does not own.
// Parse fills it without allocating.
type Packet struct {
	Frame     []byte
	Version   uint8  // 1: RoCEv1 (GRH), 2: RoCEv2 (UDP)
	HasVLAN   bool   // one 802.1Q tag was present
	VLANTCI   uint16 // its tag control information (PCP, DEI, VID)
	IPv6      bool   // IPv6 header (or GRH)
	L3        int    // offset of the IP header or GRH
	L4        int    // offset of the UDP header (RoCEv2)
	BTHOff    int    // offset of the BTH
	End       int    // offset just past the ICRC; Frame may be longer (Ethernet padding)
	Info      *OpInfo
	PayloadAt int // offset of the payload
	PayloadN  int // payload length without pad
	Pad       int
}

// Parse decodes frame (starting at the Ethernet header) into p. It checks
// lengths once; afterwards the header accessors do not fail. A reserved
// opcode gives ErrBadOpcode with p filled as far as the BTH (the ICRC can
// still be checked). ErrTruncated means frame is shorter than the IP
// length (p holds the headers that were present, Info is set when the
// BTH is). ErrMalformed with Info set and End > BTHOff+BTHLen means the
// opcode's extended headers do not fit: ComputeICRC still works, the
// extended header accessors must not be used.
func Parse(frame []byte, p *Packet) error {
	*p = Packet{Frame: frame}
	if len(frame) < ethLen {
		return ErrNotRoCE
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := ethLen
	if et == EtherTypeVLAN {
		if len(frame) < ethLen+vlanLen {
			return ErrNotRoCE
		}
		p.HasVLAN = true
		p.VLANTCI = binary.BigEndian.Uint16(frame[14:])
		et = binary.BigEndian.Uint16(frame[16:])
		off += vlanLen
	}
	p.L3 = off
	var end int
	switch et {
	case EtherTypeIPv4:
		if len(frame) < off+ipv4Len {
			return ErrNotRoCE
		}
		ip := frame[off:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ip[9] != ipProtoUDP || ihl < ipv4Len {
			return ErrNotRoCE
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return ErrNotRoCE // a fragment: RoCE is never fragmented
		}
		if len(frame) < off+ihl+udpLen {
			return ErrNotRoCE
		}
		p.L4 = off + ihl
		end = off + int(binary.BigEndian.Uint16(ip[2:]))
		p.End = end
		if end < p.L4+udpLen {
			return ErrMalformed
		}
	case EtherTypeIPv6:
		if len(frame) < off+ipv6Len+udpLen {
			return ErrNotRoCE
		}
		ip := frame[off:]
		if ip[0]>>4 != 6 || ip[6] != ipProtoUDP {
			return ErrNotRoCE
		}
		p.IPv6 = true
		p.L4 = off + ipv6Len
		end = p.L4 + int(binary.BigEndian.Uint16(ip[4:]))
		p.End = end
		if end < p.L4+udpLen {
			return ErrMalformed
		}
	case EtherTypeRoCEv1:
		if len(frame) < off+ipv6Len {
			return ErrTruncated
		}
		ip := frame[off:]
		p.Version = 1
		p.IPv6 = true
		if ip[6] != grhNextHeaderIB {
			return ErrMalformed
		}
		p.BTHOff = off + ipv6Len
		end = p.BTHOff + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return ErrNotRoCE
	}
	p.End = end
	if p.Version == 0 {
		udp := frame[p.L4:]
		if binary.BigEndian.Uint16(udp[2:]) != UDPPort {
			return ErrNotRoCE
		}
		p.Version = 2
		p.BTHOff = p.L4 + udpLen
		if ul := int(binary.BigEndian.Uint16(udp[4:])); ul != end-p.L4 {
			return ErrMalformed
		}
	}
	return p.parseIB()
}

// ParseTransport decodes a transport packet on its own, from the BTH to
// the ICRC inclusive, as a UDP payload carries it. p.Frame is ib, BTHOff
// 0 and End len(ib); the network fields of p stay zero, so ComputeICRC
// and the address accessors must not be used. Errors are those of Parse.
func ParseTransport(ib []byte, p *Packet) error {
	*p = Packet{Frame: ib, End: len(ib)}
	return p.parseIB()
}

// parseIB decodes the transport headers of p.Frame from p.BTHOff to p.End.
func (p *Packet) parseIB() error {
	frame, end := p.Frame, p.End
	if len(frame) < p.BTHOff+BTHLen {
		if end > len(frame) {
			return ErrTruncated
		}
		return ErrMalformed
	}
	p.Info = opInfoAt(frame, p.BTHOff, end)
	if end < p.BTHOff+BTHLen+ICRCLen {
		return ErrMalformed
	}
	if end > len(frame) {
		return ErrTruncated
	}
	b := BTH(frame[p.BTHOff:])
	ibEnd := end - ICRCLen
	if !p.Info.Valid {
		p.PayloadAt = p.BTHOff + BTHLen
		p.PayloadN = ibEnd - p.PayloadAt
		return ErrBadOpcode
	}
	p.PayloadAt = p.BTHOff + int(p.Info.HdrLen)
	p.Pad = b.PadCount()
	p.PayloadN = ibEnd - p.PayloadAt - p.Pad
	if p.PayloadN < 0 {
		// The headers the opcode needs (or the pad) do not fit.
		p.PayloadAt, p.PayloadN = ibEnd, 0
		return ErrMalformed
	}
	return nil
}

// opInfoAt returns the table entry for the BTH at off in a packet ending
// at end: the ConnectX DC layout (DCInfo) for an RD opcode whose RDETH
// reserved byte is set, the standard one otherwise.
func opInfoAt(frame []byte, off, end int) *OpInfo {
	op := Opcode(frame[off])
	if op.Transport() == TransportRD && min(len(frame), end) > off+BTHLen && frame[off+BTHLen] != 0 && dcTable[op].Valid {
		return &dcTable[op]
	}
	return &opTable[op]
}

// BTH returns the base transport header.
func (p *Packet) BTH() BTH { return BTH(p.Frame[p.BTHOff : p.BTHOff+BTHLen]) }

// Opcode returns the BTH opcode.
func (p *Packet) Opcode() Opcode { return Opcode(p.Frame[p.BTHOff]) }

// ext returns extended header h, or nil when the opcode lacks it.
func (p *Packet) ext(h Hdr, n int) []byte {
	off := p.Info.Offset(h)
	if off < 0 {
		return nil
	}
	o := p.BTHOff + off
	return p.Frame[o : o+n : o+n]
}

// RETH returns the RDMA extended header, or nil.
func (p *Packet) RETH() RETH { return RETH(p.ext(HdrRETH, RETHLen)) }

// AETH returns the ACK extended header, or nil.
func (p *Packet) AETH() AETH { return AETH(p.ext(HdrAETH, AETHLen)) }

// ImmDt returns the immediate data header, or nil.
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.ext(HdrImmDt, ImmDtLen)) }

// IETH returns the invalidate header, or nil.
func (p *Packet) IETH() IETH { return IETH(p.ext(HdrIETH, IETHLen)) }

// FETH returns the FLUSH extended header, or nil.
func (p *Packet) FETH() FETH { return FETH(p.ext(HdrFETH, FETHLen)) }

// AtomicETH returns the atomic extended header, or nil.
func (p *Packet) AtomicETH() AtomicETH { return AtomicETH(p.ext(HdrAtomicETH, AtomicETHLen)) }

// AtomicAck returns the atomic acknowledge header, or nil.
func (p *Packet) AtomicAck() AtomicAck { return AtomicAck(p.ext(HdrAtomicAck, AtomicAckLen)) }

// DETH returns the datagram header, or nil.
func (p *Packet) DETH() DETH { return DETH(p.ext(HdrDETH, DETHLen)) }

// RDETH returns the reliable datagram header, or nil.
func (p *Packet) RDETH() RDETH { return RDETH(p.ext(HdrRDETH, RDETHLen)) }

// DCETH returns the ConnectX DC header, or nil.
func (p *Packet) DCETH() DCETH { return DCETH(p.ext(HdrDCETH, DCETHLen)) }

// IPv4Options returns the options of the IPv4 header (nil when there are
// none, and for IPv6 and RoCEv1).
func (p *Packet) IPv4Options() []byte {
	if p.IPv6 || p.L4-p.L3 <= ipv4Len {
		return nil
	}
	return p.Frame[p.L3+ipv4Len : p.L4 : p.L4]
}

// XRCETH returns the XRC header, or nil.
func (p *Packet) XRCETH() XRCETH { return XRCETH(p.ext(HdrXRCETH, XRCETHLen)) }

// Payload returns the payload without pad.
func (p *Packet) Payload() []byte { return p.Frame[p.PayloadAt : p.PayloadAt+p.PayloadN] }

// ICRC returns the ICRC as stored (read least-significant byte first).
func (p *Packet) ICRC() uint32 { return getICRC(p.Frame[p.End-ICRCLen:]) }

// ComputeICRC computes the packet's ICRC from its bytes.
func (p *Packet) ComputeICRC() uint32 {
	f := p.Frame
	ib := f[p.BTHOff : p.End-ICRCLen]
	switch {
	case p.Version == 1:
		return ICRCv6(f[p.L3:], nil, ib)
	case p.IPv6:
		return ICRCv6(f[p.L3:], f[p.L4:], ib)
	default:
		return ICRCv4(f[p.L3:], f[p.L4:], ib)
	}
}

// ICRCOK reports whether the stored ICRC matches the computed one.
func (p *Packet) ICRCOK() bool { return p.ICRC() == p.ComputeICRC() }

// SrcIP returns the source address (the GRH source GID for RoCEv1).
func (p *Packet) SrcIP() netip.Addr {
	if p.IPv6 {
		return netip.AddrFrom16([16]byte(p.Frame[p.L3+8 : p.L3+24]))
	}
	return netip.AddrFrom4([4]byte(p.Frame[p.L3+12 : p.L3+16]))
}

// DstIP returns the destination address (the GRH destination GID for RoCEv1).
func (p *Packet) DstIP() netip.Addr {
	if p.IPv6 {
		return netip.AddrFrom16([16]byte(p.Frame[p.L3+24 : p.L3+40]))
	}
	return netip.AddrFrom4([4]byte(p.Frame[p.L3+16 : p.L3+20]))
}

// TrafficClass returns the IPv4 TOS or IPv6 traffic class (DSCP<<2 | ECN).
func (p *Packet) TrafficClass() uint8 {
	ip := p.Frame[p.L3:]
	if p.IPv6 {
		return ip[0]<<4 | ip[1]>>4
	}
	return ip[1]
}

// ECN returns the two ECN bits of the traffic class.
func (p *Packet) ECN() uint8 { return p.TrafficClass() & 3 }

// SrcPort returns the UDP source port (0 for RoCEv1).
func (p *Packet) SrcPort() uint16 {
	if p.Version != 2 {
		return 0
	}
	return binary.BigEndian.Uint16(p.Frame[p.L4:])
}

// DstPort returns the UDP destination port (0 for RoCEv1).
func (p *Packet) DstPort() uint16 {
	if p.Version != 2 {
		return 0
	}
	return binary.BigEndian.Uint16(p.Frame[p.L4+2:])
}

// SrcMAC returns the Ethernet source address.
func (p *Packet) SrcMAC() [6]byte { return [6]byte(p.Frame[6:12]) }

// DstMAC returns the Ethernet destination address.
func (p *Packet) DstMAC() [6]byte { return [6]byte(p.Frame[0:6]) }
