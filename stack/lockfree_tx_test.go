package stack

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/uroce/uroce/link/pipe"
)

// lockCheckLink fails the test when its device's engine transmits while
// it holds the lock of one of the device's QPs: a verbs call on that QP
// would wait for the system call.
type lockCheckLink struct {
	Link
	t     *testing.T
	dev   *Device
	calls int
}

func (l *lockCheckLink) Transmit(frames [][]byte) int {
	l.calls++
	if l.dev != nil {
		l.dev.qps.each(func(q *QP) {
			if !q.mu.TryLock() {
				l.t.Errorf("transmit %d with qp %#x locked", l.calls, q.qpn)
				return
			}
			q.mu.Unlock()
		})
	}
	return l.Link.Transmit(frames)
}

// TestTransmitWithoutQPLock runs WRITEs, READs and SENDs, larger than a
// transmit batch, both ways over a pipe on manual devices (the engine
// steps in the test's goroutine, so a held lock shows in TryLock), and
// checks that no frame goes to the link with a QP's lock held: not when
// the batch fills in the middle of a QP's packets, not when responses go
// out in the middle of a receive batch.
func TestTransmitWithoutQPLock(t *testing.T) {
	clock := NewFakeClock(0)
	pa, pb := pipe.New(pipe.Config{MTU: 1500, Slots: 4096})
	la, lb := &lockCheckLink{Link: pa, t: t}, &lockCheckLink{Link: pb, t: t}
	s := &simPair{clock: clock}
	s.a = openManual(t, la, macA, []netip.Addr{ipA}, clock)
	s.b = openManual(t, lb, macB, []netip.Addr{ipB}, clock)
	la.dev, lb.dev = s.a, s.b
	const n = 1 << 16
	A, B := newSide(t, s.a, 2*n, 64), newSide(t, s.b, 2*n, 64)
	qa, qb := A.qp(t, RC), B.qp(t, RC)
	connect(t, qa, qb, 1, 0, 0, AccessRemoteRead|AccessRemoteWrite|AccessLocalWrite)
	fill(A.buf[:n], 1)
	fill(B.buf[n:], 2)
	for i := range 4 {
		if err := qb.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{B.mr.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(q *QP, wr SendWR) {
		t.Helper()
		if err := q.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		post(qa, SendWR{ID: uint64(10 + i), Op: OpWrite, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, n)},
			Remote: RemoteAddr{B.mr.Addr() + n, B.mr.RKey()}})
		post(qb, SendWR{ID: uint64(20 + i), Op: OpRead, Flags: SendSignaled, SG: []SGE{B.mr.SGE(0, n)},
			Remote: RemoteAddr{A.mr.Addr(), A.mr.RKey()}})
	}
	pollN(t, s, A.cq, 4)
	for _, wc := range pollN(t, s, B.cq, 4) {
		if wc.Status != 0 {
			t.Fatalf("read: %v", wc.Status)
		}
	}
	if !bytes.Equal(B.buf[n:], A.buf[:n]) || !bytes.Equal(B.buf[:n], A.buf[:n]) {
		t.Fatal("WRITE or READ data differs")
	}
	for i := range 4 {
		post(qa, SendWR{ID: uint64(30 + i), Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 8192)}})
	}
	pollN(t, s, A.cq, 4)
	if got := pollN(t, s, B.cq, 4); len(got) != 4 {
		t.Fatalf("%d receives", len(got))
	}
	if !bytes.Equal(B.buf[:8192], A.buf[:8192]) {
		t.Error("SEND data differs")
	}
	if la.calls == 0 || lb.calls == 0 {
		t.Fatalf("transmits: %d, %d", la.calls, lb.calls)
	}
}
