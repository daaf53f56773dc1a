package stack

import (
	"bytes"
	"errors"
	"testing"
)

// gsiQP creates the device's QP1 on s and brings it to RTS.
func gsiQP(t testing.TB, s *side) *QP {
	t.Helper()
	q, err := s.pd.CreateQP(QPInit{Type: UD, GSI: true, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	if q.QPN() != GSIQPN {
		t.Fatalf("qp1 got qpn %#x", q.QPN())
	}
	udReady(t, q, GSIQKey, 0)
	return q
}

// TestGSI: QP1 on each device exchanges 256-byte datagrams as MADs do,
// with the GSI Q_Key; there is one QP1 per device, and a datagram with
// another Q_Key does not reach it.
func TestGSI(t *testing.T) {
	s := newSimPair(t, 1500, nil)
	A, B := newSide(t, s.a, 1<<16, 64), newSide(t, s.b, 1<<16, 64)
	ga, gb := gsiQP(t, A), gsiQP(t, B)
	if _, err := A.pd.CreateQP(QPInit{Type: UD, GSI: true, SendCQ: A.cq, RecvCQ: A.cq, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, ErrBusy) {
		t.Errorf("a second qp1: %v, want ErrBusy", err)
	}
	if _, err := A.pd.CreateQP(QPInit{Type: RC, GSI: true, SendCQ: A.cq, RecvCQ: A.cq, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("an RC qp1: %v, want ErrInvalidArg", err)
	}
	ah, err := A.pd.CreateAH(AHAttr{DGID: ipB, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	fill(A.buf[:256], 9)
	gb.PostRecv(&RecvWR{ID: 1, SG: []SGE{B.mr.SGE(0, 40+256)}})
	// The high bit of the work request's Q_Key selects the QP's own.
	if err := ga.PostSend(&SendWR{ID: 2, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 256)},
		AH: ah, RemoteQPN: GSIQPN, RemoteQKey: 0x80000000}); err != nil {
		t.Fatal(err)
	}
	wa, wb := pollN(t, s, A.cq, 1), pollN(t, s, B.cq, 1)
	if wa[0].Status != 0 || wb[0].Status != 0 || wb[0].QPN != GSIQPN || wb[0].SrcQP != GSIQPN || wb[0].ByteLen != 40+256 ||
		!bytes.Equal(B.buf[40:40+256], A.buf[:256]) {
		t.Fatalf("mad: sender %+v, receiver %+v", wa[0], wb[0])
	}

	// An ordinary UD QP with another Q_Key: dropped and counted at QP1.
	u := A.qp(t, UD)
	udReady(t, u, 0x11, 0)
	gb.PostRecv(&RecvWR{ID: 3, SG: []SGE{B.mr.SGE(0, 40+256)}})
	if err := u.PostSend(&SendWR{ID: 4, Op: OpSend, Flags: SendSignaled, SG: []SGE{A.mr.SGE(0, 256)},
		AH: ah, RemoteQPN: GSIQPN, RemoteQKey: 0x11}); err != nil {
		t.Fatal(err)
	}
	pollN(t, s, A.cq, 1)
	s.run(t, func() bool { return gb.Counters().QKeyViolation == 1 })
	var wcs [4]WC
	if n := B.cq.Poll(wcs[:]); n != 0 {
		t.Errorf("a datagram with the wrong Q_Key completed at qp1: %+v", wcs[:n])
	}

	// Destroyed, QP1 can be created again; packets in between find nobody.
	if err := ga.Destroy(); err != nil {
		t.Fatal(err)
	}
	if s.a.qps.lookup(GSIQPN) != nil {
		t.Error("qp1 still found after destroy")
	}
	gsiQP(t, A)
}
