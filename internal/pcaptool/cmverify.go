package pcaptool

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
)

// maxCMMessages bounds the CM messages a verifier keeps for Finish.
const maxCMMessages = 1 << 16

// cmMsg is one CM message of a capture. The verifier keeps them until
// Finish relates them: a sniffer that captures each direction on its
// own (ibdump) may write an answer before the message it answers.
type cmMsg struct {
	frame         int
	src, dst      netip.Addr
	attr          mad.AttrID
	tid           uint64
	local, remote uint32 // communication IDs; the request ID for SIDR
	qpn           uint32 // REQ, REP: the sender's QPN; DREQ: the receiver's; SIDR_REP: the service's
	psn           bth.PSN
	ref           mad.MsgRef // MRA: the message MRAed; REJ: the message rejected
	respRes       uint8
	initDepth     uint8
	mtu           int // REQ: path MTU in bytes
	transport     mad.TransportType
	gidsMatch     bool // REQ: the primary path's GIDs are the packet's addresses
	method        mad.Method
	classVersion  uint8
}

// cmMessage records the CM message rec carries.
func (v *Verifier) cmMessage(rec *Record) {
	m := rec.MAD
	if !m.IsCM() {
		return
	}
	if len(v.cm) >= maxCMMessages {
		if !v.cmFull {
			v.cmFull = true
			v.report(rec.Frame, SevNote, "cm", nil, "more than "+strconv.Itoa(maxCMMessages)+" CM messages: the others are not checked")
		}
		return
	}
	p := &rec.P
	c := cmMsg{frame: rec.Frame, src: p.SrcIP(), dst: p.DstIP(), attr: m.AttrID(), tid: m.TID(),
		method: m.Method(), classVersion: m.ClassVersion()}
	d := m.Data()
	switch c.attr {
	case mad.AttrREQ:
		r := mad.REQ(d)
		c.local, c.qpn, c.psn = r.LocalCommID(), r.LocalQPN(), r.StartingPSN()
		c.respRes, c.initDepth, c.mtu, c.transport = r.ResponderResources(), r.InitiatorDepth(), r.PathMTU().Bytes(), r.TransportType()
		pr := r.Primary()
		c.gidsMatch = pr.LocalGID().Unmap() == c.src.Unmap() && pr.RemoteGID().Unmap() == c.dst.Unmap()
	case mad.AttrREP:
		r := mad.REP(d)
		c.local, c.remote, c.qpn, c.psn = r.LocalCommID(), r.RemoteCommID(), r.LocalQPN(), r.StartingPSN()
		c.respRes, c.initDepth = r.ResponderResources(), r.InitiatorDepth()
	case mad.AttrREJ:
		r := mad.REJ(d)
		c.local, c.remote, c.ref = r.LocalCommID(), r.RemoteCommID(), r.MessageRejected()
	case mad.AttrMRA:
		r := mad.MRA(d)
		c.local, c.remote, c.ref = r.LocalCommID(), r.RemoteCommID(), r.MessageMRAed()
	case mad.AttrRTU:
		r := mad.RTU(d)
		c.local, c.remote = r.LocalCommID(), r.RemoteCommID()
	case mad.AttrDREQ:
		r := mad.DREQ(d)
		c.local, c.remote, c.qpn = r.LocalCommID(), r.RemoteCommID(), r.RemoteQPN()
	case mad.AttrDREP:
		r := mad.DREP(d)
		c.local, c.remote = r.LocalCommID(), r.RemoteCommID()
	case mad.AttrSIDRREQ:
		c.local = mad.SIDRREQ(d).RequestID()
	case mad.AttrSIDRREP:
		r := mad.SIDRREP(d)
		c.local, c.qpn = r.RequestID(), r.QPN()
	default:
		return // ClassPortInfo, LAP, APR and unknown attributes are not followed
	}
	v.cm = append(v.cm, c)
}

// The two sides of a connection.
const (
	activeSide  = 0 // sent the REQ
	passiveSide = 1
)

