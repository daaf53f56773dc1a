package stack_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/uroce/uroce/stack"
)

// end is one device's objects in a test.
type end struct {
	dev *stack.Device
	pd  *stack.PD
	cq  *stack.CQ
	buf []byte
	mr  *stack.MR
}

func newEnd(t *testing.T, d *stack.Device, size int) *end {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(1024)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	mr, err := pd.RegisterMR(buf, stack.AccessLocalWrite|stack.AccessRemoteWrite|stack.AccessRemoteRead|stack.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return &end{dev: d, pd: pd, cq: cq, buf: buf, mr: mr}
}

func (e *end) qp(t *testing.T, typ stack.QPType) *stack.QP {
	t.Helper()
	q, err := e.pd.CreateQP(stack.QPInit{Type: typ, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 256, MaxRecvWR: 256})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// connectQPs brings two connected QPs to RTS using GID index gid of each
// device.
func connectQPs(t *testing.T, qa, qb *stack.QP, da, db *stack.Device, gid int) {
	t.Helper()
	for _, c := range []struct {
		q, peer *stack.QP
		peerDev *stack.Device
	}{{qa, qb, db}, {qb, qa, da}} {
		dgid, err := c.peerDev.GID(gid)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead | stack.AccessRemoteAtomic}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTR(stack.RTRAttr{DestQPN: c.peer.QPN(), AH: stack.AHAttr{DGID: dgid, SGIDIndex: gid},
			RQPSN: 100, MaxDestRdAtomic: 16, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.q.ToRTS(stack.RTSAttr{SQPSN: 100, Timeout: 8, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitWC waits for one completion on cq.
func waitWC(t *testing.T, cq *stack.CQ) stack.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]stack.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("wait for completion: %v", err)
		}
	}
}

// rcWriteOnce connects an RC QP pair over GID index gid and writes n
// bytes from a to b, checking them.
func rcWriteOnce(t *testing.T, a, b *stack.Device, gid, n int) {
	t.Helper()
	A, B := newEnd(t, a, n), newEnd(t, b, n)
	qa, qb := A.qp(t, stack.RC), B.qp(t, stack.RC)
	connectQPs(t, qa, qb, a, b, gid)
	for i := range A.buf {
		A.buf[i] = byte(i*13 + 1)
	}
	err := qa.PostSend(&stack.SendWR{ID: 7, Op: stack.OpWrite, Flags: stack.SendSignaled,
		SG: []stack.SGE{A.mr.SGE(0, uint32(n))}, Remote: stack.RemoteAddr{Addr: B.mr.Addr(), RKey: B.mr.RKey()}})
	if err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, A.cq); wc.ID != 7 || wc.Status != 0 {
		t.Fatalf("write completion %+v", wc)
	}
	if !bytes.Equal(A.buf, B.buf) {
		t.Fatal("written data differs")
	}
}
