package qp

import (
	"time"

	"github.com/uroce/uroce/bth"
)

// Congestion notification (RoCEv2's annex A17.9, DCQCN's notification
// point): a QP that receives a packet whose IP header says congestion
// was experienced (ECN CE, set by a switch on an ECN-capable packet)
// answers with a CNP, BTH opcode 0x81 with the BECN bit, to the QP that
// sent it, at most one per CNPConfig.MinInterval. The sender's reaction
// point slows down.

// CNPConfig is how a QP notifies congestion.
type CNPConfig struct {
	// Off sends no CNP (CE-marked packets are still counted).
	Off bool
	// TrafficClass is the IP TOS (IPv6 traffic class) of CNPs, as it
	// is: ConnectX sends DefaultCNPTrafficClass.
	TrafficClass uint8
	// MinInterval is the least time between two CNPs of the QP
	// (min_time_between_cnps); zero means DefaultCNPInterval.
	MinInterval Time
}

// Defaults of CNPConfig: DSCP 48 with ECT(0), as ConnectX sends CNPs.
const (
	DefaultCNPTrafficClass = 48<<2 | 2
	DefaultCNPInterval     = 2 * time.Microsecond
)

// npState is the notification point's state.
type npState struct {
	sent bool // a CNP went ...
	last Time // ... at this time
}

// congested counts a CE-marked packet the QP accepted and answers it
// with a CNP when the interval allows.
func (q *QP) congested(now Time, p *bth.Packet) {
	q.ctr.NPECNMarked++
	c := &q.caps.CNP
	if c.Off {
		return
	}
	gap := c.MinInterval
	if gap == 0 {
		gap = DefaultCNPInterval
	}
	if q.np.sent && now-q.np.last < gap {
		return
	}
	h := q.cnpHeaders(p)
	if h == nil || !q.out.Send(h, nil) {
		return
	}
	q.np = npState{sent: true, last: now}
	q.ctr.NPCNPSent++
}

// cnpHeaders returns the headers of a CNP answering p: to the peer of a
// connected QP, or to the sender of a UD datagram. ConnectX sends CNPs
// from UDP port 0, PSN 0, with the P_Key of the QP.
func (q *QP) cnpHeaders(p *bth.Packet) *bth.Headers {
	h := &q.hdr
	dest := q.attr.DestQPN
	if q.typ == UD {
		d := p.DETH()
		if d == nil {
			return nil
		}
		dest = d.SrcQP()
		*h = bth.Headers{}
		f := p.Frame
		h.DstMAC, h.SrcMAC = [6]byte(f[6:12]), [6]byte(f[0:6])
		h.HasVLAN, h.VLANTCI = p.HasVLAN, p.VLANTCI
		h.Version = p.Version
		h.SrcIP, h.DstIP = p.DstIP(), p.SrcIP()
	} else {
		*h = bth.Headers{L2L3: q.path}
	}
	q.ipid++
	h.IPID = q.ipid
	h.SrcPort = 0
	h.TrafficClass = q.caps.CNP.TrafficClass
	h.BTH = bth.BTHFields{Opcode: bth.OpCNP, PKey: q.pkey, BECN: true, DestQP: dest}
	return h
}

// ecnCE is the ECN codepoint congestion experienced (RFC 3168).
const ecnCE = 3

// wireTransports is each QP type's transport in the BTH opcode.
var wireTransports = [...]bth.Transport{RC: bth.TransportRC, UC: bth.TransportUC, UD: bth.TransportUD}
