package daemon_test

import (
	"bytes"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// TestDaemonMulticast: ibv_attach_mcast through the daemon. A sends
// datagrams to a group; the UD QPs of two clients of B's daemon that
// attached to it receive each one, a QP that did not attach receives
// none. The errors are the verbs' (EINVAL for an RC QP, a GID that is
// not multicast, a group the QP is not in; EBUSY destroying an attached
// QP; ENOMEM past the device's limits, which QueryDevice reports), and
// a client that goes leaves its groups.
func TestDaemonMulticast(t *testing.T) {
	p := newPairLimits(t, stack.Limits{MaxMcastQPAttach: 2})
	A := newEnd(t, open(t, p.sa), 1<<16)
	B1, B2, B3 := newEnd(t, open(t, p.sb), 1<<16), newEnd(t, open(t, p.sb), 1<<16), newEnd(t, open(t, p.sb), 1<<16)
	if a := B1.dev.Query(); a.MaxMcastQPAttach != 2 || a.MaxMcastGrp != 8192 || a.MaxTotalMcastQPAttach != 8192*56 {
		t.Fatalf("query device: multicast limits %d %d %d", a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach)
	}
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	qa := A.qp(t, stack.UD)
	udUp(t, qa)
	var qs []verbs.QP
	for _, e := range []*end{B1, B2, B3} {
		q := e.qp(t, stack.UD)
		udUp(t, q)
		qs = append(qs, q)
		for i := 0; i < 4; i++ {
			if err := q.PostRecv(&stack.RecvWR{ID: uint64(100 + i), SG: []stack.SGE{e.mr.SGE(uint64(i)*4096, 4096)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range qs[:2] {
		if err := q.AttachMcast(group); err != nil {
			t.Fatal(err)
		}
	}
	if err := qs[0].AttachMcast(group); err != nil {
		t.Errorf("attaching twice: %v", err)
	}
	if err := qs[2].AttachMcast(group); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("a third qp in a group of at most 2: %v, want ENOMEM", err)
	}

	ah, err := A.pd.CreateAH(stack.AHAttr{DGID: group, SGIDIndex: 1})
	if err != nil {
		t.Fatal(err)
	}
	send := func(id uint64, b byte) {
		t.Helper()
		fill(A.buf[:500], b)
		if err := qa.PostSend(&verbs.SendWR{ID: id, Op: stack.OpSend, Flags: stack.SendSignaled, AH: ah,
			RemoteQPN: stack.MulticastQPN, RemoteQKey: 0x1111, SG: []stack.SGE{A.mr.SGE(0, 500)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitN(t, A.cq, 1)[0]; wc.Status != stack.WCSuccess {
			t.Fatalf("send to the group: %+v", wc)
		}
	}
	recv := func(e *end, i int) {
		t.Helper()
		wc := waitN(t, e.cq, 1)[0]
		if wc.ID != uint64(100+i) || wc.Status != stack.WCSuccess || wc.ByteLen != 40+500 || wc.SrcQP != qa.QPN() {
			t.Fatalf("multicast receive %d: %+v", i, wc)
		}
		if !bytes.Equal(e.buf[i*4096+40:][:500], A.buf[:500]) {
			t.Fatalf("multicast datagram %d differs", i)
		}
	}
	send(1, 7)
	recv(B1, 0)
	recv(B2, 0)

	// B2 leaves the group: the next datagram reaches B1 only.
	if err := qs[1].DetachMcast(group); err != nil {
		t.Fatal(err)
	}
	if err := qs[1].DetachMcast(group); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("detaching twice: %v, want EINVAL", err)
	}
	send(2, 8)
	recv(B1, 1)

	// The verbs' errors.
	rc := B3.qp(t, stack.RC)
	if err := rc.AttachMcast(group); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("attaching an rc qp: %v, want EINVAL", err)
	}
	gb, _ := B3.dev.GID(1)
	if err := qs[2].AttachMcast(gb); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("attaching to a unicast gid: %v, want EINVAL", err)
	}
	if err := qs[0].Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("destroying an attached qp: %v, want EBUSY", err)
	}

	// B3 attaches in B2's place; then B1's client goes, and its place is
	// free for B2 again.
	if err := qs[2].AttachMcast(group); err != nil {
		t.Fatal(err)
	}
	send(3, 9)
	recv(B1, 2)
	recv(B3, 0)
	B1.dev.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(p.sb.Stats(0).Sessions) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions %+v after a client closed", p.sb.Stats(0).Sessions)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := qs[1].AttachMcast(group); err != nil {
		t.Fatalf("attaching after the client in the group left: %v", err)
	}
	send(4, 10)
	recv(B2, 1)
	recv(B3, 1)
	if n := B3.cq.Poll(make([]stack.WC, 4)); n != 0 {
		t.Errorf("%d completions more on B3", n)
	}
}

// udUp moves a UD QP to RTS with Q_Key 0x1111.
func udUp(t *testing.T, q verbs.QP) {
	t.Helper()
	if err := q.ToInit(stack.InitAttr{QKey: 0x1111}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTR(stack.RTRAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(stack.RTSAttr{SQPSN: 5}); err != nil {
		t.Fatal(err)
	}
}
