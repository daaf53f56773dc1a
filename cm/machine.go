package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/uroce/uroce/mad"
)

// Errors of the application calls.
var (
	// ErrNoConn: no connection has that ID.
	ErrNoConn = errors.New("no such connection")
	// ErrState: the call does not fit the connection's state.
	ErrState = errors.New("wrong connection state")
	// ErrPrivateData: the private data is longer than the message holds.
	ErrPrivateData = errors.New("private data too long")
	// ErrNoResources: the machine holds Config.MaxConns connections.
	ErrNoResources = errors.New("too many connections")
	// ErrListening: the service ID already has a listener.
	ErrListening = errors.New("service id already listened to")
)

// Config are a Machine's settings; zero values take the defaults.
type Config struct {
	// CAGUID is the local channel adapter GUID put in REQs, REPs and
	// the ARI of timeout REJs.
	CAGUID uint64
	// Rand draws communication and transaction IDs (default: a
	// randomly seeded generator). Tests give a seeded one.
	Rand *rand.Rand
	// MaxConns bounds the connections in any state but IDLE (default
	// 4096). A REQ beyond it is rejected with "no resources".
	MaxConns int
	// MaxPending bounds the passive connections the application has not
	// answered (REQ_RCVD, MRA_REQ_SENT; default 256).
	MaxPending int
	// MaxQueued bounds the sends and the events waiting to be drained
	// (default 4096 each); beyond it they are dropped and counted.
	MaxQueued int
	// ServiceTimeout is the 5-bit code this side puts in its MRAs: how
	// much more time the application gets to answer (default 21,
	// 8.6 s). A request still unanswered then is rejected (timeout).
	ServiceTimeout uint8
	// PacketLifetime is added twice to every response timeout (the
	// round trip of §12.7.x; default 0, the in-memory and LAN case).
	PacketLifetime time.Duration
	// TimeWait is how long a released connection stays in TIMEWAIT
	// (default 100 ms), answering stray DREQs and refusing stray REQs.
	TimeWait time.Duration
}

// Send is a MAD to transmit: a UD SEND to QP1 of To with the GSI Q_Key.
type Send struct {
	To  netip.Addr
	MAD [mad.Len]byte
}

// Event is what the machine tells the application.
type Event struct {
	Type      EventType
	ID        ID
	Peer      netip.Addr
	ServiceID mad.ServiceID
	// Reason is the REJ's reason (EventRejected), RejTimeout
	// (EventTimeout), RejStaleConnection or a REJ's reason for an
	// EventDisconnected that was no DREQ/DREP, else 0.
	Reason mad.RejectReason
	// REQ is the REQ received (EventRequest) or sent (EventReply).
	REQ *mad.REQFields
	// REP is the REP received (EventReply).
	REP *mad.REPFields
	// PrivateData is the private data of the message behind the event
	// (REQ, REP, REJ, RTU, DREQ or DREP), whole as carried.
	PrivateData []byte
	// ARI is a REJ's additional reject information (RejectInfoLength
	// bytes).
	ARI []byte
	// SIDRREQ is the SIDR_REQ received (EventSIDRRequest), SIDRREP the
	// SIDR_REP (EventSIDRReply).
	SIDRREQ *mad.SIDRREQFields
	SIDRREP *mad.SIDRREPFields
}

// Counters count what the machine did with its inputs.
type Counters struct {
	Received    uint64 // MADs given to Receive
	Sent        uint64 // MADs queued for sending
	Resent      uint64 // of them, retransmissions and answers to duplicates
	Malformed   uint64 // not a MAD, or a CM MAD of the wrong version or method
	NotCM       uint64 // another management class
	Unsupported uint64 // CM attributes not handled (LAP, APR, ClassPortInfo)
	UnknownConn uint64 // messages for no connection, or not matching it
	Duplicates  uint64 // duplicates (answered or ignored, never acted on twice)
	Unexpected  uint64 // messages that do not fit the connection's state
	NoListener  uint64 // REQs rejected for an unknown service ID
	Refused     uint64 // REQs rejected for lack of room (MaxConns, MaxPending) or invalid fields
	Stale       uint64 // REQs rejected as stale connections
	Timeouts    uint64 // connections that ran out of retries or time
	QueueDrops  uint64 // sends or events dropped for full queues
}

