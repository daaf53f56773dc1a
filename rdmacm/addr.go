package rdmacm

import (
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

// MaxDialData is how much private data Dial carries: a REQ's 92 bytes
// less rdma_cm's 36-byte addressing header (IBTA Annex A11).
const MaxDialData = mad.REQPrivateLen - mad.CMAHeaderLen

// MaxAcceptData and MaxRejectData bound the private data of Accept
// (a REP's) and Reject (a REJ's); neither carries an addressing header.
const (
	MaxAcceptData = mad.REPPrivateLen
	MaxRejectData = mad.REJPrivateLen
)

// ServiceID is the service ID of port in rdma_cm's TCP port space
// (RDMA_PS_TCP), the one rping, ucmatose and perftest use.
func ServiceID(port uint16) mad.ServiceID { return mad.MakeServiceID(mad.PortSpaceTCP, port) }

// UDPServiceID is the service ID of port in rdma_cm's UDP port space
// (RDMA_PS_UDP: UD QPs, resolved with SIDR), udaddy's.
func UDPServiceID(port uint16) mad.ServiceID { return mad.MakeServiceID(mad.PortSpaceUDP, port) }

// MaxResolveData is how much private data ResolveUD carries: a
// SIDR_REQ's 216 bytes less the addressing header; MaxUDAcceptData a
// SIDR_REP's.
const (
	MaxResolveData  = mad.SIDRREQPrivateLen - mad.CMAHeaderLen
	MaxUDAcceptData = mad.SIDRREPPrivateLen
)

// parseSIDRRequest is parseRequest for a SIDR_REQ.
func parseSIDRRequest(r *mad.SIDRREQFields) (src, dst netip.AddrPort, data []byte, ok bool) {
	return parseAddressing(r.ServiceID, r.PrivateData[:])
}

// requestData builds a REQ's private data as librdmacm does: the
// addressing header (IP version, source port, source and destination
// address) and the application's data after it.
func requestData(dst []byte, src, to netip.AddrPort, data []byte) error {
	if len(data) > len(dst)-mad.CMAHeaderLen {
		return fmt.Errorf("private data: %d bytes, %d fit", len(data), len(dst)-mad.CMAHeaderLen)
	}
	h := mad.CMAHeaderFields{IPVersion: 6, SrcPort: src.Port(), SrcIP: src.Addr(), DstIP: to.Addr()}
	if src.Addr().Is4() {
		h.IPVersion = 4
	}
	h.Encode(dst[:mad.CMAHeaderLen])
	copy(dst[mad.CMAHeaderLen:], data)
	return nil
}

// parseRequest splits a REQ's private data into the addresses of its
// addressing header and the application's data. The destination port
// is the service ID's.
func parseRequest(r *mad.REQFields) (src, dst netip.AddrPort, data []byte, ok bool) {
	return parseAddressing(r.ServiceID, r.PrivateData[:])
}

// parseAddressing splits the private data of a request for service sid
// (a REQ's or a SIDR_REQ's) into the addresses of its addressing header
// and a copy of the application's data after it.
func parseAddressing(sid mad.ServiceID, priv []byte) (src, dst netip.AddrPort, data []byte, ok bool) {
	if !sid.IsIP() {
		return src, dst, nil, false
	}
	h, ok := mad.ParseCMAHeader(priv)
	if !ok {
		return src, dst, nil, false
	}
	src = netip.AddrPortFrom(h.SrcIP(), h.SrcPort())
	dst = netip.AddrPortFrom(h.DstIP(), sid.Port())
	return src, dst, append([]byte(nil), priv[mad.CMAHeaderLen:]...), true
}

// SourceFor returns the index of the device's GID and the source
// address a connection to to takes (rdma_resolve_addr's choice): src
// when it is valid and the device's, else the device's first address of
// to's family.
func SourceFor(dev *stack.Device, to, src netip.Addr) (int, netip.Addr, error) {
	return sourceGID(dev, to, src)
}

// sourceGID returns the index of the device's GID to reach to from, and
// the source address: the GID of src when it is given, else the first
// GID of to's family (the link-local one last for IPv6), as rdma_cm
// binds an unbound ID to the device's address.
func sourceGID(dev *stack.Device, to, src netip.Addr) (int, netip.Addr, error) {
	if src.IsValid() {
		i := dev.GIDIndex(src)
		if i < 0 {
			return 0, src, fmt.Errorf("address %v: not the device's", src)
		}
		return i, src.Unmap(), nil
	}
	gids := dev.GIDs()
	for i, g := range gids {
		if to.Unmap().Is4() == g.Is4In6() && (i > 0 || to.Unmap().Is4()) {
			return i, g.Unmap(), nil
		}
	}
	if !to.Unmap().Is4() && len(gids) > 0 {
		return 0, gids[0], nil
	}
	return 0, src, fmt.Errorf("no address of %v's family on the device", to)
}
