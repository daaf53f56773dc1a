package stack

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

// listSink is a CQSink that keeps what is pushed and what is published.
type listSink struct {
	mu        sync.Mutex
	max       int
	pending   []WC
	published []WC
	publishes int
}

func (s *listSink) Push(wc *WC) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending)+len(s.published) >= s.max {
		return false
	}
	s.pending = append(s.pending, *wc)
	return true
}

func (s *listSink) Publish() {
	s.mu.Lock()
	s.published = append(s.published, s.pending...)
	s.pending = s.pending[:0]
	s.publishes++
	s.mu.Unlock()
}

func (s *listSink) got() []WC {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]WC(nil), s.published...)
}

// TestCQSinkIOVAAndInline runs a QP pair whose CQs are sinks, with the
// receiver's region registered at an address of its own choosing and
// the sender's data given inline, as the daemon does for its clients.
func TestCQSinkIOVAAndInline(t *testing.T) {
	s := newSimPair(t, 9000, nil)
	sa, sb := &listSink{max: 4}, &listSink{max: 4}
	ca, err := s.a.CreateCQWithSink(4, sa)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := s.b.CreateCQWithSink(4, sb)
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := s.a.AllocPD()
	pb, _ := s.b.AllocPD()
	mk := func(pd *PD, cq *CQ) *QP {
		q, err := pd.CreateQP(QPInit{Type: RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 8, MaxInline: 256})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb := mk(pa, ca), mk(pb, cb)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteWrite)
	const iova = 0x7f0000001000
	buf := make([]byte, 4096)
	mr, err := pb.RegisterMRAt(buf, iova, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr() != iova {
		t.Fatalf("addr %#x, want %#x", mr.Addr(), iova)
	}
	if _, err := pb.RegisterMRAt(buf, ^uint64(0)-100, AccessLocalWrite); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("iova that wraps: %v", err)
	}
	if err := qb.PostRecv(&RecvWR{ID: 9, SG: []SGE{{Addr: iova + 100, Length: 200, LKey: mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	data := []byte("inline data, no region behind it")
	if err := qa.PostSend(&SendWR{ID: 1, Op: OpSend, Flags: SendSignaled | SendInline, Inline: data}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&SendWR{ID: 2, Op: OpWrite, Flags: SendSignaled | SendInline, Inline: data,
		Remote: RemoteAddr{iova + 2000, mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	s.run(t, func() bool { return len(sa.got()) == 2 && len(sb.got()) == 1 })
	if w := sa.got(); w[0].ID != 1 || w[1].ID != 2 || w[0].Status != WCSuccess || w[1].Status != WCSuccess {
		t.Fatalf("send completions %+v", w)
	}
	if w := sb.got(); w[0].ID != 9 || w[0].ByteLen != uint32(len(data)) {
		t.Fatalf("receive completion %+v", w)
	}
	if !bytes.Equal(buf[100:100+len(data)], data) || !bytes.Equal(buf[2000:2000+len(data)], data) {
		t.Fatal("data not where the iova says")
	}
	if n := make([]WC, 4); ca.Poll(n) != 0 {
		t.Error("a sink CQ polled something")
	}
	// Moving a QP to ERR from a verbs call publishes its flushed
	// completions before the call returns.
	if err := qb.PostRecv(&RecvWR{ID: 10, SG: []SGE{{Addr: iova, Length: 8, LKey: mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.ToErr(); err != nil {
		t.Fatal(err)
	}
	if w := sb.got(); len(w) != 2 || w[1].ID != 10 || w[1].Status != WCWRFlushErr {
		t.Fatalf("after ERR: %+v", w)
	}
	// A full sink overruns the CQ.
	for i := 0; i < 4; i++ {
		qb.PostRecv(&RecvWR{ID: uint64(20 + i), SG: []SGE{{Addr: iova, Length: 8, LKey: mr.LKey()}}})
	}
	if cb.Overruns() == 0 {
		t.Error("no overrun counted for a full sink")
	}
}
