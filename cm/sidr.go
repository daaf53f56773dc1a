package cm

import (
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/mad"
)

// Service ID resolution (IBTA §12.11): a SIDR_REQ asks the CM at a
// peer for the QPN and Q_Key of a service, which answers with a
// SIDR_REP. rdma_cm uses it for UD IDs (its UDP port space): udaddy's
// rdma_connect and rdma_accept. There is no connection: the active side
// resends its request until an answer comes or the retries run out; the
// passive side keeps an answered request for TimeWait to answer a
// duplicate the same way, and one the application has not answered
// within ServiceTimeout is forgotten.

// sidr is one request, on either side.
type sidr struct {
	id      ID
	active  bool
	peer    netip.Addr
	tid     uint64
	reqID   uint32 // the active side's request ID (its ID)
	sid     mad.ServiceID
	code    uint8 // active: the response timeout code
	retries int
	done    bool // passive: answered
	timer   timer
	last    [mad.Len]byte
}

// ResolveSIDR sends a SIDR_REQ of f's values (RequestID is set here) to
// the CM at to, resent every timeout code's time, retries times; the
// answer comes as EventSIDRReply, no answer as EventTimeout.
func (m *Machine) ResolveSIDR(now Time, to netip.Addr, f mad.SIDRREQFields, code uint8, retries int) (ID, error) {
	if len(m.conns)+len(m.sidrs) >= m.cfg.MaxConns {
		return 0, fmt.Errorf("sidr: %w", ErrNoResources)
	}
	s := &sidr{id: m.newID(), active: true, peer: to.Unmap(), tid: m.rnd.Uint64(), sid: f.ServiceID, code: code,
		retries: retries}
	s.reqID = uint32(s.id)
	f.RequestID = s.reqID
	s.last = build(mad.AttrSIDRREQ, s.tid, &f)
	m.sidrs[s.id] = s
	m.queue(s.peer, &s.last)
	s.timer.set(now + m.respTimeout(code))
	return s.id, nil
}

// AnswerSIDR answers a request of EventSIDRRequest with a SIDR_REP of
// f's values (RequestID and ServiceID are set here): SIDRValid with the
// QPN and Q_Key, or a refusal (SIDRRejected, SIDRNoQP).
func (m *Machine) AnswerSIDR(now Time, id ID, f mad.SIDRREPFields) error {
	s := m.sidrs[id]
	if s == nil || s.active {
		return fmt.Errorf("sidr answer %#x: %w", uint32(id), ErrNoConn)
	}
	if s.done {
		return fmt.Errorf("sidr answer %#x: answered already: %w", uint32(id), ErrState)
	}
	f.RequestID, f.ServiceID = s.reqID, s.sid
	s.last = build(mad.AttrSIDRREP, s.tid, &f)
	s.done = true
	m.queue(s.peer, &s.last)
	s.timer.set(now + m.cfg.TimeWait)
	return nil
}

// CancelSIDR forgets a request (the application gave up on it).
func (m *Machine) CancelSIDR(id ID) {
	if s := m.sidrs[id]; s != nil {
		m.dropSIDR(s)
	}
}

func (m *Machine) dropSIDR(s *sidr) {
	delete(m.sidrs, s.id)
	if k := (remoteKey{s.peer, s.reqID}); !s.active && m.sidrByRemote[k] == s {
		delete(m.sidrByRemote, k)
	}
}

// recvSIDRREQ handles a SIDR_REQ: a new one for a listened-to service
// ID becomes EventSIDRRequest, a duplicate is answered again (or, not
// answered yet, ignored), one for no listener is answered "service ID
// not supported".
func (m *Machine) recvSIDRREQ(now Time, from netip.Addr, tid uint64, r mad.SIDRREQ) {
	if s := m.sidrByRemote[remoteKey{from, r.RequestID()}]; s != nil {
		m.ctr.Duplicates++
		if s.done {
			m.ctr.Resent++
			m.queue(s.peer, &s.last)
		}
		return
	}
	sid := r.ServiceID()
	if _, ok := m.listeners[sid]; !ok {
		m.ctr.NoListener++
		f := mad.SIDRREPFields{RequestID: r.RequestID(), Status: mad.SIDRServiceIDUnknown, ServiceID: sid}
		b := build(mad.AttrSIDRREP, tid, &f)
		m.queue(from, &b)
		return
	}
	if len(m.conns)+len(m.sidrs) >= m.cfg.MaxConns || m.pending >= m.cfg.MaxPending {
		m.ctr.Refused++
		f := mad.SIDRREPFields{RequestID: r.RequestID(), Status: mad.SIDRNoQP, ServiceID: sid}
		b := build(mad.AttrSIDRREP, tid, &f)
		m.queue(from, &b)
		return
	}
	s := &sidr{id: m.newID(), peer: from, tid: tid, reqID: r.RequestID(), sid: sid}
	m.sidrs[s.id] = s
	m.sidrByRemote[remoteKey{from, s.reqID}] = s
	s.timer.set(now + mad.Timeout(m.cfg.ServiceTimeout))
	f := r.Fields()
	m.emit(Event{Type: EventSIDRRequest, ID: s.id, Peer: from, ServiceID: sid, SIDRREQ: &f,
		PrivateData: clone(r.PrivateData())})
}

// recvSIDRREP handles a SIDR_REP for one of our requests.
func (m *Machine) recvSIDRREP(from netip.Addr, r mad.SIDRREP) {
	s := m.sidrs[ID(r.RequestID())]
	if s == nil || !s.active || s.peer != from {
		m.ctr.UnknownConn++
		return
	}
	f := r.Fields()
	m.dropSIDR(s)
	m.emit(Event{Type: EventSIDRReply, ID: s.id, Peer: from, ServiceID: s.sid, SIDRREP: &f,
		PrivateData: clone(r.PrivateData())})
}

// expireSIDR handles a request's timer.
func (m *Machine) expireSIDR(now Time, s *sidr) {
	s.timer.stop()
	if !s.active {
		m.dropSIDR(s) // answered and past TimeWait, or never answered
		return
	}
	if s.retries > 0 {
		s.retries--
		m.ctr.Resent++
		m.queue(s.peer, &s.last)
		s.timer.set(now + m.respTimeout(s.code))
		return
	}
	m.ctr.Timeouts++
	m.dropSIDR(s)
	m.emit(Event{Type: EventTimeout, ID: s.id, Peer: s.peer, ServiceID: s.sid, Reason: mad.RejTimeout})
}
