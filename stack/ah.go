package stack

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/uroce/uroce/qp"
)

// AHAttr is an address vector (ibv_ah_attr for RoCE): where packets go.
type AHAttr struct {
	// DGID is the remote GID: ::ffff:a.b.c.d for an IPv4 peer (a plain
	// IPv4 address is accepted too) or its IPv6 address.
	DGID netip.Addr
	// SGIDIndex picks the local GID, and so the source address and the
	// IP version. It must be of the same family as DGID.
	SGIDIndex    int
	TrafficClass uint8  // DSCP<<2 | ECN
	FlowLabel    uint32 // IPv6 flow label; for RC/UC it also picks the UDP source port
	HopLimit     uint8  // TTL or hop limit; 0 means 64
	// SL is the service level: on a device that tags its frames
	// (Config.VLAN), their 802.1p priority (PCP); 0 takes the priority
	// the DSCP maps to (Marking.Priorities).
	SL uint8
	// DMAC is the next hop's Ethernet address; zero resolves DGID
	// through the device's Neighbors.
	DMAC [6]byte
}

// AH is an address handle for UD work requests (ibv_ah).
type AH struct {
	pd   *PD
	attr AHAttr
	av   qp.AddressVector
	dead atomic.Bool
}

// CreateAH creates an address handle (ibv_create_ah), resolving the
// destination's MAC when attr gives none.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	if err := pd.use("create ah"); err != nil {
		return nil, err
	}
	p, err := pd.dev.resolvePath(&attr)
	if err != nil {
		pd.uses.drop()
		return nil, fmt.Errorf("create ah: %w", err)
	}
	attr.DMAC = p.av.Path.DstMAC
	return &AH{pd: pd, attr: attr, av: p.av}, nil
}

// Attr returns the handle's attributes, with the resolved MAC.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy destroys the handle (ibv_destroy_ah). Work requests already
// posted with it still go out.
func (ah *AH) Destroy() error {
	if !ah.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("destroy ah: %w", ErrDestroyed)
	}
	ah.pd.uses.drop()
	return nil
}

// GRHSource returns the sender's address from the 40-byte GRH slot at
// the head of a UD receive, as ibv_init_ah_from_wc reads it: for RoCEv2
// over IPv4 the IPv4 header is in the slot's last 20 bytes, else the
// slot is the IPv6 header.
func GRHSource(grh []byte) (netip.Addr, bool) {
	if len(grh) < 40 {
		return netip.Addr{}, false
	}
	if grh[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(grh[32:36])), true
	}
	if grh[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(grh[8:24])), true
	}
	return netip.Addr{}, false
}
