package cm

import (
	"strconv"
	"time"
)

// Time is a point on the caller's clock (monotonic, from an arbitrary
// epoch), as in package qp.
type Time = time.Duration

// ID is a connection's local communication ID: random, non-zero and
// unique among the machine's connections (IBTA §12.6.2).
type ID uint32

// State is a connection's CM state (IBTA §12.9.5, the communication
// state diagrams; LISTEN is a Machine's listener, not a connection's).
type State uint8

// Connection states. Active side: IDLE → REQ_SENT (→ MRA_REQ_RCVD) →
// REP_RCVD (→ MRA_REP_SENT) → ESTABLISHED. Passive side: REQ_RCVD (→
// MRA_REQ_SENT) → REP_SENT (→ MRA_REP_RCVD) → ESTABLISHED. Release:
// ESTABLISHED → DREQ_SENT or DREQ_RCVD → TIMEWAIT → IDLE.
const (
	Idle State = iota
	ReqSent
	MRAReqRcvd
	RepRcvd
	MRARepSent
	Established
	ReqRcvd
	MRAReqSent
	RepSent
	MRARepRcvd
	DREQSent
	DREQRcvd
	TimeWait
)

var stateNames = [...]string{
	Idle: "IDLE", ReqSent: "REQ_SENT", MRAReqRcvd: "MRA_REQ_RCVD", RepRcvd: "REP_RCVD",
	MRARepSent: "MRA_REP_SENT", Established: "ESTABLISHED", ReqRcvd: "REQ_RCVD",
	MRAReqSent: "MRA_REQ_SENT", RepSent: "REP_SENT", MRARepRcvd: "MRA_REP_RCVD",
	DREQSent: "DREQ_SENT", DREQRcvd: "DREQ_RCVD", TimeWait: "TIMEWAIT",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State_" + strconv.Itoa(int(s))
}

// EventType says what an Event reports.
type EventType uint8

// Events.
const (
	// EventRequest: a REQ for a listened-to service ID (passive). The
	// application answers with Accept or Reject.
	EventRequest EventType = iota + 1
	// EventReply: a REP for our REQ (active). The application moves its
	// QP to RTR and RTS (QPAttrs) and calls ReadyToUse, or Reject.
	EventReply
	// EventEstablished: the connection is up (RTU sent or received).
	EventEstablished
	// EventRejected: the peer sent a REJ before the connection was
	// established; Reason and PrivateData are the REJ's. For a passive
	// connection request it means the active side gave up.
	EventRejected
	// EventTimeout: the peer did not answer within the retries
	// (unreachable), or the application did not answer in time.
	EventTimeout
	// EventDisconnectRequest: the peer sent a DREQ; the application
	// answers with Disconnect (which sends the DREP).
	EventDisconnectRequest
	// EventDisconnected: the connection is gone (DREP received, DREQ
	// retries exhausted, a REJ or a stale connection after it was
	// established); it stays in TIMEWAIT for a while.
	EventDisconnected
	// EventSIDRRequest: a SIDR_REQ for a listened-to service ID
	// (passive); answer with AnswerSIDR.
	EventSIDRRequest
	// EventSIDRReply: the SIDR_REP for our SIDR_REQ (active), whatever
	// its status.
	EventSIDRReply
)

var eventNames = [...]string{
	EventRequest: "request", EventReply: "reply", EventEstablished: "established",
	EventRejected: "rejected", EventTimeout: "timeout",
	EventDisconnectRequest: "disconnect_request", EventDisconnected: "disconnected",
	EventSIDRRequest: "sidr_request", EventSIDRReply: "sidr_reply",
}

func (e EventType) String() string {
	if int(e) < len(eventNames) && eventNames[e] != "" {
		return eventNames[e]
	}
	return "Event_" + strconv.Itoa(int(e))
}

// timer is a deadline that may be unset.
type timer struct {
	armed bool
	due   Time
}

func (t *timer) set(due Time) { *t = timer{armed: true, due: due} }
func (t *timer) stop()        { *t = timer{} }
func (t *timer) expired(now Time) bool {
	return t.armed && now >= t.due
}
