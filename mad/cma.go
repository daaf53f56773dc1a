package mad

import (
	"net/netip"
	"strconv"
)

// ServiceID is the 64-bit service ID of a REQ or SIDR_REQ. rdma_cm
// builds it from a port space and a port (IBTA Annex A11 assigns the
// IP-based form 00 00 00 00 01 PP pp pp, PP the IP protocol):
//
//	0x0000000001060000 | port   TCP port space (0x0106)
//	0x0000000001110000 | port   UDP port space (0x0111)
//	0x0000000000020000 | port   IPoIB port space (0x0002)
//	0x00000000013f0000 | port   native IB port space (0x013f)
type ServiceID uint64

// PortSpace is one of rdma_cm's port spaces, the bits 16-31 of its
// service IDs.
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013f
)

func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "ipoib"
	case PortSpaceTCP:
		return "tcp"
	case PortSpaceUDP:
		return "udp"
	case PortSpaceIB:
		return "ib"
	}
	return "ps_0x" + hexDigits(uint64(ps), 4)
}

// MakeServiceID returns the service ID of port in port space ps.
func MakeServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(uint64(ps)<<16 | uint64(port))
}

// PortSpace returns the service ID's rdma_cm port space; ok is false
// when it is not one of rdma_cm's.
func (s ServiceID) PortSpace() (ps PortSpace, ok bool) {
	if s>>32 != 0 {
		return 0, false
	}
	ps = PortSpace(s >> 16)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, true
	}
	return 0, false
}

// Port returns the port in the low 16 bits (the destination port of
// an rdma_cm connection).
func (s ServiceID) Port() uint16 { return uint16(s) }

// IsIP reports whether s is in one of the port spaces whose REQ (or
// SIDR_REQ) private data starts with a CMAHeader: TCP, UDP and IPoIB.
func (s ServiceID) IsIP() bool {
	ps, ok := s.PortSpace()
	return ok && ps != PortSpaceIB
}

// String gives "0x0000000001061c06" and, for an rdma_cm service ID,
// its port space and port: "0x0000000001061c06 (tcp:7174)".
func (s ServiceID) String() string {
	b := append(make([]byte, 0, 32), "0x"...)
	b = append(b, hexDigits(uint64(s), 16)...)
	if ps, ok := s.PortSpace(); ok {
		b = append(b, " ("...)
		b = append(b, ps.String()...)
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(s.Port()), 10)
		b = append(b, ')')
	}
	return string(b)
}

// CMAHeaderLen is the size of the rdma_cm IP addressing header.
const CMAHeaderLen = 36

// CMAHeader is a view of the IP addressing header that rdma_cm puts at
// the start of the private data of a REQ or SIDR_REQ in its TCP, UDP
// and IPoIB port spaces (IBTA Annex A11, "IP Addressing CM Req Message
// Private Data Format"):
//
//	    0               1               2               3
//	    0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	   +-------+-------+-------+-------+-------------------------------+
//	 0 |  MajV |  MinV |  IPV  |  Rsv  |          Source Port          |
//	   +-------+-------+-------+-------+-------------------------------+
//	 4 |                        Source IP (128)                        |
//	   +---------------------------------------------------------------+
//	20 |                      Destination IP (128)                     |
//	   +---------------------------------------------------------------+
//	36 |                   consumer private data ...                   |
//	   +---------------------------------------------------------------+
//
// MajV and MinV (the version byte) are 0; IPV is 4 or 6. An IPv4
// address sits in the last 4 bytes of its 16, the first 12 zero (seen
// on rdma_rxe and ConnectX). The destination port is not here: it is
// the service ID's port.
//
// Accessors assume len(h) >= CMAHeaderLen; ParseCMAHeader checks it.
type CMAHeader []byte

// ParseCMAHeader returns the header at the start of private data when
// it is one: long enough, version 0, IP version 4 or 6.
func ParseCMAHeader(priv []byte) (CMAHeader, bool) {
	if len(priv) < CMAHeaderLen {
		return nil, false
	}
	h := CMAHeader(priv[:CMAHeaderLen:CMAHeaderLen])
	if h.Version() != 0 || (h.IPVersion() != 4 && h.IPVersion() != 6) {
		return nil, false
	}
	return h, true
}

// Version is the version byte (major version in the high nibble).
func (h CMAHeader) Version() uint8 { return h[0] }

// IPVersion is 4 or 6.
func (h CMAHeader) IPVersion() uint8 { return h[1] >> 4 }

// SrcPort is the active side's port.
func (h CMAHeader) SrcPort() uint16 { return be.Uint16(h[2:]) }

// SrcIP is the active side's address.
func (h CMAHeader) SrcIP() netip.Addr { return h.addr(h[4:20]) }

// DstIP is the passive side's address.
func (h CMAHeader) DstIP() netip.Addr { return h.addr(h[20:36]) }

func (h CMAHeader) addr(b []byte) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(b[12:16]))
	}
	return netip.AddrFrom16([16]byte(b))
}

// CMAHeaderFields are the values of a CMA header, for building one.
type CMAHeaderFields struct {
	Version   uint8 // 0
	IPVersion uint8 // 4 or 6 (4 bits)
	Reserved  uint8 // the 4 bits after IPVersion; zero when sending
	SrcPort   uint16
	SrcIP     netip.Addr // IPv4 when IPVersion is 4
	DstIP     netip.Addr
}

// Fields returns the header's values.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{Version: h.Version(), IPVersion: h.IPVersion(), Reserved: h[1] & 0x0f,
		SrcPort: h.SrcPort(), SrcIP: h.SrcIP(), DstIP: h.DstIP()}
}

// Encode writes f into b[:CMAHeaderLen]. With IPVersion 4 the addresses
// take the last 4 bytes of their 16 and the others are zeroed (an
// address that is not IPv4 is written as zeros).
func (f *CMAHeaderFields) Encode(b []byte) {
	_ = b[CMAHeaderLen-1]
	b[0] = f.Version
	b[1] = f.IPVersion<<4 | f.Reserved&0x0f
	be.PutUint16(b[2:], f.SrcPort)
	f.putAddr(b[4:20], f.SrcIP)
	f.putAddr(b[20:36], f.DstIP)
}

func (f *CMAHeaderFields) putAddr(b []byte, a netip.Addr) {
	clear(b)
	if f.IPVersion == 4 {
		if a = a.Unmap(); a.Is4() {
			v4 := a.As4()
			copy(b[12:], v4[:])
		}
		return
	}
	v6 := a.As16() // zeros for the zero Addr
	copy(b, v6[:])
}