// cmConn is a connection that a REQ in the capture asked for, and what
// answered it. Its arrays are indexed by side.
type cmConn struct {
	req           *cmMsg
	addr          [2]netip.Addr
	id            [2]uint32 // communication IDs
	hasID         [2]bool
	qpn           [2]uint32
	rep, rtu, rej *cmMsg
	dreqs         []cmDREQ // distinct DREQs, from either side
}

type cmDREQ struct {
	m        *cmMsg
	from     int // side
	answered bool
}

// cmCheck relates the CM messages of a capture at its end.
type cmCheck struct {
	v     *Verifier
	conns []*cmConn
	out   []Finding
}

func (k *cmCheck) find(frame int, sev Severity, check string, fl *qpFlow, msg string) {
	f := Finding{Frame: frame, Severity: sev, Check: check, Message: msg}
	if fl != nil {
		id := fl.id
		f.Flow = &id
	}
	k.out = append(k.out, f)
}

func hex8(v uint32) string { return appendHexStr(uint64(v), 8) }

func frameStr(n int) string { return "frame " + strconv.Itoa(n) }

// Finish ends the verification of a capture: it checks each CM
// exchange (REQ answered by REP and RTU or by REJ, each DREQ by a DREP,
// MRAs allowed) for completeness and consistency (communication IDs,
// transaction IDs, QPNs), and that the connections' traffic uses the
// QPNs and starting PSNs that REQ and REP agreed on. Its findings are
// reported in frame order, after those of the frames. Finish is called
// once, after the last Frame; later calls do nothing.
func (v *Verifier) Finish() {
	if v.finished {
		return
	}
	v.finished = true
	k := &cmCheck{v: v}
	k.exchanges()
	k.traffic()
	slices.SortStableFunc(k.out, func(a, b Finding) int { return a.Frame - b.Frame })
	for i := range k.out {
		f := &k.out[i]
		switch f.Severity {
		case SevError:
			v.Counts.Errors++
		case SevFlow:
			v.Counts.Flow++
		default:
			v.Counts.Notes++
		}
		if v.Report != nil {
			v.Report(f)
		}
	}
}

// exchanges follows the CM messages: REQs first, which make the
// connections, then REPs, which name the passive sides, then the rest
// in capture order.
func (k *cmCheck) exchanges() {
	msgs := k.v.cm
	for i := range msgs {
		m := &msgs[i]
		if m.classVersion != mad.CMClassVersion || m.method != mad.MethodSend {
			k.find(m.frame, SevFlow, "cm", nil, m.attr.String()+" with class version "+strconv.Itoa(int(m.classVersion))+
				" and method "+m.method.String()+" (CM messages are class version 2, method Send)")
		}
		if m.attr == mad.AttrREQ {
			k.req(m)
		}
	}
	for i := range msgs {
		if m := &msgs[i]; m.attr == mad.AttrREP {
			k.rep(m)
		}
	}
	for i := range msgs {
		switch m := &msgs[i]; m.attr {
		case mad.AttrREQ, mad.AttrREP, mad.AttrSIDRREQ, mad.AttrSIDRREP:
		default:
			k.other(m)
		}
	}
	k.sidr(msgs)
	for _, c := range k.conns {
		k.complete(c)
	}
}

type sidrKey struct {
	src, dst netip.Addr
	id       uint32
}

// sidr pairs each SIDR_REQ with its SIDR_REP by request ID.
func (k *cmCheck) sidr(msgs []cmMsg) {
	reqs := map[sidrKey]*cmMsg{}
	var order []*cmMsg
	for i := range msgs {
		m := &msgs[i]
		if m.attr != mad.AttrSIDRREQ {
			continue
		}
		key := sidrKey{m.src, m.dst, m.local}
		if first := reqs[key]; first != nil && first.tid == m.tid {
			k.find(m.frame, SevNote, "cm", nil, "SIDR_REQ resent (first at "+frameStr(first.frame)+")")
			continue
		}
		reqs[key] = m
		order = append(order, m)
	}
	answered := map[*cmMsg]bool{}
	for i := range msgs {
		m := &msgs[i]
		if m.attr != mad.AttrSIDRREP {
			continue
		}
		switch q := reqs[sidrKey{m.dst, m.src, m.local}]; {
		case q == nil:
			k.find(m.frame, SevFlow, "cm", nil, "SIDR_REP for request ID "+hex8(m.local)+" answers no SIDR_REQ")
		case q.tid != m.tid:
			k.tid(m, q)
		default:
			answered[q] = true
		}
	}
	for _, q := range order {
		if !answered[q] && reqs[sidrKey{q.src, q.dst, q.local}] == q {
			k.find(q.frame, SevFlow, "cm", nil, "SIDR_REQ (request ID "+hex8(q.local)+") got no SIDR_REP")
		}
	}
}

