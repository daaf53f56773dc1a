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
