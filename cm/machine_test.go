package cm

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/mad"
)

var (
	ipA = netip.MustParseAddr("192.0.2.2")
	ipB = netip.MustParseAddr("192.0.2.1")
	sid = mad.MakeServiceID(mad.PortSpaceTCP, 7174)
)

const respCode = 14 // 67 ms

var respTime = mad.Timeout(respCode)

func testREQ(qpn uint32) mad.REQFields {
	return mad.REQFields{ServiceID: sid, LocalQPN: qpn, ResponderResources: 2, InitiatorDepth: 3,
		RemoteCMResponseTimeout: respCode, LocalCMResponseTimeout: respCode, StartingPSN: 0x51912,
		RetryCount: 7, PKey: 0xffff, PathMTU: mad.MTU1024, RNRRetryCount: 6, MaxCMRetries: 3,
		Primary: mad.PathFields{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: ipA, RemoteGID: ipB,
			HopLimit: 64, LocalACKTimeout: 19}}
}

// pair is two machines, A at ipA and B at ipB, and the wire between
// them, on a fake clock. drop, when set, decides the fate of each MAD.
type pair struct {
	t      *testing.T
	now    Time
	a, b   *Machine
	drop   func(fromA bool, s Send) bool
	evA    []Event
	evB    []Event
	sentA  []Send // everything A sent, dropped or not
	sentB  []Send
	noPump bool
}

func newPair(t *testing.T) *pair {
	p := &pair{t: t, now: time.Second,
		a: New(Config{CAGUID: 0xa, Rand: rand.New(rand.NewPCG(1, 2))}),
		b: New(Config{CAGUID: 0xb, Rand: rand.New(rand.NewPCG(3, 4))})}
	if err := p.b.Listen(sid); err != nil {
		t.Fatal(err)
	}
	return p
}

// pump moves MADs between the machines until none is left.
func (p *pair) pump() {
	p.t.Helper()
	for i := 0; i < 1000; i++ {
		sa, sb := p.a.Sends(nil), p.b.Sends(nil)
		p.evA, p.evB = p.a.Events(p.evA), p.b.Events(p.evB)
		if len(sa) == 0 && len(sb) == 0 {
			checkInvariants(p.t, p.a)
			checkInvariants(p.t, p.b)
			return
		}
		p.sentA, p.sentB = append(p.sentA, sa...), append(p.sentB, sb...)
		for _, s := range sa {
			if s.To != ipB {
				p.t.Fatalf("a sent to %v", s.To)
			}
			if p.drop == nil || !p.drop(true, s) {
				p.b.Receive(p.now, ipA, s.MAD[:])
			}
		}
		for _, s := range sb {
			if s.To != ipA {
				p.t.Fatalf("b sent to %v", s.To)
			}
			if p.drop == nil || !p.drop(false, s) {
				p.a.Receive(p.now, netip.AddrFrom16(ipB.As16()), s.MAD[:]) // mapped form: unmapped inside
			}
		}
	}
	p.t.Fatal("mads keep flowing")
}

// advance moves the clock to the machines' next deadline (at most by
// max), ticks both and pumps. It reports whether a deadline was due.
func (p *pair) advance(max time.Duration) bool {
	p.t.Helper()
	next := p.now + max
	due := false
	for _, m := range []*Machine{p.a, p.b} {
		if d, ok := m.Deadline(); ok && d <= next {
			next, due = d, true
		}
	}
	if next > p.now {
		p.now = next
	}
	p.a.Tick(p.now)
	p.b.Tick(p.now)
	p.pump()
	return due
}

// until advances until cond holds.
func (p *pair) until(cond func() bool) {
	p.t.Helper()
	for i := 0; i < 10000; i++ {
		if cond() {
			return
		}
		if !p.advance(time.Hour) {
			if cond() {
				return
			}
			p.t.Fatalf("nothing due and condition false at %v (a %v, b %v)", p.now, p.evA, p.evB)
		}
	}
	p.t.Fatal("condition never met")
}

func (p *pair) connect(qpn uint32) ID {
	p.t.Helper()
	id, err := p.a.Connect(p.now, ipB, testREQ(qpn))
	if err != nil {
		p.t.Fatal(err)
	}
	p.pump()
	return id
}