// conn is one connection's state.
type conn struct {
	id       ID
	remoteID uint32 // the peer's communication ID, 0 until known
	state    State
	active   bool
	peer     netip.Addr
	tid      uint64 // the REQ's transaction ID, used by the whole exchange
	dreqTID  uint64 // the TID of the DREQ answered
	req      mad.REQFields
	rep      mad.REPFields
	hasREP   bool
	timer    timer
	retries  int           // retransmissions left
	last     [mad.Len]byte // the message duplicates and timeouts resend
	lastAttr mad.AttrID    // its attribute (0: none)
	// reason is given with the EventDisconnected of a release the
	// machine started itself (a stale connection).
	reason mad.RejectReason
}

// remoteKey finds a passive connection by the peer's address and comm ID.
type remoteKey struct {
	peer netip.Addr
	id   uint32
}

// qpKey finds a connection by the peer's address and QPN (stale check).
type qpKey struct {
	peer netip.Addr
	qpn  uint32
}

// Machine is the CM state machine of one port: its listeners and
// connections. See the package documentation.
type Machine struct {
	cfg       Config
	rnd       *rand.Rand
	conns     map[ID]*conn
	byRemote  map[remoteKey]*conn
	byQPN     map[qpKey]*conn
	listeners map[mad.ServiceID]struct{}
	sidrs     map[ID]*sidr
	// sidrByRemote finds a passive SIDR request by the peer's address
	// and request ID.
	sidrByRemote map[remoteKey]*sidr
	pending      int
	sends        []Send
	events       []Event
	ctr          Counters
}

// New returns a machine with no listener and no connection.
func New(cfg Config) *Machine {
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 256
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 4096
	}
	if cfg.ServiceTimeout == 0 {
		cfg.ServiceTimeout = 21
	}
	cfg.ServiceTimeout &= 31
	if cfg.TimeWait <= 0 {
		cfg.TimeWait = 100 * time.Millisecond
	}
	return &Machine{cfg: cfg, rnd: cfg.Rand, conns: map[ID]*conn{}, byRemote: map[remoteKey]*conn{},
		byQPN: map[qpKey]*conn{}, listeners: map[mad.ServiceID]struct{}{}, sidrs: map[ID]*sidr{},
		sidrByRemote: map[remoteKey]*sidr{}}
}

// Counters returns the counters.
func (m *Machine) Counters() Counters { return m.ctr }

// Len returns the number of connections (TIMEWAIT included).
func (m *Machine) Len() int { return len(m.conns) }

// State returns a connection's state (Idle for an unknown ID).
func (m *Machine) State(id ID) State {
	if c := m.conns[id]; c != nil {
		return c.state
	}
	return Idle
}

// Sends appends the MADs to send to dst, empties the queue and returns dst.
func (m *Machine) Sends(dst []Send) []Send {
	dst = append(dst, m.sends...)
	clear(m.sends)
	m.sends = m.sends[:0]
	return dst
}

// Events appends the pending events to dst, empties the queue and
// returns dst.
func (m *Machine) Events(dst []Event) []Event {
	dst = append(dst, m.events...)
	clear(m.events)
	m.events = m.events[:0]
	return dst
}

// Listen makes REQs for sid reach the application (EventRequest)
// instead of being rejected with "invalid service ID".
func (m *Machine) Listen(sid mad.ServiceID) error {
	if _, ok := m.listeners[sid]; ok {
		return fmt.Errorf("listen %v: %w", sid, ErrListening)
	}
	m.listeners[sid] = struct{}{}
	return nil
}

// Unlisten removes the listener of sid; requests already delivered
// stay.
func (m *Machine) Unlisten(sid mad.ServiceID) { delete(m.listeners, sid) }

