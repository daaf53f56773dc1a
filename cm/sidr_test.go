package cm

import (
	"testing"
	"time"

	"github.com/uroce/uroce/mad"
)

var udSID = mad.MakeServiceID(mad.PortSpaceUDP, 7174)

func sidrPair(t *testing.T) *pair {
	p := newPair(t)
	if err := p.b.Listen(udSID); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pair) resolve(retries int) ID {
	p.t.Helper()
	f := mad.SIDRREQFields{PKey: 0xffff, ServiceID: udSID, PrivateData: [216]byte{0: 0, 1: 0x40, 100: 0x5a}}
	id, err := p.a.ResolveSIDR(p.now, ipB, f, respCode, retries)
	if err != nil {
		p.t.Fatal(err)
	}
	p.pump()
	return id
}

// TestSIDR: a request reaches the listener with its private data; the
// answer reaches the requester with QPN and Q_Key; nothing stays after
// TimeWait.
func TestSIDR(t *testing.T) {
	p := sidrPair(t)
	ida := p.resolve(3)
	req := find(t, p.evB, EventSIDRRequest)
	if req.SIDRREQ.ServiceID != udSID || req.PrivateData[100] != 0x5a || req.Peer != ipA {
		t.Fatalf("request %+v", req)
	}
	if err := p.b.AnswerSIDR(p.now, req.ID, mad.SIDRREPFields{Status: mad.SIDRValid, QPN: 0x123456, QKey: 0x01234567,
		PrivateData: [136]byte{7: 9}}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.AnswerSIDR(p.now, req.ID, mad.SIDRREPFields{}); err == nil {
		t.Fatal("a second answer was accepted")
	}
	p.pump()
	rep := find(t, p.evA, EventSIDRReply)
	if rep.ID != ida || rep.SIDRREP.QPN != 0x123456 || rep.SIDRREP.QKey != 0x01234567 || rep.SIDRREP.Status != mad.SIDRValid ||
		rep.SIDRREP.ServiceID != udSID || rep.PrivateData[7] != 9 {
		t.Fatalf("reply %+v", rep.SIDRREP)
	}
	if len(p.a.sidrs) != 0 {
		t.Fatal("the requester keeps the request after the answer")
	}
	p.until(func() bool { return len(p.b.sidrs) == 0 })
	if count(p.evA, EventTimeout) != 0 {
		t.Fatal("timeout after an answer")
	}
}

// TestSIDRNoListener: a service nobody listens to is answered "service
// ID not supported", statelessly.
func TestSIDRNoListener(t *testing.T) {
	p := newPair(t)
	p.resolve(3)
	rep := find(t, p.evA, EventSIDRReply)
	if rep.SIDRREP.Status != mad.SIDRServiceIDUnknown || len(p.b.sidrs) != 0 || p.b.Counters().NoListener != 1 {
		t.Fatalf("status %v, %d requests kept", rep.SIDRREP.Status, len(p.b.sidrs))
	}
}

// TestSIDRLostReply: the first answer is lost; the resent request is a
// duplicate, answered again from the kept answer, not delivered twice.
func TestSIDRLostReply(t *testing.T) {
	p := sidrPair(t)
	lost := 0
	p.drop = func(fromA bool, s Send) bool {
		if !fromA && mad.MAD(s.MAD[:]).AttrID() == mad.AttrSIDRREP && lost == 0 {
			lost++
			return true
		}
		return false
	}
	p.resolve(3)
	req := find(t, p.evB, EventSIDRRequest)
	p.b.AnswerSIDR(p.now, req.ID, mad.SIDRREPFields{Status: mad.SIDRValid, QPN: 0x77, QKey: 1})
	p.pump()
	p.until(func() bool { return count(p.evA, EventSIDRReply) == 1 })
	if n := count(p.evB, EventSIDRRequest); n != 1 {
		t.Fatalf("%d requests delivered", n)
	}
	if p.b.Counters().Duplicates != 1 || countAttr(p.sentB, mad.AttrSIDRREP) != 2 {
		t.Fatalf("duplicates %d, answers sent %d", p.b.Counters().Duplicates, countAttr(p.sentB, mad.AttrSIDRREP))
	}
	// A duplicate before the answer is ignored.
	p.drop = func(fromA bool, s Send) bool { return !fromA }
	p.resolve(3)
	p.advance(respTime)
	if n := count(p.evB, EventSIDRRequest); n != 2 {
		t.Fatalf("%d requests delivered, want 2", n)
	}
}

// TestSIDRTimeout: no answer after the retries is EventTimeout (the
// application never answers: the resent requests are duplicates).
func TestSIDRTimeout(t *testing.T) {
	p := sidrPair(t)
	start := p.now
	ida := p.resolve(2)
	p.until(func() bool { return count(p.evA, EventTimeout) == 1 })
	e := find(t, p.evA, EventTimeout)
	if e.ID != ida || countAttr(p.sentA, mad.AttrSIDRREQ) != 3 || len(p.a.sidrs) != 0 ||
		count(p.evB, EventSIDRRequest) != 1 || p.b.Counters().Duplicates != 2 {
		t.Fatalf("timeout %+v after %d requests", e, countAttr(p.sentA, mad.AttrSIDRREQ))
	}
	if d := p.now - start; d < 3*respTime || d > 4*respTime {
		t.Fatalf("timed out after %v", time.Duration(d))
	}
	// The passive side forgets an unanswered request after its service
	// timeout.
	if len(p.b.sidrs) != 1 {
		t.Fatalf("%d requests kept by the listener", len(p.b.sidrs))
	}
	p.until(func() bool { return len(p.b.sidrs) == 0 })
}

// TestSIDRCancel: a cancelled request ignores its late answer.
func TestSIDRCancel(t *testing.T) {
	p := sidrPair(t)
	ida := p.resolve(2)
	p.a.CancelSIDR(ida)
	req := find(t, p.evB, EventSIDRRequest)
	p.b.AnswerSIDR(p.now, req.ID, mad.SIDRREPFields{})
	p.pump()
	if count(p.evA, EventSIDRReply) != 0 || p.a.Counters().UnknownConn != 1 {
		t.Fatal("a cancelled request got its answer")
	}
}