func (k *cmCheck) req(m *cmMsg) {
	for _, c := range k.conns {
		if c.addr == [2]netip.Addr{m.src, m.dst} && c.id[activeSide] == m.local {
			if c.req.tid == m.tid {
				k.find(m.frame, SevNote, "cm", nil, "REQ resent (first at "+frameStr(c.req.frame)+")")
				return
			}
			k.find(m.frame, SevFlow, "cm", nil, "REQ reuses local comm ID "+hex8(m.local)+" of the REQ at "+frameStr(c.req.frame))
		}
	}
	if !m.gidsMatch {
		k.find(m.frame, SevFlow, "cm", nil, "REQ primary path GIDs are not the packet's addresses "+m.src.String()+" > "+m.dst.String())
	}
	c := &cmConn{req: m, addr: [2]netip.Addr{m.src, m.dst}}
	c.id[activeSide], c.hasID[activeSide], c.qpn[activeSide] = m.local, true, m.qpn
	k.conns = append(k.conns, c)
}

// conn returns the connection with a side at addr whose communication
// ID is id, and that side: of several, the latest one asked for before
// frame, or else the first.
func (k *cmCheck) conn(addr netip.Addr, id uint32, frame int) (*cmConn, int) {
	var found *cmConn
	side := 0
	for _, c := range k.conns {
		for s := range 2 {
			if c.addr[s] == addr && c.hasID[s] && c.id[s] == id && (found == nil || c.req.frame < frame) {
				found, side = c, s
			}
		}
	}
	return found, side
}

func (k *cmCheck) rep(m *cmMsg) {
	c, side := k.conn(m.dst, m.remote, m.frame)
	if c == nil || side != activeSide || c.addr[passiveSide] != m.src {
		k.find(m.frame, SevFlow, "cm", nil, "REP to remote comm ID "+hex8(m.remote)+" answers no REQ")
		return
	}
	if c.rep != nil {
		if c.rep.local == m.local && c.rep.tid == m.tid {
			k.find(m.frame, SevNote, "cm", nil, "REP resent (first at "+frameStr(c.rep.frame)+")")
		} else {
			k.find(m.frame, SevFlow, "cm", nil, "second REP for the REQ at "+frameStr(c.req.frame)+" (the first at "+frameStr(c.rep.frame)+")")
		}
		return
	}
	c.rep = m
	c.id[passiveSide], c.hasID[passiveSide], c.qpn[passiveSide] = m.local, true, m.qpn
	k.tid(m, c.req)
	if m.initDepth > c.req.respRes {
		k.find(m.frame, SevFlow, "cm", nil, "REP initiator depth "+strconv.Itoa(int(m.initDepth))+" exceeds the responder resources "+
			strconv.Itoa(int(c.req.respRes))+" of the REQ at "+frameStr(c.req.frame))
	}
}

// tid checks that m carries the transaction ID of want, the message it
// answers or belongs with.
func (k *cmCheck) tid(m, want *cmMsg) {
	if m.tid != want.tid {
		k.find(m.frame, SevFlow, "cm", nil, m.attr.String()+" transaction ID "+appendHexStr(m.tid, 16)+", the "+want.attr.String()+
			" at "+frameStr(want.frame)+" has "+appendHexStr(want.tid, 16))
	}
}