// Deadline returns the earliest time Tick has work, if any.
func (m *Machine) Deadline() (Time, bool) {
	var d Time
	ok := false
	for _, c := range m.conns {
		if c.timer.armed && (!ok || c.timer.due < d) {
			d, ok = c.timer.due, true
		}
	}
	for _, s := range m.sidrs {
		if s.timer.armed && (!ok || s.timer.due < d) {
			d, ok = s.timer.due, true
		}
	}
	return d, ok
}

// respTimeout is how long to wait for an answer from a CM whose
// response timeout code is code (§12.7.x: the code's time plus the
// packet's round trip).
func (m *Machine) respTimeout(code uint8) time.Duration {
	return mad.Timeout(code) + 2*m.cfg.PacketLifetime
}

// peerTimeout is how long the peer may take to answer us.
func (c *conn) peerTimeoutCode() uint8 {
	if c.active {
		return c.req.RemoteCMResponseTimeout
	}
	return c.req.LocalCMResponseTimeout
}

// ownTimeoutCode is how long we told the peer we take to answer.
func (c *conn) ownTimeoutCode() uint8 {
	if c.active {
		return c.req.LocalCMResponseTimeout
	}
	return c.req.RemoteCMResponseTimeout
}

// localQPN is our QP's number on the connection.
func (c *conn) localQPN() uint32 {
	if c.active {
		return c.req.LocalQPN
	}
	return c.rep.LocalQPN
}

// remoteQPN is the peer's QP number, 0 until known.
func (c *conn) remoteQPN() uint32 {
	if c.active {
		if !c.hasREP {
			return 0
		}
		return c.rep.LocalQPN
	}
	return c.req.LocalQPN
}

func (m *Machine) newID() ID {
	for {
		id := ID(m.rnd.Uint32())
		if id != 0 && m.conns[id] == nil && m.sidrs[id] == nil {
			return id
		}
	}
}

// encoder is any of mad's Fields types.
type encoder interface{ Encode(b []byte) }

// build makes a CM MAD.
func build(attr mad.AttrID, tid uint64, f encoder) [mad.Len]byte {
	var b [mad.Len]byte
	h := mad.CMHeader(attr, tid)
	h.Encode(b[:mad.HeaderLen])
	f.Encode(b[mad.HeaderLen:])
	return b
}

func (m *Machine) queue(to netip.Addr, b *[mad.Len]byte) {
	if len(m.sends) >= m.cfg.MaxQueued {
		m.ctr.QueueDrops++
		return
	}
	m.sends = append(m.sends, Send{To: to, MAD: *b})
	m.ctr.Sent++
}

// send queues a message of c and keeps it as the one to resend.
func (m *Machine) send(c *conn, attr mad.AttrID, tid uint64, f encoder) {
	c.last = build(attr, tid, f)
	c.lastAttr = attr
	m.queue(c.peer, &c.last)
}

// resend queues c's last message again.
func (m *Machine) resend(c *conn) {
	if c.lastAttr == 0 {
		return
	}
	m.ctr.Resent++
	m.queue(c.peer, &c.last)
}

func (m *Machine) emit(e Event) {
	if len(m.events) >= m.cfg.MaxQueued {
		m.ctr.QueueDrops++
		return
	}
	m.events = append(m.events, e)
}

