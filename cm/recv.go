package cm

import (
	"encoding/binary"
	"net/netip"

	"github.com/uroce/uroce/mad"
)

var be = binary.BigEndian

// Receive takes a MAD that arrived on QP1 from the CM at from (the
// sender's GID or IP address). Anything that is not a well-formed CM
// message for a known connection or listener is counted and dropped, or
// answered statelessly as the spec says (REJ for a REQ nobody listens
// to, DREP for a DREQ of an unknown connection).
func (m *Machine) Receive(now Time, from netip.Addr, b []byte) {
	m.ctr.Received++
	md, err := mad.Parse(b)
	if err != nil {
		m.ctr.Malformed++
		return
	}
	if !md.IsCM() {
		m.ctr.NotCM++
		return
	}
	if md.BaseVersion() != mad.BaseVersion || md.ClassVersion() != mad.CMClassVersion || md.Method() != mad.MethodSend {
		m.ctr.Malformed++
		return
	}
	from = from.Unmap()
	d := md.Data()
	tid := md.TID()
	switch md.AttrID() {
	case mad.AttrREQ:
		m.recvREQ(now, from, tid, mad.REQ(d))
	case mad.AttrMRA:
		m.recvMRA(now, from, mad.MRA(d))
	case mad.AttrREJ:
		m.recvREJ(now, from, mad.REJ(d))
	case mad.AttrREP:
		m.recvREP(now, from, mad.REP(d))
	case mad.AttrRTU:
		m.recvRTU(now, from, mad.RTU(d))
	case mad.AttrDREQ:
		m.recvDREQ(now, from, tid, mad.DREQ(d))
	case mad.AttrDREP:
		m.recvDREP(now, from, mad.DREP(d))
	case mad.AttrSIDRREQ:
		m.recvSIDRREQ(now, from, tid, mad.SIDRREQ(d))
	case mad.AttrSIDRREP:
		m.recvSIDRREP(from, mad.SIDRREP(d))
	default:
		m.ctr.Unsupported++
	}
}

// rejectREQ answers a REQ for which no connection is made with a REJ
// from local communication ID 0 (what rdma_rxe's CM sends for an
// unknown service ID).
func (m *Machine) rejectREQ(to netip.Addr, tid uint64, r mad.REQ, reason mad.RejectReason) {
	f := mad.REJFields{RemoteCommID: r.LocalCommID(), MessageRejected: mad.MsgREQ, Reason: reason}
	b := build(mad.AttrREJ, tid, &f)
	m.queue(to, &b)
}

// recvREQ handles a REQ (§12.9.5.2, and §12.9.8.3 for duplicates and
// stale connections).
func (m *Machine) recvREQ(now Time, from netip.Addr, tid uint64, r mad.REQ) {
	if c := m.byRemote[remoteKey{from, r.LocalCommID()}]; c != nil && !c.active {
		m.ctr.Duplicates++
		switch c.state {
		case MRAReqSent, RepSent, MRARepRcvd:
			m.resend(c) // the MRA or the REP
		case TimeWait:
			if c.lastAttr == mad.AttrREJ {
				m.resend(c)
			} else {
				m.ctr.Stale++
				m.rejectREQ(from, tid, r, mad.RejStaleConnection)
			}
		}
		return
	}
	if old := m.byQPN[qpKey{from, r.LocalQPN()}]; old != nil {
		// A new REQ from a QP we still hold a connection with: that
		// connection is stale (§12.9.8.3.1). Refuse the REQ and release
		// the old connection.
		m.ctr.Stale++
		m.rejectREQ(from, tid, r, mad.RejStaleConnection)
		m.stale(now, old)
		return
	}
	sid := r.ServiceID()
	if _, ok := m.listeners[sid]; !ok {
		m.ctr.NoListener++
		m.rejectREQ(from, tid, r, mad.RejInvalidServiceID)
		return
	}
	switch {
	case r.TransportType() != mad.TransportRC && r.TransportType() != mad.TransportUC:
		m.ctr.Refused++
		m.rejectREQ(from, tid, r, mad.RejInvalidTransportType)
		return
	case r.PathMTU().Bytes() == 0:
		m.ctr.Refused++
		m.rejectREQ(from, tid, r, mad.RejInvalidMTU)
		return
	case r.LocalCommID() == 0:
		m.ctr.Refused++
		m.rejectREQ(from, tid, r, mad.RejInvalidCommID)
		return
	case len(m.conns) >= m.cfg.MaxConns || m.pending >= m.cfg.MaxPending:
		m.ctr.Refused++
		m.rejectREQ(from, tid, r, mad.RejNoResources)
		return
	}
	c := &conn{id: m.newID(), remoteID: r.LocalCommID(), peer: from, tid: tid, req: r.Fields()}
	m.conns[c.id] = c
	m.byRemote[remoteKey{from, c.remoteID}] = c
	m.byQPN[qpKey{from, c.req.LocalQPN}] = c
	m.setState(c, ReqRcvd)
	// Answer within the active side's wait, or send an MRA at half of it.
	c.timer.set(now + m.respTimeout(c.ownTimeoutCode())/2)
	e := m.event(c, EventRequest)
	req := c.req
	e.REQ = &req
	e.PrivateData = clone(r.PrivateData())
	m.emit(e)
}