// other checks a message that is neither REQ nor REP: it must name the
// receiver's communication ID and, when it is known, the sender's.
func (k *cmCheck) other(m *cmMsg) {
	name := m.attr.String()
	c, to := k.conn(m.dst, m.remote, m.frame)
	from := 1 - to
	if c == nil || c.addr[from] != m.src {
		k.find(m.frame, SevFlow, "cm", nil, name+" to remote comm ID "+hex8(m.remote)+" belongs to no connection the capture set up")
		return
	}
	// A REJ of a REQ may come before the passive side has an ID: its
	// local comm ID is then 0 (seen on rdma_rxe), and c.hasID false.
	if c.hasID[from] && m.local != c.id[from] {
		k.find(m.frame, SevFlow, "cm", nil, name+" local comm ID "+hex8(m.local)+", the sender's is "+hex8(c.id[from]))
	}
	fromActive := from == activeSide
	switch m.attr {
	case mad.AttrRTU:
		switch {
		case !fromActive:
			k.find(m.frame, SevFlow, "cm", nil, "RTU from the passive side")
		case c.rep == nil:
			k.find(m.frame, SevFlow, "cm", nil, "RTU without a REP (the REQ at "+frameStr(c.req.frame)+")")
		case c.rtu != nil:
			k.find(m.frame, SevNote, "cm", nil, "RTU resent (first at "+frameStr(c.rtu.frame)+")")
		default:
			c.rtu = m
			k.tid(m, c.req)
		}
	case mad.AttrREJ:
		if c.rej != nil {
			k.find(m.frame, SevNote, "cm", nil, "REJ resent (first at "+frameStr(c.rej.frame)+")")
			return
		}
		c.rej = m
		switch {
		case fromActive && m.ref == mad.MsgREQ:
			k.find(m.frame, SevFlow, "cm", nil, "the active side rejects a REQ")
		case !fromActive && m.ref == mad.MsgREP:
			k.find(m.frame, SevFlow, "cm", nil, "the passive side rejects a REP")
		case c.rtu != nil:
			k.find(m.frame, SevFlow, "cm", nil, "REJ after the RTU at "+frameStr(c.rtu.frame)+" (an established connection ends with a DREQ)")
		}
		k.tid(m, c.req)
	case mad.AttrMRA:
		switch {
		case m.ref == mad.MsgREQ && fromActive:
			k.find(m.frame, SevFlow, "cm", nil, "the active side acknowledges a REQ with an MRA")
		case m.ref == mad.MsgREP && !fromActive:
			k.find(m.frame, SevFlow, "cm", nil, "the passive side acknowledges a REP with an MRA")
		}
		if m.ref != mad.MsgOther { // an MRA of a LAP has the LAP's transaction ID
			k.tid(m, c.req)
		}
	case mad.AttrDREQ:
		for _, d := range c.dreqs {
			if d.from == from && d.m.tid == m.tid {
				k.find(m.frame, SevNote, "cm", nil, "DREQ resent (first at "+frameStr(d.m.frame)+")")
				return
			}
		}
		if c.rep == nil || c.rej != nil {
			k.find(m.frame, SevFlow, "cm", nil, "DREQ for a connection that was not established (the REQ at "+frameStr(c.req.frame)+")")
		} else if m.qpn != c.qpn[to] {
			k.find(m.frame, SevFlow, "cm", nil, "DREQ names remote QPN "+appendHexStr(uint64(m.qpn), 6)+", the receiver's QPN is "+appendHexStr(uint64(c.qpn[to]), 6))
		}
		c.dreqs = append(c.dreqs, cmDREQ{m: m, from: from})
	case mad.AttrDREP:
		var other *cmMsg
		for i := range c.dreqs {
			d := &c.dreqs[i]
			if d.from != to {
				continue
			}
			if d.m.tid == m.tid {
				if d.answered {
					k.find(m.frame, SevNote, "cm", nil, "DREP resent for the DREQ at "+frameStr(d.m.frame))
				}
				d.answered = true
				return
			}
			other = d.m
		}
		if other != nil {
			k.tid(m, other)
			return
		}
		k.find(m.frame, SevFlow, "cm", nil, "DREP answers no DREQ")
	}
}