func (m *Machine) event(c *conn, t EventType) Event {
	return Event{Type: t, ID: c.id, Peer: c.peer, ServiceID: c.req.ServiceID}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func putPrivate(dst, src []byte) error {
	if len(src) > len(dst) {
		return fmt.Errorf("%d bytes, %d fit: %w", len(src), len(dst), ErrPrivateData)
	}
	copy(dst, src)
	return nil
}

// setState moves c to s, keeping the pending count.
func (m *Machine) setState(c *conn, s State) {
	wasPending := c.state == ReqRcvd || c.state == MRAReqSent
	isPending := s == ReqRcvd || s == MRAReqSent
	switch {
	case wasPending && !isPending:
		m.pending--
	case !wasPending && isPending:
		m.pending++
	}
	c.state = s
}

// remove forgets c (back to IDLE).
func (m *Machine) remove(c *conn) {
	m.setState(c, Idle)
	delete(m.conns, c.id)
	if k := (remoteKey{c.peer, c.remoteID}); c.remoteID != 0 && m.byRemote[k] == c {
		delete(m.byRemote, k)
	}
	if k := (qpKey{c.peer, c.remoteQPN()}); m.byQPN[k] == c {
		delete(m.byQPN, k)
	}
}

// enterTimeWait moves c to TIMEWAIT (§12.9.5: it leaves for IDLE when
// the timer expires). The stale-connection index forgets it: the peer
// may reuse its QP.
func (m *Machine) enterTimeWait(now Time, c *conn) {
	m.setState(c, TimeWait)
	if k := (qpKey{c.peer, c.remoteQPN()}); m.byQPN[k] == c {
		delete(m.byQPN, k)
	}
	c.timer.set(now + m.cfg.TimeWait)
}

// Connect starts an active connection: it sends a REQ with req's values
// (LocalCommID is set here, LocalCAGUID when zero) to the CM at to, and
// retransmits it every RemoteCMResponseTimeout, MaxCMRetries times
// (§12.9.5.1).
func (m *Machine) Connect(now Time, to netip.Addr, req mad.REQFields) (ID, error) {
	if len(m.conns) >= m.cfg.MaxConns {
		return 0, fmt.Errorf("connect: %w", ErrNoResources)
	}
	c := &conn{id: m.newID(), active: true, peer: to.Unmap(), tid: m.rnd.Uint64(), req: req}
	c.req.LocalCommID = uint32(c.id)
	if c.req.LocalCAGUID == 0 {
		c.req.LocalCAGUID = m.cfg.CAGUID
	}
	m.conns[c.id] = c
	m.setState(c, ReqSent)
	m.send(c, mad.AttrREQ, c.tid, &c.req)
	c.retries = int(c.req.MaxCMRetries)
	c.timer.set(now + m.respTimeout(c.peerTimeoutCode()))
	return c.id, nil
}

// Accept answers a connection request (REQ_RCVD or MRA_REQ_SENT) with a
// REP of rep's values (the communication IDs and, when zero, the CA
// GUID are set here) and waits for the RTU, resending the REP every
// LocalCMResponseTimeout of the REQ, MaxCMRetries times (§12.9.5.2).
func (m *Machine) Accept(now Time, id ID, rep mad.REPFields) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("accept %#x: %w", uint32(id), ErrNoConn)
	}
	if c.active || (c.state != ReqRcvd && c.state != MRAReqSent) {
		return fmt.Errorf("accept %#x: in %v: %w", uint32(id), c.state, ErrState)
	}
	c.rep = rep
	c.rep.LocalCommID, c.rep.RemoteCommID = uint32(c.id), c.remoteID
	if c.rep.LocalCAGUID == 0 {
		c.rep.LocalCAGUID = m.cfg.CAGUID
	}
	c.hasREP = true
	m.setState(c, RepSent)
	m.send(c, mad.AttrREP, c.tid, &c.rep)
	c.retries = int(c.req.MaxCMRetries)
	c.timer.set(now + m.respTimeout(c.peerTimeoutCode()))
	return nil
}

