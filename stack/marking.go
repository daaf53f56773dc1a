package stack

import (
	"fmt"
	"time"

	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/qp"
)

// Marking is the DiffServ code point and ECN codepoint of the RoCE
// packets a device sends (RFC 2474, RFC 3168), for networks that give
// RoCE its own priority and mark congestion instead of dropping. The
// zero value is what RNICs do with ECN enabled: DSCP 26 for paths whose
// traffic class names none, ECT(0) on every RoCE packet.
type Marking struct {
	// DSCP is the code point of packets whose path (an address handle's
	// or a connected QP's traffic_class) gives DSCP 0: 0 takes 26, the
	// RoCE default of RNICs and of rdma_cm's default_roce_tos practice;
	// a negative value leaves them at 0. A path's own DSCP is kept.
	DSCP int
	// ECN is what the two ECN bits carry.
	ECN ECN
	// Priorities maps a DSCP to the 802.1p priority of tagged frames
	// (Config.VLAN) and to the priority PFC holds; nil is the class
	// selector mapping (DSCP/8: 26 is priority 3, 48 is 6), what a NIC
	// that trusts DSCP applies by default.
	Priorities *[64]uint8
	// NoCNP sends no congestion notifications for CE-marked packets
	// (they are still counted). Their DSCP and spacing are DCQCN
	// parameters (Config.DCQCN: cnp_dscp, min_time_between_cnps); their
	// ECN bits follow ECN.
	NoCNP bool
}

// ECN is the ECN field of RoCE packets.
type ECN int

const (
	// ECT0 marks packets ECN-capable with ECT(0), whatever the path's
	// traffic class says (the default, as RNICs send with ECN on).
	ECT0 ECN = iota
	// ECT1 marks them ECT(1).
	ECT1
	// ECNAsPath sends the path's traffic class as it is (Not-ECT unless
	// its two low bits say otherwise): no ECN marking.
	ECNAsPath
)

// DefaultDSCP is the DSCP of RoCE packets whose path names none.
const DefaultDSCP = 26

var ecnNames = [...]string{ECT0: "ect0", ECT1: "ect1", ECNAsPath: "off"}

func (e ECN) String() string {
	if e >= 0 && int(e) < len(ecnNames) {
		return ecnNames[e]
	}
	return fmt.Sprintf("ECN(%d)", int(e))
}

// ParseECN parses "ect0", "ect1" or "off".
func ParseECN(s string) (ECN, error) {
	for i, n := range ecnNames {
		if s == n {
			return ECN(i), nil
		}
	}
	return 0, fmt.Errorf("ecn %q: want ect0, ect1 or off: %w", s, ErrInvalidArg)
}

// priority returns the 802.1p priority of traffic class tc.
func (m *Marking) priority(tc uint8) uint8 {
	if m.Priorities != nil {
		return m.Priorities[tc>>2] & 7
	}
	return tc >> 5
}

func (m *Marking) check() error {
	if m.Priorities != nil {
		for d, p := range m.Priorities {
			if p > 7 {
				return fmt.Errorf("dscp %d maps to priority %d: want 0 to 7: %w", d, p, ErrInvalidArg)
			}
		}
	}
	if m.DSCP > 63 {
		return fmt.Errorf("dscp %d: want 0 to 63: %w", m.DSCP, ErrInvalidArg)
	}
	if m.ECN < 0 || int(m.ECN) >= len(ecnNames) {
		return fmt.Errorf("ecn %d: %w", int(m.ECN), ErrInvalidArg)
	}
	return nil
}

// trafficClass is the IP TOS (IPv6 traffic class) of a path whose
// attributes ask for tc.
func (m *Marking) trafficClass(tc uint8) uint8 {
	dscp := tc >> 2
	if dscp == 0 {
		switch {
		case m.DSCP == 0:
			dscp = DefaultDSCP
		case m.DSCP > 0:
			dscp = uint8(m.DSCP)
		}
	}
	return m.ecn(dscp<<2 | tc&3)
}

// ecn sets the ECN bits of traffic class tc as the marking says.
func (m *Marking) ecn(tc uint8) uint8 {
	switch m.ECN {
	case ECT0:
		return tc&^3 | 2
	case ECT1:
		return tc&^3 | 1
	}
	return tc
}

// cnp is the notification point's configuration of the device's QPs.
func (m *Marking) cnp(p *dcqcn.Params) qp.CNPConfig {
	return qp.CNPConfig{Off: m.NoCNP, TrafficClass: m.ecn(p.CNPDSCP << 2), PCP: p.CNPPrio & 7,
		MinInterval: time.Duration(p.MinTimeBetweenCNPs) * time.Microsecond}
}