func count(evs []Event, t EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == t {
			n++
		}
	}
	return n
}

func find(t *testing.T, evs []Event, typ EventType) Event {
	t.Helper()
	for _, e := range evs {
		if e.Type == typ {
			return e
		}
	}
	t.Fatalf("no %v event in %v", typ, evs)
	return Event{}
}

func countAttr(ss []Send, a mad.AttrID) int {
	n := 0
	for _, s := range ss {
		if mad.MAD(s.MAD[:]).AttrID() == a {
			n++
		}
	}
	return n
}

// checkInvariants checks the machine's indexes against its connections.
func checkInvariants(t testing.TB, m *Machine) {
	t.Helper()
	pending := 0
	for id, c := range m.conns {
		if c.id != id || id == 0 || c.state == Idle {
			t.Fatalf("conn %#x: id %#x state %v", uint32(id), uint32(c.id), c.state)
		}
		if c.state == ReqRcvd || c.state == MRAReqSent {
			pending++
		}
		if !c.timer.armed && c.state != Established && c.state != DREQRcvd && c.state != MRARepSent {
			t.Fatalf("conn %#x in %v with no timer", uint32(id), c.state)
		}
	}
	if pending != m.pending {
		t.Fatalf("pending %d, counted %d", m.pending, pending)
	}
	if len(m.conns) > m.cfg.MaxConns || m.pending > m.cfg.MaxPending {
		t.Fatalf("%d conns, %d pending: over the bounds", len(m.conns), m.pending)
	}
	for k, c := range m.byRemote {
		if m.conns[c.id] != c || c.remoteID != k.id || c.peer != k.peer {
			t.Fatalf("byRemote %v: stale entry", k)
		}
	}
	for k, c := range m.byQPN {
		if m.conns[c.id] != c || c.state == TimeWait {
			t.Fatalf("byQPN %v: stale entry (%v)", k, c.state)
		}
	}
	for id, x := range m.sidrs {
		if x.id != id || !x.timer.armed {
			t.Fatalf("sidr %#x: id %#x, timer %v", uint32(id), uint32(x.id), x.timer.armed)
		}
	}
	for k, x := range m.sidrByRemote {
		if m.sidrs[x.id] != x || x.active || x.reqID != k.id || x.peer != k.peer {
			t.Fatalf("sidrByRemote %v: stale entry", k)
		}
	}
	if _, ok := m.Deadline(); ok != hasTimer(m) {
		t.Fatal("deadline does not match the timers")
	}
}

func hasTimer(m *Machine) bool {
	for _, c := range m.conns {
		if c.timer.armed {
			return true
		}
	}
	for _, x := range m.sidrs {
		if x.timer.armed {
			return true
		}
	}
	return false
}

// establish runs a whole handshake and returns both IDs.
func (p *pair) establish(qpn uint32) (ID, ID) {
	p.t.Helper()
	ida := p.connect(qpn)
	req := find(p.t, p.evB, EventRequest)
	rep := Answer(req.REQ, 0x22, 0x34557d, 8, 8, 5, 3)
	if err := p.b.Accept(p.now, req.ID, rep); err != nil {
		p.t.Fatal(err)
	}
	p.pump()
	find(p.t, p.evA, EventReply)
	if err := p.a.ReadyToUse(p.now, ida, nil); err != nil {
		p.t.Fatal(err)
	}
	p.pump()
	if p.a.State(ida) != Established || p.b.State(req.ID) != Established {
		p.t.Fatalf("states %v %v", p.a.State(ida), p.b.State(req.ID))
	}
	return ida, req.ID
}