// stale releases a connection found stale by a new REQ.
func (m *Machine) stale(now Time, c *conn) {
	e := m.event(c, EventDisconnected)
	e.Reason = mad.RejStaleConnection
	switch c.state {
	case Established:
		c.reason = mad.RejStaleConnection // given with the EventDisconnected
		_ = m.Disconnect(now, c.id, nil)
	case ReqRcvd, MRAReqSent:
		// The application was not told yet of an outcome: it is a reject.
		e.Type = EventRejected
		m.emit(e)
		m.remove(c)
	case DREQSent, DREQRcvd, TimeWait:
		if k := (qpKey{c.peer, c.remoteQPN()}); m.byQPN[k] == c {
			delete(m.byQPN, k)
		}
	default:
		m.emit(e)
		m.sendTimeoutREJ(c, mad.MsgOther)
		m.enterTimeWait(now, c)
	}
}

// lookup finds the connection a message is for: its remote
// communication ID is our local one, it comes from the peer, and its
// local one, when the connection knows the peer's, is the peer's.
func (m *Machine) lookup(from netip.Addr, ours, theirs uint32) *conn {
	c := m.conns[ID(ours)]
	if c == nil || c.peer != from || (c.remoteID != 0 && theirs != c.remoteID) {
		m.ctr.UnknownConn++
		return nil
	}
	return c
}

// recvMRA handles an MRA: the peer needs more time (§12.6.6).
func (m *Machine) recvMRA(now Time, from netip.Addr, r mad.MRA) {
	c := m.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	wait := m.respTimeout(c.peerTimeoutCode()) + mad.Timeout(r.ServiceTimeout())
	switch {
	case c.active && c.state == ReqSent && r.MessageMRAed() == mad.MsgREQ:
		c.remoteID = r.LocalCommID()
		m.setState(c, MRAReqRcvd)
		c.timer.set(now + wait)
	case !c.active && c.state == RepSent && r.MessageMRAed() == mad.MsgREP:
		m.setState(c, MRARepRcvd)
		c.timer.set(now + wait)
	case c.state == MRAReqRcvd || c.state == MRARepRcvd:
		m.ctr.Duplicates++
	default:
		m.ctr.Unexpected++
	}
}

// recvREP handles a REP (§12.9.5.1).
func (m *Machine) recvREP(now Time, from netip.Addr, r mad.REP) {
	c := m.conns[ID(r.RemoteCommID())]
	if c == nil || !c.active || c.peer != from {
		m.ctr.UnknownConn++
		return
	}
	switch c.state {
	case ReqSent, MRAReqRcvd:
		if c.remoteID != 0 && c.remoteID != r.LocalCommID() { // an MRA told us the ID
			m.ctr.UnknownConn++
			return
		}
		c.rep, c.hasREP = r.Fields(), true
		c.remoteID = c.rep.LocalCommID
		if k := (qpKey{from, c.rep.LocalQPN}); m.byQPN[k] == nil {
			m.byQPN[k] = c
		}
		m.setState(c, RepRcvd)
		c.timer.set(now + m.respTimeout(c.ownTimeoutCode())/2)
		e := m.event(c, EventReply)
		req, rep := c.req, c.rep
		e.REQ, e.REP = &req, &rep
		e.PrivateData = clone(r.PrivateData())
		m.emit(e)
		return
	}
	if r.LocalCommID() != c.remoteID {
		m.ctr.UnknownConn++
		return
	}
	m.ctr.Duplicates++
	switch c.state {
	case MRARepSent, Established:
		m.resend(c) // the MRA, or the RTU (§12.9.8.3.2)
	case TimeWait:
		if c.lastAttr == mad.AttrREJ {
			m.resend(c)
		}
	}
}