// Reject refuses a connection request (passive, REQ_RCVD or
// MRA_REQ_SENT) or a reply (active, REP_RCVD or MRA_REP_SENT) with a
// REJ of the given reason (RejConsumer for the application's own
// refusal), additional reject information and private data (§12.6.7).
// The connection stays in TIMEWAIT, answering a duplicate with the same
// REJ.
func (m *Machine) Reject(now Time, id ID, reason mad.RejectReason, ari, priv []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("reject %#x: %w", uint32(id), ErrNoConn)
	}
	var ref mad.MsgRef
	switch c.state {
	case ReqRcvd, MRAReqSent:
		ref = mad.MsgREQ
	case RepRcvd, MRARepSent:
		ref = mad.MsgREP
	default:
		return fmt.Errorf("reject %#x: in %v: %w", uint32(id), c.state, ErrState)
	}
	f := mad.REJFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, MessageRejected: ref, Reason: reason}
	if err := putPrivate(f.PrivateData[:], priv); err != nil {
		return fmt.Errorf("reject %#x: %w", uint32(id), err)
	}
	if err := putPrivate(f.ARI[:], ari); err != nil {
		return fmt.Errorf("reject %#x: ari: %w", uint32(id), err)
	}
	f.RejectInfoLength = uint8(len(ari))
	m.send(c, mad.AttrREJ, c.tid, &f)
	m.enterTimeWait(now, c)
	return nil
}

// ReadyToUse completes an active connection whose REP arrived
// (REP_RCVD or MRA_REP_SENT): the application has moved its QP to RTR
// and RTS; an RTU with priv goes out and the connection is ESTABLISHED
// (§12.9.5.1). A duplicate REP is answered with the same RTU.
func (m *Machine) ReadyToUse(now Time, id ID, priv []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("rtu %#x: %w", uint32(id), ErrNoConn)
	}
	if !c.active || (c.state != RepRcvd && c.state != MRARepSent) {
		return fmt.Errorf("rtu %#x: in %v: %w", uint32(id), c.state, ErrState)
	}
	f := mad.RTUFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID}
	if err := putPrivate(f.PrivateData[:], priv); err != nil {
		return fmt.Errorf("rtu %#x: %w", uint32(id), err)
	}
	m.send(c, mad.AttrRTU, c.tid, &f)
	c.timer.stop()
	m.setState(c, Established)
	m.emit(m.event(c, EventEstablished))
	return nil
}

// Established tells the machine that the passive side's QP received
// its first packet before the RTU did (the communication-established
// event, §12.9.5.2): a REP_SENT or MRA_REP_RCVD connection is then
// ESTABLISHED. In any other state it does nothing.
func (m *Machine) Established(now Time, id ID) {
	c := m.conns[id]
	if c == nil || c.active || (c.state != RepSent && c.state != MRARepRcvd) {
		return
	}
	c.timer.stop()
	m.setState(c, Established)
	m.emit(m.event(c, EventEstablished))
}

// Disconnect releases a connection (§12.9.5.3). ESTABLISHED: a DREQ
// goes out, retransmitted until the DREP arrives or the retries run out
// (then EventDisconnected). DREQ_RCVD: the DREP goes out. Before
// establishment it abandons the attempt: a REJ (timeout for our own
// REQ, as the kernel's CM sends when a connecting ID is destroyed;
// consumer reject otherwise). TIMEWAIT and DREQ_SENT: nothing more to do.
func (m *Machine) Disconnect(now Time, id ID, priv []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("disconnect %#x: %w", uint32(id), ErrNoConn)
	}
	switch c.state {
	case Established:
		f := mad.DREQFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN()}
		if err := putPrivate(f.PrivateData[:], priv); err != nil {
			return fmt.Errorf("disconnect %#x: %w", uint32(id), err)
		}
		m.send(c, mad.AttrDREQ, c.tid, &f)
		m.setState(c, DREQSent)
		c.retries = int(c.req.MaxCMRetries)
		c.timer.set(now + m.respTimeout(c.peerTimeoutCode()))
	case DREQRcvd:
		f := mad.DREPFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID}
		if err := putPrivate(f.PrivateData[:], priv); err != nil {
			return fmt.Errorf("disconnect %#x: %w", uint32(id), err)
		}
		m.send(c, mad.AttrDREP, c.dreqTID, &f)
		m.enterTimeWait(now, c)
	case ReqSent, MRAReqRcvd:
		m.sendTimeoutREJ(c, mad.MsgOther)
		m.remove(c)
	case ReqRcvd, MRAReqSent, RepRcvd, MRARepSent:
		return m.Reject(now, id, mad.RejConsumer, nil, priv)
	case RepSent, MRARepRcvd:
		f := mad.REJFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, MessageRejected: mad.MsgOther,
			Reason: mad.RejConsumer}
		if err := putPrivate(f.PrivateData[:], priv); err != nil {
			return fmt.Errorf("disconnect %#x: %w", uint32(id), err)
		}
		m.send(c, mad.AttrREJ, c.tid, &f)
		m.enterTimeWait(now, c)
	}
	return nil
}