// complete reports the exchanges of c that are left unfinished.
func (k *cmCheck) complete(c *cmConn) {
	switch {
	case c.rej != nil:
	case c.rep == nil:
		k.find(c.req.frame, SevFlow, "cm", nil, "REQ (local comm ID "+hex8(c.req.local)+") got neither REP nor REJ")
	case c.rtu == nil:
		k.find(c.rep.frame, SevFlow, "cm", nil, "REP (local comm ID "+hex8(c.rep.local)+") got no RTU")
	}
	for _, d := range c.dreqs {
		if !d.answered {
			k.find(d.m.frame, SevFlow, "cm", nil, "DREQ (local comm ID "+hex8(d.m.local)+") got no DREP")
		}
	}
}

// traffic checks the packets of the connections CM set up: each side's
// first request goes to the QPN the other side announced, with the
// starting PSN the other side asked for (the REQ's for the passive
// side, the REP's for the active side), on the transport and path MTU
// of the REQ; and no packet between the two goes to a QP that no
// exchange set up.
func (k *cmCheck) traffic() {
	v := k.v
	type pair struct{ src, dst netip.Addr }
	qps := map[pair][]uint32{} // the QPNs set up, by the direction packets go to them
	for _, c := range k.conns {
		if c.rep == nil || c.rej != nil {
			continue
		}
		a, p := c.addr[activeSide], c.addr[passiveSide]
		qps[pair{a, p}] = append(qps[pair{a, p}], c.qpn[passiveSide])
		qps[pair{p, a}] = append(qps[pair{p, a}], c.qpn[activeSide])
		k.firstRequest(c, a, p, c.qpn[passiveSide], c.rep, c.req.frame)
		k.firstRequest(c, p, a, c.qpn[activeSide], c.req, c.rep.frame)
	}
	for _, fl := range v.order {
		if fl.id.UD {
			continue
		}
		set, ok := qps[pair{fl.id.Src, fl.id.Dst}]
		if !ok || slices.Contains(set, fl.id.DestQP) {
			continue
		}
		k.find(fl.first, SevFlow, "cm_traffic", fl, "packets to qp "+appendHexStr(uint64(fl.id.DestQP), 6)+
			", which no CM exchange in the capture set up between these hosts")
	}
}

// firstRequest checks the first request from src to QP qpn at dst
// against set, the message (REQ or REP) that gave its starting PSN,
// unless it came before frame after: then the flow is older than the
// connection. (after is a frame sent the same way, which even a sniffer
// that captures each direction on its own keeps in order.)
func (k *cmCheck) firstRequest(c *cmConn, src, dst netip.Addr, qpn uint32, set *cmMsg, after int) {
	fl := k.v.flows[FlowID{Src: src, Dst: dst, DestQP: qpn}]
	if fl == nil || !fl.req.started || fl.req.firstFrame < after {
		return // no request seen, or the flow began before this connection
	}
	r := &fl.req
	if r.firstPSN != set.psn {
		k.find(r.firstFrame, SevFlow, "cm_traffic", fl, "first request at psn "+psnStr(r.firstPSN)+", the "+set.attr.String()+
			" at "+frameStr(set.frame)+" set starting psn "+psnStr(set.psn))
	}
	want := bth.TransportRC
	switch c.req.transport {
	case mad.TransportRC:
	case mad.TransportUC:
		want = bth.TransportUC
	default:
		return
	}
	if r.transport != want {
		k.find(r.firstFrame, SevFlow, "cm_traffic", fl, r.transport.String()+" traffic on a connection the REQ at "+
			frameStr(c.req.frame)+" asked for as "+c.req.transport.String())
	}
	if r.mtu != 0 && c.req.mtu != 0 && r.mtu != c.req.mtu {
		k.find(r.mtuFrame, SevFlow, "cm_traffic", fl, "path mtu "+strconv.Itoa(r.mtu)+", the REQ at "+frameStr(c.req.frame)+
			" set "+strconv.Itoa(c.req.mtu))
	}
}
