package qp

import (
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/dcqcn"
)

// Congestion notification (RoCEv2's annex A17.9, DCQCN's notification
// point): a QP that receives a packet whose IP header says congestion
// was experienced (ECN CE, set by a switch on an ECN-capable packet)
// answers with a CNP, BTH opcode 0x81 with the BECN bit, to the QP that
// sent it, at most one per CNPConfig.MinInterval. The sender's reaction
// point slows down: with Caps.DCQCN set, a CNP cuts the QP's rate
// (package dcqcn), and until the rate has recovered to the line rate
// the QP's request packets (new and resent) and READ responses are
// paced at it (not ACKs and atomic responses, which carry no data). A
// paced QP is not Busy while it waits; its Deadline says when it may
// send again.

// CNPConfig is how a QP notifies congestion.
type CNPConfig struct {
	// Off sends no CNP (CE-marked packets are still counted).
	Off bool
	// TrafficClass is the IP TOS (IPv6 traffic class) of CNPs, as it
	// is: ConnectX sends DefaultCNPTrafficClass. PCP is their 802.1p
	// priority on a tagged path (cnp_802p_prio).
	TrafficClass uint8
	PCP          uint8
	// MinInterval is the least time between two CNPs of the QP
	// (min_time_between_cnps); zero means DefaultCNPInterval.
	MinInterval Time
}

// Defaults of CNPConfig: DSCP 48 with ECT(0), as ConnectX sends CNPs.
const (
	DefaultCNPTrafficClass = 48<<2 | 2
	DefaultCNPInterval     = 2 * time.Microsecond
)

// congested counts a CE-marked packet the QP accepted and answers it
// with a CNP when the interval allows.
func (q *QP) congested(now Time, p *bth.Packet) {
	q.ctr.NPECNMarked++
	if q.caps.CNP.Off || !q.np.Allows(now) {
		return
	}
	h := q.cnpHeaders(p)
	if h == nil || !q.out.Send(h, nil) {
		return
	}
	q.np.Sent(now)
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
	if h.HasVLAN {
		h.VLANTCI = h.VLANTCI&0x1fff | uint16(q.caps.CNP.PCP&7)<<13
	}
	h.BTH = bth.BTHFields{Opcode: bth.OpCNP, PKey: q.pkey, BECN: true, DestQP: dest}
	return h
}

// ecnCE is the ECN codepoint congestion experienced (RFC 3168).
const ecnCE = 3

// ccState is the reaction point's state (Caps.DCQCN).
type ccState struct {
	on    bool // Caps.DCQCN is set
	init  bool // rp and pacer were set up (on the first CNP)
	rp    dcqcn.RP
	pacer dcqcn.Pacer
	hold  timer // the pacer holds the requests back until it is due
}

// DefaultLineRate is the reaction point's line rate when Caps gives none.
const DefaultLineRate = 100_000_000_000

// cnpReceived acts on a CNP for this QP.
func (q *QP) cnpReceived(now Time) {
	q.ctr.CNPRcvd++
	c := &q.cc
	if !c.on {
		return
	}
	if !c.init {
		c.rp.Init(q.caps.DCQCN, q.caps.LineRate, now)
		c.pacer.Init(q.caps.LineRate, 0)
		c.init = true
	}
	c.rp.Advance(now)
	if c.rp.OnCNP(now) {
		q.ctr.RPCNPHandled++
	} else {
		q.ctr.RPCNPIgnored++
	}
	c.pacer.SetRate(c.rp.Rate())
}

// limited reports whether DCQCN holds the QP below its line rate.
func (c *ccState) limited() bool { return c.init && c.rp.Limited() }

// paceReady reports whether the pacer lets a request packet or a READ
// response go now; when it does not, the QP holds them until the time
// it names.
func (q *QP) paceReady(now Time) bool {
	c := &q.cc
	if !c.init || !c.rp.Limited() {
		return true
	}
	c.rp.Advance(now)
	if !c.rp.Limited() {
		return true
	}
	c.pacer.SetRate(c.rp.Rate())
	if t := c.pacer.Next(now, 0); t > now {
		c.hold.arm(t)
		return false
	}
	c.hold.stop()
	return true
}

// paced takes a request packet or a READ response of n bytes on the
// wire from the pacer, and counts it toward the reaction point's byte
// counter.
func (q *QP) paced(now Time, n int) {
	c := &q.cc
	if !c.init || !c.rp.Limited() {
		return
	}
	c.pacer.Take(now, n)
	c.rp.OnSent(now, n)
}

// ccTick runs the reaction point's timers and ends a hold that is over.
func (q *QP) ccTick(now Time) {
	c := &q.cc
	if !c.init {
		return
	}
	if c.rp.Limited() {
		c.rp.Advance(now)
		c.pacer.SetRate(c.rp.Rate())
	}
	if c.hold.expired(now) || !c.rp.Limited() {
		c.hold.stop()
	}
}

// ccDeadline returns the reaction point's next timer: the end of a hold,
// or its rate increase.
func (q *QP) ccDeadline() (Time, bool) {
	c := &q.cc
	if !c.init || !c.rp.Limited() {
		return 0, false
	}
	d, ok := c.rp.Deadline()
	return c.hold.earlier(d, ok)
}

// Rate returns the QP's DCQCN rate in bit/s and whether it is limited
// (below the line rate, paced); 0, false without a reaction point.
func (q *QP) Rate() (uint64, bool) {
	if !q.cc.init {
		return 0, false
	}
	return q.cc.rp.Rate(), q.cc.rp.Limited()
}

// wireOverhead is what a request packet carries besides its payload, for
// the pacer: Ethernet, IPv4, UDP, BTH, ICRC and FCS (a READ response's
// AETH left out).
const wireOverhead = 14 + 20 + 8 + bth.BTHLen + bth.ICRCLen + 4