// sendTimeoutREJ sends a REJ "timeout" with our CA GUID as its ARI
// (§12.6.7, reason 4).
func (m *Machine) sendTimeoutREJ(c *conn, ref mad.MsgRef) {
	f := mad.REJFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, MessageRejected: ref,
		Reason: mad.RejTimeout, RejectInfoLength: 8}
	be.PutUint64(f.ARI[:], m.cfg.CAGUID)
	m.send(c, mad.AttrREJ, c.tid, &f)
}

// Tick runs the timers due at now: retransmissions, MRAs for slow
// applications, timeouts and the end of TIMEWAIT.
func (m *Machine) Tick(now Time) {
	for _, c := range m.conns {
		if c.timer.expired(now) {
			m.expire(now, c)
		}
	}
	for _, s := range m.sidrs {
		if s.timer.expired(now) {
			m.expireSIDR(now, s)
		}
	}
}

// expire handles c's timer (§12.9.5's timeouts).
func (m *Machine) expire(now Time, c *conn) {
	c.timer.stop()
	switch c.state {
	case ReqSent, MRAReqRcvd, RepSent, MRARepRcvd, DREQSent:
		if c.retries > 0 {
			// An MRA only lengthened the wait: resend, as on a plain timeout.
			c.retries--
			switch c.state {
			case MRAReqRcvd:
				m.setState(c, ReqSent)
			case MRARepRcvd:
				m.setState(c, RepSent)
			}
			m.resend(c)
			c.timer.set(now + m.respTimeout(c.peerTimeoutCode()))
			return
		}
		m.ctr.Timeouts++
		switch c.state {
		case DREQSent:
			e := m.event(c, EventDisconnected)
			e.Reason = mad.RejTimeout
			if c.reason != 0 {
				e.Reason = c.reason
			}
			m.emit(e)
			m.enterTimeWait(now, c)
		case ReqSent, MRAReqRcvd:
			m.sendTimeoutREJ(c, mad.MsgOther)
			e := m.event(c, EventTimeout)
			e.Reason = mad.RejTimeout
			m.emit(e)
			m.remove(c)
		default: // the RTU never came
			m.sendTimeoutREJ(c, mad.MsgOther)
			e := m.event(c, EventTimeout)
			e.Reason = mad.RejTimeout
			m.emit(e)
			m.enterTimeWait(now, c)
		}
	case ReqRcvd, RepRcvd:
		// The application is slow: tell the peer to wait (§12.6.6).
		ref := mad.MsgREQ
		next := MRAReqSent
		if c.active {
			ref, next = mad.MsgREP, MRARepSent
		}
		f := mad.MRAFields{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, MessageMRAed: ref,
			ServiceTimeout: m.cfg.ServiceTimeout}
		m.send(c, mad.AttrMRA, c.tid, &f)
		m.setState(c, next)
		c.timer.set(now + mad.Timeout(m.cfg.ServiceTimeout))
	case MRAReqSent, MRARepSent:
		// The application did not answer within the time the MRA asked for.
		m.ctr.Timeouts++
		ref := mad.MsgREQ
		if c.active {
			ref = mad.MsgREP
		}
		m.sendTimeoutREJ(c, ref)
		e := m.event(c, EventTimeout)
		e.Reason = mad.RejTimeout
		m.emit(e)
		m.enterTimeWait(now, c)
	case TimeWait:
		m.remove(c)
	}
}
