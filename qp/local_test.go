package qp

import (
	"errors"
	"testing"

	"github.com/uroce/uroce/bth"
)

// fakeLocal records the local operations a QP carries out, and how many
// packets the QP had sent by then.
type fakeLocal struct {
	out  *recOut
	done []WROpcode
	at   []int // packets sent when each was carried out
	fail WCStatus
}

func (l *fakeLocal) Execute(wr *SendWR) WCStatus {
	l.done = append(l.done, wr.Opcode)
	l.at = append(l.at, len(l.out.frames))
	return l.fail
}

func localNode(t *testing.T) (*node, *fakeLocal) {
	n := single(t, Caps{}, defaultConn())
	l := &fakeLocal{out: n.out}
	n.qp.local = l
	return n, l
}

// TestLocalOpsInOrder: BIND_MW and LOCAL_INV are carried out when the
// requester reaches them (after the WRITE before them went out, before
// the SEND after them), consume no PSN, and complete in send-queue
// order once the WRITE is acknowledged.
func TestLocalOpsInOrder(t *testing.T) {
	n, l := localNode(t)
	_, key := n.buf(4096, 0x10000, 1)
	n.post(t, SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 3000, LKey: key}},
		RemoteAddr: 0x70000, RKey: 9})
	n.post(t, SendWR{ID: 2, Opcode: WRBindMW, Flags: SendSignaled, RKey: 0x1234, Bind: LocalBind{MR: key, Addr: 0x10000, Length: 64}})
	n.post(t, SendWR{ID: 3, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: 0x1234})
	n.post(t, SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
	n.qp.Pump(0)
	ps := n.out.take()
	if len(l.done) != 2 || l.done[0] != WRBindMW || l.done[1] != WRLocalInv || l.at[0] != 3 || l.at[1] != 3 {
		t.Fatalf("carried out %v after %v packets, want both after the WRITE's 3", l.done, l.at)
	}
	wantPkts(t, ps, pkt{bth.OpWriteFirst, 0, false, 1024}, pkt{bth.OpWriteMiddle, 1, false, 1024},
		pkt{bth.OpWriteLast, 2, true, 952}, pkt{bth.OpSendOnly, 3, true, 10})
	if len(n.sink.send) != 0 {
		t.Fatalf("completions before any ACK: %+v", n.sink.send)
	}
	n.qp.Receive(0, ackPkt(t, 3, bth.SyndromeACKNoCredits, 2))
	wantWC(t, "send", n.sink.send, WC{ID: 1, Opcode: WCRDMAWrite, ByteLen: 3000}, WC{ID: 2, Opcode: WCBindMW},
		WC{ID: 3, Opcode: WCLocalInv}, WC{ID: 4, Opcode: WCSend, ByteLen: 10})
	if got := n.qp.SendRetired(); got != 4 {
		t.Errorf("%d retired, want 4", got)
	}
}

// TestLocalOpFenceAndFailure: a fenced BIND_MW waits for the READ before
// it; a failed one completes with its status, in order, and moves the
// QP to ERR, flushing the rest.
func TestLocalOpFenceAndFailure(t *testing.T) {
	n, l := localNode(t)
	_, key := n.buf(4096, 0x10000, 1)
	n.post(t, readWR(1, 0x10000, 100, key, 0x70000))
	n.post(t, SendWR{ID: 2, Opcode: WRBindMW, Flags: SendSignaled | SendFence, RKey: 0x1234})
	n.post(t, SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SG: []SGE{{Addr: 0x10000, Length: 10, LKey: key}}})
	n.qp.Pump(0)
	wantPkts(t, n.out.take(), pkt{bth.OpReadRequest, 0, true, 0})
	if len(l.done) != 0 {
		t.Fatalf("fenced bind carried out before the READ's answer: %v", l.done)
	}
	l.fail = WCMWBindErr
	n.qp.Receive(0, rdResps(t, 0, 0, make([]byte, 100), 1024)[0])
	n.qp.Pump(0)
	if len(l.done) != 1 || n.qp.State() != StateErr {
		t.Fatalf("carried out %v, state %s", l.done, n.qp.State())
	}
	if ps := n.out.take(); len(ps) != 0 {
		t.Fatalf("sent after the failed bind: %v", describe(ps))
	}
	wantWC(t, "send", n.sink.send, WC{ID: 1, Opcode: WCRDMARead, ByteLen: 100}, WC{ID: 2, Status: WCMWBindErr, Opcode: WCBindMW},
		WC{ID: 3, Status: WCWRFlushErr, Opcode: WCSend, ByteLen: 10})
}

// TestLocalOpsRefused: without Env.Local, and with SGEs, a local
// operation is refused at post time; UD takes none.
func TestLocalOpsRefused(t *testing.T) {
	n := single(t, Caps{}, defaultConn())
	if err := n.qp.PostSend(0, &SendWR{Opcode: WRBindMW}); err == nil {
		t.Error("BIND_MW without Env.Local posted")
	}
	m, _ := localNode(t)
	if err := m.qp.PostSend(0, &SendWR{Opcode: WRLocalInv, SG: []SGE{{Length: 1}}}); err == nil {
		t.Error("LOCAL_INV with an SGE posted")
	}
	u := single(t, Caps{Type: UD}, defaultConn())
	u.qp.local = &fakeLocal{out: u.out}
	if err := u.qp.PostSend(0, &SendWR{Opcode: WRLocalInv}); err == nil {
		t.Error("LOCAL_INV on a UD QP posted")
	}
}

// TestSRQResize: the receives posted stay, in order, with their SGEs,
// across a resize that wraps the old ring; a size below them is refused.
func TestSRQResize(t *testing.T) {
	s := NewSRQ(4, 2)
	id := uint64(0)
	post := func() error {
		err := s.PostRecv(&RecvWR{ID: id, SG: []SGE{{Addr: id, Length: uint32(id + 1), LKey: 7}, {Addr: 99, Length: 1, LKey: 8}}})
		if err == nil {
			id++
		}
		return err
	}
	for i := 0; i < 4; i++ {
		post()
	}
	var w recvWQE
	sg := make([]SGE, 2)
	s.pop(&w, sg)
	s.pop(&w, sg) // the head is past slot 0
	post()
	post()
	if err := s.Resize(3); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("resize to 3 with 4 posted: %v", err)
	}
	if err := s.Resize(6); err != nil {
		t.Fatal(err)
	}
	for post() == nil {
	}
	if s.Len() != 6 || id != 8 {
		t.Fatalf("%d posted (ids to %d), want 6 (to 8)", s.Len(), id)
	}
	for want := uint64(2); want < 8; want++ {
		if !s.pop(&w, sg) || w.id != want || len(w.sg) != 2 || w.sg[0].Addr != want || w.length != want+2 {
			t.Fatalf("receive %d: %+v", want, w)
		}
	}
}
