package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

const udQKey = 0x01234567 // RDMA_UDP_QKEY

func (s *side) udQP(t *testing.T) *stack.QP {
	t.Helper()
	q, err := s.pd.CreateQP(stack.QPInit{Type: stack.UD, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.ToInit(stack.InitAttr{QKey: udQKey}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTR(stack.RTRAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(stack.RTSAttr{SQPSN: 1}); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestResolveUD resolves a UD service through SIDR (udaddy's exchange)
// under 20 % loss, sends a datagram to what it returned, and checks the
// refusals: nobody listening, and the application's reject.
func TestResolveUD(t *testing.T) {
	A, B := openPair(t, 0.2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := B.a.ListenUD(netip.AddrPortFrom(netip.Addr{}, port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := B.a.ListenUD(netip.AddrPortFrom(netip.Addr{}, port)); !errors.Is(err, ErrInUse) {
		t.Fatalf("second UD listener: %v", err)
	}
	// A TCP listener on the same port is another service.
	tl, err := B.a.Listen(netip.AddrPortFrom(netip.Addr{}, port))
	if err != nil {
		t.Fatal(err)
	}
	tl.Close()
	qa, qb := A.udQP(t), B.udQP(t)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if !r.UD() || r.Remote.Addr() != ipA || !bytes.HasPrefix(r.PrivateData, []byte("udaddy")) ||
			len(r.PrivateData) != MaxResolveData {
			r.Reject([]byte("bad request"))
			return
		}
		r.AcceptUD(qb.QPN(), udQKey, []byte("welcome"))
	}()
	peer, err := A.a.ResolveUD(ctx, netip.AddrPortFrom(ipB, port), []byte("udaddy"), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if peer.QPN != qb.QPN() || peer.QKey != udQKey || !bytes.HasPrefix(peer.PrivateData, []byte("welcome")) ||
		peer.Remote.Addr() != ipB || peer.Local.Addr() != ipA {
		t.Fatalf("peer %+v", peer)
	}
	ah, err := A.pd.CreateAH(stack.AHAttr{DGID: peer.Remote.Addr(), SGIDIndex: peer.SGIDIndex})
	if err != nil {
		t.Fatal(err)
	}
	// The link drops 20 %: send until one datagram arrives.
	copy(A.buf, "datagram")
	got := false
	for i := 0; i < 40 && !got; i++ {
		qb.PostRecv(&stack.RecvWR{ID: 9, SG: []stack.SGE{B.mr.SGE(0, 4096)}})
		if err := qa.PostSend(&stack.SendWR{ID: 1, Op: stack.OpSend, Flags: stack.SendSignaled,
			SG: []stack.SGE{A.mr.SGE(0, 8)}, AH: ah, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}); err != nil {
			t.Fatal(err)
		}
		A.wait(t, 1)
		deadline := time.Now().Add(50 * time.Millisecond)
		wcs := make([]stack.WC, 4)
		for time.Now().Before(deadline) && !got {
			for _, wc := range wcs[:B.cq.Poll(wcs)] {
				got = got || wc.Status == stack.WCSuccess && bytes.Equal(B.buf[40:48], []byte("datagram"))
			}
			time.Sleep(time.Millisecond)
		}
	}
	if !got {
		t.Fatal("no datagram reached the resolved QP")
	}

	// Nobody listens on port+1: "service ID not supported".
	_, err = A.a.ResolveUD(ctx, netip.AddrPortFrom(ipB, port+1), nil, DialOptions{})
	var se *SIDRError
	if !errors.As(err, &se) || se.Status != mad.SIDRServiceIDUnknown {
		t.Fatalf("no listener: %v", err)
	}
	// The listener refuses.
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Reject([]byte("not you"))
		}
	}()
	_, err = A.a.ResolveUD(ctx, netip.AddrPortFrom(ipB, port), []byte("x"), DialOptions{})
	if !errors.As(err, &se) || se.Status != mad.SIDRRejected || !bytes.HasPrefix(se.PrivateData, []byte("not you")) {
		t.Fatalf("rejected: %v", err)
	}
}

// moveQP moves q from INIT to RTS with at, as an application of
// rdma_init_qp_attr does.
func moveQP(t *testing.T, q *stack.QP, at QPAttrs) {
	t.Helper()
	if err := q.ToRTR(stack.RTRAttr{DestQPN: at.DestQPN, AH: stack.AHAttr{DGID: at.Peer, SGIDIndex: at.SGIDIndex},
		RQPSN: at.RQPSN, PathMTU: at.MTU, MaxDestRdAtomic: at.MaxDestRdAtomic, MinRNRTimer: 12}); err != nil {
		t.Fatal(err)
	}
	if err := q.ToRTS(stack.RTSAttr{SQPSN: at.SQPSN, Timeout: at.Timeout, RetryCnt: at.RetryCnt, RNRRetry: at.RNRRetry,
		MaxRdAtomic: at.MaxRdAtomic}); err != nil {
		t.Fatal(err)
	}
}

// TestManualQP connects two QPs their owners move themselves (rping
// -q): the attributes each side gets pair up, the RTU follows
// Establish, and SENDs go both ways.
func TestManualQP(t *testing.T) {
	A, B := openPair(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := B.a.Listen(netip.AddrPortFrom(netip.Addr{}, port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mk := func(s *side) *stack.QP {
		q, err := s.pd.CreateQP(s.init())
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb := mk(A), mk(B)
	done := make(chan *Conn, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		at, err := r.QPAttrs(0x123456)
		if err != nil || at.DestQPN != qa.QPN() || at.RQPSN != 0x123456 || at.Peer != ipA {
			t.Errorf("passive attributes %+v, %v", at, err)
		}
		moveQP(t, qb, at)
		p, err := r.AnswerManual(qb.QPN(), 0x123456, []byte("manual"), AcceptOptions{})
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		c, err := p.Wait()
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	c, err := A.a.DialManual(ctx, qa.QPN(), 0x654321, netip.AddrPortFrom(ipB, port), nil, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := c.QPAttrs()
	if at.DestQPN != qb.QPN() || at.SQPSN != 0x123456 || at.RQPSN != 0x654321 || !bytes.HasPrefix(c.PrivateData, []byte("manual")) {
		t.Fatalf("active attributes %+v", at)
	}
	moveQP(t, qa, at)
	if err := c.Establish(); err != nil {
		t.Fatal(err)
	}
	cb := <-done
	if cb == nil {
		t.FailNow()
	}
	for _, x := range []struct {
		from, to *side
		qf, qt   *stack.QP
	}{{A, B, qa, qb}, {B, A, qb, qa}} {
		x.qt.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{x.to.mr.SGE(0, 64)}})
		copy(x.from.buf, "manual qp")
		if err := x.qf.PostSend(&stack.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled,
			SG: []stack.SGE{x.from.mr.SGE(0, 9)}}); err != nil {
			t.Fatal(err)
		}
		if wc := x.from.wait(t, 1)[0]; wc.Status != stack.WCSuccess {
			t.Fatalf("send %v", wc.Status)
		}
		if wc := x.to.wait(t, 1)[0]; wc.Status != stack.WCSuccess || string(x.to.buf[:9]) != "manual qp" {
			t.Fatalf("recv %v %q", wc.Status, x.to.buf[:9])
		}
	}
	c.Close()
	<-cb.Done()
	cb.Close()
	if st, _ := qa.Query(); st.State != stack.StateRTS {
		t.Errorf("the agent moved the caller's QP to %v", st.State)
	}
}