func TestConnectDisconnect(t *testing.T) {
	p := newPair(t)
	ida := p.connect(0x11)
	if p.a.State(ida) != ReqSent {
		t.Fatalf("a in %v", p.a.State(ida))
	}
	req := find(t, p.evB, EventRequest)
	if req.Peer != ipA || req.ServiceID != sid || req.REQ.LocalQPN != 0x11 || req.REQ.LocalCommID != uint32(ida) ||
		len(req.PrivateData) != mad.REQPrivateLen || p.b.State(req.ID) != ReqRcvd {
		t.Fatalf("request %+v, b in %v", req, p.b.State(req.ID))
	}
	rep := Answer(req.REQ, 0x22, 0x34557d, 8, 8, 5, 3)
	if rep.ResponderResources != 3 || rep.InitiatorDepth != 2 {
		t.Errorf("answer did not trim the read resources: %+v", rep)
	}
	copy(rep.PrivateData[:], "hello")
	if err := p.b.Accept(p.now, req.ID, rep); err != nil {
		t.Fatal(err)
	}
	if err := p.b.Accept(p.now, req.ID, rep); err == nil {
		t.Error("accepted twice")
	}
	p.pump()
	if p.b.State(req.ID) != RepSent || p.a.State(ida) != RepRcvd {
		t.Fatalf("states %v %v", p.a.State(ida), p.b.State(req.ID))
	}
	reply := find(t, p.evA, EventReply)
	if !bytes.HasPrefix(reply.PrivateData, []byte("hello")) || reply.REP.LocalCommID != uint32(req.ID) {
		t.Fatalf("reply %+v", reply)
	}
	// The QP attributes pair up.
	qa, qb := QPAttrsFor(true, reply.REQ, reply.REP), QPAttrsFor(false, req.REQ, &rep)
	if qa.DestQPN != 0x22 || qb.DestQPN != 0x11 || qa.SQPSN != qb.RQPSN || qa.RQPSN != qb.SQPSN ||
		qa.SQPSN != 0x34557d || qb.SQPSN != 0x51912 || qa.MaxRdAtomic != qb.MaxDestRdAtomic ||
		qb.MaxRdAtomic != qa.MaxDestRdAtomic || qa.RNRRetry != 5 || qb.RNRRetry != 6 ||
		qa.PathMTU != mad.MTU1024 || qa.Timeout != 19 || qa.RetryCnt != 7 || qa.PKey != 0xffff {
		t.Fatalf("attrs active %+v passive %+v", qa, qb)
	}
	if err := p.a.ReadyToUse(p.now, ida, nil); err != nil {
		t.Fatal(err)
	}
	p.pump()
	if count(p.evA, EventEstablished) != 1 || count(p.evB, EventEstablished) != 1 {
		t.Fatalf("established events: a %v b %v", p.evA, p.evB)
	}
	// Disconnect from the passive side this time.
	if err := p.b.Disconnect(p.now, req.ID, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	p.pump()
	dr := find(t, p.evA, EventDisconnectRequest)
	if !bytes.HasPrefix(dr.PrivateData, []byte("bye")) || p.a.State(ida) != DREQRcvd {
		t.Fatalf("disconnect request %+v, a in %v", dr, p.a.State(ida))
	}
	if err := p.a.Disconnect(p.now, ida, nil); err != nil {
		t.Fatal(err)
	}
	p.pump()
	if p.a.State(ida) != TimeWait || p.b.State(req.ID) != TimeWait || count(p.evB, EventDisconnected) != 1 ||
		count(p.evA, EventDisconnected) != 0 {
		t.Fatalf("after release: %v %v, events a %v b %v", p.a.State(ida), p.b.State(req.ID), p.evA, p.evB)
	}
	p.until(func() bool { return p.a.Len() == 0 && p.b.Len() == 0 })
	// Transaction IDs: all of the exchange uses the REQ's, the DREP the DREQ's.
	tid := mad.MAD(p.sentA[0].MAD[:]).TID()
	for _, s := range append(p.sentA, p.sentB...) {
		if got := mad.MAD(s.MAD[:]).TID(); got != tid {
			t.Errorf("%v with tid %#x, want %#x", mad.MAD(s.MAD[:]).AttrID(), got, tid)
		}
	}
	if c := p.a.Counters(); c.Resent != 0 || c.UnknownConn != 0 || c.Duplicates != 0 {
		t.Errorf("counters %+v", c)
	}
}

// TestNoListener: a REQ for a service ID nobody listens to gets the
// REJ rdma_rxe sends (rping.pcap frame 4): local comm ID 0, the REQ's
// as remote, message REQ, reason 8, the REQ's TID.
func TestNoListener(t *testing.T) {
	p := newPair(t)
	p.b.Unlisten(sid)
	ida := p.connect(0x11)
	if len(p.sentB) != 1 {
		t.Fatalf("b sent %d mads", len(p.sentB))
	}
	m := mad.MAD(p.sentB[0].MAD[:])
	r := mad.REJ(m.Data())
	if m.AttrID() != mad.AttrREJ || m.TID() != mad.MAD(p.sentA[0].MAD[:]).TID() || r.LocalCommID() != 0 ||
		r.RemoteCommID() != uint32(ida) || r.MessageRejected() != mad.MsgREQ || r.Reason() != mad.RejInvalidServiceID {
		t.Fatalf("rej %+v", r.Fields())
	}
	e := find(t, p.evA, EventRejected)
	if e.Reason != mad.RejInvalidServiceID || p.a.Len() != 0 || p.b.Len() != 0 || p.b.Counters().NoListener != 1 {
		t.Fatalf("event %+v, %d/%d conns", e, p.a.Len(), p.b.Len())
	}
}

func TestConsumerReject(t *testing.T) {
	p := newPair(t)
	ida := p.connect(0x11)
	req := find(t, p.evB, EventRequest)
	if err := p.b.Reject(p.now, req.ID, mad.RejConsumer, nil, make([]byte, mad.REJPrivateLen+1)); err == nil {
		t.Error("too much private data accepted")
	}
	if err := p.b.Reject(p.now, req.ID, mad.RejConsumer, nil, []byte("go away")); err != nil {
		t.Fatal(err)
	}
	// The REJ is lost: the REQ comes again and gets the same REJ, and
	// the application is not asked twice.
	p.drop = func(fromA bool, s Send) bool { return !fromA && countAttr(p.sentB, mad.AttrREJ) == 1 }
	p.pump()
	p.drop = nil
	p.until(func() bool { return len(p.evA) > 0 })
	e := find(t, p.evA, EventRejected)
	if e.Reason != mad.RejConsumer || !bytes.HasPrefix(e.PrivateData, []byte("go away")) || p.a.State(ida) != Idle {
		t.Fatalf("event %+v, a in %v", e, p.a.State(ida))
	}
	if count(p.evB, EventRequest) != 1 || countAttr(p.sentA, mad.AttrREQ) != 2 || countAttr(p.sentB, mad.AttrREJ) != 2 {
		t.Fatalf("b events %v; %d REQs, %d REJs", p.evB, countAttr(p.sentA, mad.AttrREQ), countAttr(p.sentB, mad.AttrREJ))
	}
}

// TestLostREQ: the first REQ is lost; the second, one response timeout
// later, makes the connection.
func TestLostREQ(t *testing.T) {
	p := newPair(t)
	p.drop = func(fromA bool, s Send) bool { return fromA && len(p.sentA) == 1 }
	t0 := p.now
	p.connect(0x11)
	p.until(func() bool { return len(p.evB) > 0 })
	if p.now-t0 != respTime || count(p.evB, EventRequest) != 1 {
		t.Fatalf("request after %v (want %v): %v", p.now-t0, respTime, p.evB)
	}
}

// lossy runs a handshake and a release with MADs lost by drop and
// checks that each side sees each event exactly once.
func lossy(t *testing.T, drop func(p *pair, fromA bool, s Send) bool) *pair {
	p := newPair(t)
	p.drop = func(fromA bool, s Send) bool { return drop(p, fromA, s) }
	ida := p.connect(0x11)
	p.until(func() bool { return count(p.evB, EventRequest) > 0 })
	req := find(t, p.evB, EventRequest)
	if err := p.b.Accept(p.now, req.ID, Answer(req.REQ, 0x22, 7, 1, 1, 7, 0)); err != nil {
		t.Fatal(err)
	}
	p.pump()
	p.until(func() bool { return count(p.evA, EventReply) > 0 })
	if err := p.a.ReadyToUse(p.now, ida, nil); err != nil {
		t.Fatal(err)
	}
	p.pump()
	p.until(func() bool { return count(p.evB, EventEstablished) > 0 })
	if err := p.a.Disconnect(p.now, ida, nil); err != nil {
		t.Fatal(err)
	}
	p.pump()
	p.until(func() bool { return count(p.evB, EventDisconnectRequest) > 0 })
	if err := p.b.Disconnect(p.now, req.ID, nil); err != nil {
		t.Fatal(err)
	}
	p.pump()
	p.until(func() bool { return p.a.Len() == 0 && p.b.Len() == 0 })
	for _, typ := range []EventType{EventRequest, EventEstablished, EventDisconnectRequest} {
		if count(p.evB, typ) != 1 {
			t.Errorf("b: %d %v events: %v", count(p.evB, typ), typ, p.evB)
		}
	}
	for _, typ := range []EventType{EventReply, EventEstablished, EventDisconnected} {
		if count(p.evA, typ) != 1 {
			t.Errorf("a: %d %v events: %v", count(p.evA, typ), typ, p.evA)
		}
	}
	if len(p.evA) != 3 || len(p.evB) != 3 {
		t.Errorf("events a %v b %v", p.evA, p.evB)
	}
	return p
}

// The first message of a kind from a side is lost.
func firstLost(attr mad.AttrID, fromA bool) func(p *pair, a bool, s Send) bool {
	return func(p *pair, a bool, s Send) bool {
		sent := p.sentB
		if a {
			sent = p.sentA
		}
		return a == fromA && mad.MAD(s.MAD[:]).AttrID() == attr && countAttr(sent, attr) == 1
	}
}

// TestLostREP: the passive side resends the REP on its timer; a
// duplicate REQ meanwhile is answered with the REP, not a new request.
func TestLostREP(t *testing.T) {
	p := lossy(t, firstLost(mad.AttrREP, false))
	if countAttr(p.sentB, mad.AttrREP) < 2 { // the timer's, and the answer to the REQ resent at the same time
		t.Errorf("%d REPs", countAttr(p.sentB, mad.AttrREP))
	}
}

// TestLostRTU: the passive side resends the REP; the established active
// side answers it with the RTU again.
func TestLostRTU(t *testing.T) {
	p := lossy(t, firstLost(mad.AttrRTU, true))
	if countAttr(p.sentA, mad.AttrRTU) != 2 || countAttr(p.sentB, mad.AttrREP) != 2 || p.a.Counters().Duplicates != 1 {
		t.Errorf("%d RTUs, %d REPs, counters %+v", countAttr(p.sentA, mad.AttrRTU), countAttr(p.sentB, mad.AttrREP), p.a.Counters())
	}
}

// TestLostDREP: the DREQ is resent and answered from TIMEWAIT.
func TestLostDREP(t *testing.T) {
	p := lossy(t, firstLost(mad.AttrDREP, false))
	if countAttr(p.sentA, mad.AttrDREQ) != 2 || countAttr(p.sentB, mad.AttrDREP) != 2 {
		t.Errorf("%d DREQs, %d DREPs", countAttr(p.sentA, mad.AttrDREQ), countAttr(p.sentB, mad.AttrDREP))
	}
}

func TestLostDREQ(t *testing.T) { lossy(t, firstLost(mad.AttrDREQ, true)) }

// TestDuplicates: every message delivered twice changes nothing.
func TestDuplicates(t *testing.T) {
	p := newPair(t)
	dup := func(m *Machine, from netip.Addr, ss []Send) {
		for _, s := range ss {
			m.Receive(p.now, from, s.MAD[:])
		}
	}
	ida := p.connect(0x11)
	dup(p.b, ipA, p.sentA) // REQ again
	req := find(t, p.evB, EventRequest)
	p.b.Accept(p.now, req.ID, Answer(req.REQ, 0x22, 7, 1, 1, 7, 0))
	p.pump()
	dup(p.a, ipB, p.sentB) // REP again, in REP_RCVD: ignored
	p.a.ReadyToUse(p.now, ida, nil)
	p.pump()
	dup(p.b, ipA, p.sentA) // REQ and RTU again
	dup(p.a, ipB, p.sentB) // REP again, in ESTABLISHED: the RTU again
	p.pump()
	p.a.Disconnect(p.now, ida, nil)
	p.pump()
	p.b.Disconnect(p.now, req.ID, nil)
	p.pump()
	dup(p.b, ipA, p.sentA)
	dup(p.a, ipB, p.sentB)
	p.pump()
	p.evA, p.evB = p.a.Events(p.evA), p.b.Events(p.evB)
	if len(p.evA) != 3 || len(p.evB) != 3 || count(p.evB, EventRequest) != 1 {
		t.Fatalf("events a %v b %v", p.evA, p.evB)
	}
	if p.a.State(ida) != TimeWait || p.b.State(req.ID) != TimeWait {
		t.Fatalf("states %v %v", p.a.State(ida), p.b.State(req.ID))
	}
}

// TestREQTimeout: nobody answers; the REQ is sent 1 + MaxCMRetries
// times, a response timeout apart, then the connection times out.
func TestREQTimeout(t *testing.T) {
	p := newPair(t)
	p.drop = func(bool, Send) bool { return true }
	t0 := p.now
	ida := p.connect(0x11)
	p.until(func() bool { return len(p.evA) > 0 })
	e := find(t, p.evA, EventTimeout)
	if e.ID != ida || e.Reason != mad.RejTimeout || p.now-t0 != 4*respTime || countAttr(p.sentA, mad.AttrREQ) != 4 ||
		countAttr(p.sentA, mad.AttrREJ) != 1 || p.a.Len() != 0 {
		t.Fatalf("event %+v after %v; %d REQs", e, p.now-t0, countAttr(p.sentA, mad.AttrREQ))
	}
}

// TestRTUTimeout: the active side dies after the REQ; the passive side
// resends its REP and gives up with a REJ timeout.
func TestRTUTimeout(t *testing.T) {
	p := newPair(t)
	p.connect(0x11)
	p.drop = func(bool, Send) bool { return true }
	req := find(t, p.evB, EventRequest)
	p.b.Accept(p.now, req.ID, Answer(req.REQ, 0x22, 7, 1, 1, 7, 0))
	p.pump()
	p.until(func() bool { return count(p.evB, EventTimeout) > 0 })
	if countAttr(p.sentB, mad.AttrREP) != 4 || p.b.State(req.ID) != TimeWait {
		t.Fatalf("%d REPs, b in %v", countAttr(p.sentB, mad.AttrREP), p.b.State(req.ID))
	}
	r := mad.REJ(mad.MAD(p.sentB[len(p.sentB)-1].MAD[:]).Data())
	if r.Reason() != mad.RejTimeout || r.RejectInfoLength() != 8 || be.Uint64(r.ARI()) != 0xb {
		t.Fatalf("rej %+v", r.Fields())
	}
}

// TestDREQTimeout: the peer vanished; the DREQ is retried, then the
// connection is released anyway.
func TestDREQTimeout(t *testing.T) {
	p := newPair(t)
	ida, _ := p.establish(0x11)
	p.drop = func(bool, Send) bool { return true }
	p.a.Disconnect(p.now, ida, nil)
	p.pump()
	p.until(func() bool { return count(p.evA, EventDisconnected) > 0 })
	e := find(t, p.evA, EventDisconnected)
	if e.Reason != mad.RejTimeout || countAttr(p.sentA, mad.AttrDREQ) != 4 || p.a.State(ida) != TimeWait {
		t.Fatalf("event %+v, %d DREQs", e, countAttr(p.sentA, mad.AttrDREQ))
	}
}

// TestSimultaneousDisconnect: both sides send a DREQ at once.
func TestSimultaneousDisconnect(t *testing.T) {
	p := newPair(t)
	ida, idb := p.establish(0x11)
	p.a.Disconnect(p.now, ida, nil)
	p.b.Disconnect(p.now, idb, nil)
	p.pump()
	if p.a.State(ida) != TimeWait || p.b.State(idb) != TimeWait ||
		count(p.evA, EventDisconnected) != 1 || count(p.evB, EventDisconnected) != 1 {
		t.Fatalf("states %v %v, events a %v b %v", p.a.State(ida), p.b.State(idb), p.evA, p.evB)
	}
}

// TestMRAForSlowAccept: the application sits on a request; at half the
// active side's response timeout an MRA goes out, and the active side
// waits without resending its REQ; the late accept then connects.
func TestMRAForSlowAccept(t *testing.T) {
	p := newPair(t)
	p.connect(0x11)
	req := find(t, p.evB, EventRequest)
	p.advance(respTime) // to the MRA
	if p.b.State(req.ID) != MRAReqSent || p.a.State(ID(req.REQ.LocalCommID)) != MRAReqRcvd {
		t.Fatalf("states %v %v", p.a.State(ID(req.REQ.LocalCommID)), p.b.State(req.ID))
	}
	m := mad.MRA(mad.MAD(p.sentB[len(p.sentB)-1].MAD[:]).Data())
	if m.MessageMRAed() != mad.MsgREQ || m.ServiceTimeout() != 21 {
		t.Fatalf("mra %+v", m.Fields())
	}
	p.now += 2 * time.Second
	p.a.Tick(p.now)
	p.b.Tick(p.now)
	p.pump()
	if countAttr(p.sentA, mad.AttrREQ) != 1 {
		t.Fatalf("REQ resent during the MRA's wait")
	}
	p.b.Accept(p.now, req.ID, Answer(req.REQ, 0x22, 7, 1, 1, 7, 0))
	p.pump()
	find(t, p.evA, EventReply)
}

// TestSlowAcceptTimesOut: the application never answers; after the
// MRA's service timeout the request is rejected with "timeout".
func TestSlowAcceptTimesOut(t *testing.T) {
	p := newPair(t)
	p.b = New(Config{CAGUID: 0xb, ServiceTimeout: 16, Rand: rand.New(rand.NewPCG(3, 4))})
	p.b.Listen(sid)
	ida := p.connect(0x11)
	p.until(func() bool { return len(p.evA) > 0 })
	e := find(t, p.evA, EventRejected)
	if e.Reason != mad.RejTimeout || count(p.evB, EventTimeout) != 1 || p.a.State(ida) != Idle {
		t.Fatalf("a %v b %v", p.evA, p.evB)
	}
}

// TestMRAForSlowRTU: the active application is slow with its QP; an MRA
// for the REP keeps the passive side from resending it.
func TestMRAForSlowRTU(t *testing.T) {
	p := newPair(t)
	ida := p.connect(0x11)
	req := find(t, p.evB, EventRequest)
	p.b.Accept(p.now, req.ID, Answer(req.REQ, 0x22, 7, 1, 1, 7, 0))
	p.pump()
	p.advance(respTime)
	if p.a.State(ida) != MRARepSent || p.b.State(req.ID) != MRARepRcvd {
		t.Fatalf("states %v %v", p.a.State(ida), p.b.State(req.ID))
	}
	p.now += time.Second
	p.a.Tick(p.now)
	p.b.Tick(p.now)
	p.pump()
	p.a.ReadyToUse(p.now, ida, nil)
	p.pump()
	if countAttr(p.sentB, mad.AttrREP) != 1 || count(p.evB, EventEstablished) != 1 {
		t.Fatalf("%d REPs; b %v", countAttr(p.sentB, mad.AttrREP), p.evB)
	}
}

// TestStaleConnection: a REQ from a QP that still has a connection is
// rejected as stale, and the old connection is released.
func TestStaleConnection(t *testing.T) {
	p := newPair(t)
	_, idb := p.establish(0x11)
	// The active side "reboots": a fresh machine, the same QPN.
	old := p.a
	p.a = New(Config{CAGUID: 0xa, Rand: rand.New(rand.NewPCG(9, 9))})
	p.evA = nil
	ida := p.connect(0x11)
	e := find(t, p.evA, EventRejected)
	// The rebooted side answered the old connection's DREQ statelessly.
	if e.ID != ida || e.Reason != mad.RejStaleConnection || p.b.Counters().Stale != 1 || p.b.State(idb) != TimeWait ||
		countAttr(p.sentB, mad.AttrDREQ) != 1 || p.a.Counters().UnknownConn != 1 {
		t.Fatalf("event %+v; old b conn in %v", e, p.b.State(idb))
	}
	if d := find(t, p.evB, EventDisconnected); d.ID != idb || d.Reason != mad.RejStaleConnection {
		t.Fatalf("old connection's event %+v", d)
	}
	_ = old
	// A new REQ now goes through.
	p.evB = nil
	p.connect(0x11)
	find(t, p.evB, EventRequest)
}

// TestREQFlood: a peer sending REQs with fresh comm IDs fills the
// pending bound and no more.
func TestREQFlood(t *testing.T) {
	m := New(Config{MaxPending: 8, Rand: rand.New(rand.NewPCG(1, 1))})
	m.Listen(sid)
	var b [mad.Len]byte
	for i := uint32(1); i <= 100; i++ {
		r := testREQ(i)
		r.LocalCommID = i
		b = build(mad.AttrREQ, uint64(i), &r)
		m.Receive(time.Second, ipA, b[:])
	}
	checkInvariants(t, m)
	sends := m.Sends(nil)
	if m.Len() != 8 || m.Counters().Refused != 92 || len(sends) != 92 ||
		mad.REJ(mad.MAD(sends[0].MAD[:]).Data()).Reason() != mad.RejNoResources {
		t.Fatalf("%d conns, counters %+v, %d sends", m.Len(), m.Counters(), len(sends))
	}
	// Unanswered, they time out and leave.
	for now := time.Second; m.Len() > 0; {
		d, ok := m.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		now = d
		m.Tick(now)
	}
}

// TestUnknownDREQ: a DREQ for no connection gets a DREP.
func TestUnknownDREQ(t *testing.T) {
	m := New(Config{})
	f := mad.DREQFields{LocalCommID: 5, RemoteCommID: 6}
	b := build(mad.AttrDREQ, 77, &f)
	m.Receive(0, ipA, b[:])
	s := m.Sends(nil)
	if len(s) != 1 {
		t.Fatalf("%d sends", len(s))
	}
	md := mad.MAD(s[0].MAD[:])
	d := mad.DREP(md.Data())
	if md.AttrID() != mad.AttrDREP || md.TID() != 77 || d.LocalCommID() != 6 || d.RemoteCommID() != 5 || m.Len() != 0 {
		t.Fatalf("drep %+v", d.Fields())
	}
}

// TestRandomLoss: many connections, each MAD lost with 20% probability
// in each direction: every connection comes up and goes down exactly
// once on each side.
func TestRandomLoss(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 7))
		p := newPair(t)
		p.drop = func(bool, Send) bool { return rnd.Float64() < 0.2 }
		ida := p.connect(0x11)
		for p.a.State(ida) != Idle || p.a.Len() > 0 || p.b.Len() > 0 {
			for _, e := range p.b.Events(nil) {
				p.evB = append(p.evB, e)
				switch e.Type {
				case EventRequest:
					p.b.Accept(p.now, e.ID, Answer(e.REQ, 0x22, 7, 1, 1, 7, 0))
				case EventDisconnectRequest:
					p.b.Disconnect(p.now, e.ID, nil)
				}
			}
			for _, e := range p.a.Events(nil) {
				p.evA = append(p.evA, e)
				switch e.Type {
				case EventReply:
					p.a.ReadyToUse(p.now, e.ID, nil)
				case EventEstablished:
					p.a.Disconnect(p.now, e.ID, nil)
				}
			}
			p.pump()
			if len(p.a.events) == 0 && len(p.b.events) == 0 && !p.advance(time.Hour) {
				break
			}
		}
		// Either it all worked, or the active side timed out (all its
		// retries lost, which 20% loss makes rare but possible).
		if count(p.evA, EventTimeout) > 0 || count(p.evA, EventRejected) > 0 {
			if count(p.evA, EventEstablished) != 0 {
				t.Errorf("seed %d: timed out and established: %v", seed, p.evA)
			}
			continue
		}
		if count(p.evA, EventEstablished) != 1 || count(p.evB, EventRequest) != 1 || count(p.evA, EventDisconnected) != 1 {
			t.Errorf("seed %d: a %v b %v", seed, p.evA, p.evB)
		}
		if n := count(p.evB, EventEstablished); n > 1 {
			t.Errorf("seed %d: b established %d times", seed, n)
		}
	}
}

func TestPrivateDataBounds(t *testing.T) {
	p := newPair(t)
	ida, idb := p.establish(0x11)
	if err := p.a.Disconnect(p.now, ida, make([]byte, mad.DREQPrivateLen+1)); err == nil {
		t.Error("long DREQ private data accepted")
	}
	if err := p.b.Accept(p.now, idb, mad.REPFields{}); err == nil {
		t.Error("accept in ESTABLISHED")
	}
	if err := p.a.ReadyToUse(p.now, 12345, nil); err == nil {
		t.Error("rtu for no connection")
	}
}