// recvRTU handles an RTU: the passive side's connection is up.
func (m *Machine) recvRTU(now Time, from netip.Addr, r mad.RTU) {
	c := m.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	if c.active || (c.state != RepSent && c.state != MRARepRcvd) {
		m.ctr.Duplicates++
		return
	}
	c.timer.stop()
	m.setState(c, Established)
	e := m.event(c, EventEstablished)
	e.PrivateData = clone(r.PrivateData())
	m.emit(e)
}

// recvREJ handles a REJ (§12.6.7, §12.9.5).
func (m *Machine) recvREJ(now Time, from netip.Addr, r mad.REJ) {
	c := m.conns[ID(r.RemoteCommID())]
	if c == nil || c.peer != from || (c.remoteID != 0 && r.LocalCommID() != 0 && r.LocalCommID() != c.remoteID) {
		m.ctr.UnknownConn++
		return
	}
	e := m.event(c, EventRejected)
	e.Reason = r.Reason()
	e.PrivateData = clone(r.PrivateData())
	e.ARI = clone(r.ARI()[:min(int(r.RejectInfoLength()), mad.REJARILen)])
	switch c.state {
	case ReqSent, MRAReqRcvd, ReqRcvd, MRAReqSent:
		m.emit(e)
		m.remove(c)
	case RepRcvd, MRARepSent, RepSent, MRARepRcvd:
		m.emit(e)
		m.enterTimeWait(now, c)
	case Established, DREQSent, DREQRcvd:
		e.Type = EventDisconnected
		m.emit(e)
		m.enterTimeWait(now, c)
	default:
		m.ctr.Duplicates++
	}
}

// recvDREQ handles a DREQ (§12.9.5.3): answered with a DREP in every
// state from ESTABLISHED on, statelessly when the connection is gone.
func (m *Machine) recvDREQ(now Time, from netip.Addr, tid uint64, r mad.DREQ) {
	c := m.conns[ID(r.RemoteCommID())]
	if c == nil || c.peer != from || r.LocalCommID() != c.remoteID || (c.hasREP && r.RemoteQPN() != c.localQPN()) {
		if c == nil {
			// The kernel's CM answers a DREQ it has no connection for,
			// so that the peer stops retrying.
			f := mad.DREPFields{LocalCommID: r.RemoteCommID(), RemoteCommID: r.LocalCommID()}
			b := build(mad.AttrDREP, tid, &f)
			m.queue(from, &b)
		}
		m.ctr.UnknownConn++
		return
	}
	switch c.state {
	case Established, RepSent, MRARepRcvd:
		// A DREQ before the RTU: the RTU was lost, the peer is up.
		c.timer.stop()
		c.dreqTID = tid
		m.setState(c, DREQRcvd)
		e := m.event(c, EventDisconnectRequest)
		e.PrivateData = clone(r.PrivateData())
		m.emit(e)
	case DREQSent:
		// Both sides release at once: answer and wait no more.
		m.ctr.Duplicates++
		c.dreqTID = tid
		f := mad.DREPFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID}
		b := build(mad.AttrDREP, tid, &f)
		m.queue(c.peer, &b)
		e := m.event(c, EventDisconnected)
		m.emit(e)
		m.enterTimeWait(now, c)
	case DREQRcvd:
		m.ctr.Duplicates++
	case TimeWait:
		m.ctr.Duplicates++
		if c.lastAttr == mad.AttrDREP {
			m.resend(c)
		} else {
			f := mad.DREPFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID}
			b := build(mad.AttrDREP, tid, &f)
			m.ctr.Resent++
			m.queue(c.peer, &b)
		}
	default:
		m.ctr.Unexpected++
	}
}

// recvDREP handles a DREP: our release is done.
func (m *Machine) recvDREP(now Time, from netip.Addr, r mad.DREP) {
	c := m.lookup(from, r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		return
	}
	if c.state != DREQSent {
		m.ctr.Duplicates++
		return
	}
	e := m.event(c, EventDisconnected)
	e.Reason = c.reason
	e.PrivateData = clone(r.PrivateData())
	m.emit(e)
	m.enterTimeWait(now, c)
}
