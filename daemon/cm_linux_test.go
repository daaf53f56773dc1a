package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/internal/frametest"
	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// sendOne SENDs msg from qa to qb and checks it arrived.
func sendOne(t *testing.T, a, b *end, qa, qb verbs.QP, msg string) {
	t.Helper()
	if err := qb.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{b.mr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, msg)
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{a.mr.SGE(0, uint32(len(msg)))}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitN(t, a.cq, 1)[0]; wc.Status != stack.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
	if wc := waitN(t, b.cq, 1)[0]; wc.Status != stack.WCSuccess || string(b.buf[:wc.ByteLen]) != msg {
		t.Fatalf("recv: %v %q", wc.Status, b.buf[:wc.ByteLen])
	}
}

// TestDaemonCM connects two clients of two daemons through RDMA CM:
// listen, dial with private data both ways, a SEND on the connection,
// disconnect seen by the peer; then a port nobody listens on.
func TestDaemonCM(t *testing.T) {
	p := newPair(t)
	ca, cb := open(t, p.sa), open(t, p.sb)
	a, b := newEnd(t, ca, 1<<16), newEnd(t, cb, 1<<16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ln, err := cb.Listen(netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := cb.Listen(netip.AddrPortFrom(netip.Addr{}, 7471)); err == nil {
		t.Fatal("a second listener on the port was allowed")
	}
	qa, qb := a.qp(t, stack.RC), b.qp(t, stack.RC)
	type res struct {
		c   *client.CMConn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			acc <- res{nil, err}
			return
		}
		if !bytes.HasPrefix(r.PrivateData, []byte("from a")) || r.Remote.Addr() != ipA || r.Local != netip.AddrPortFrom(ipB, 7471) {
			acc <- res{nil, errors.New("request: " + r.Remote.String() + " " + r.Local.String() + " " + string(r.PrivateData))}
			return
		}
		c, err := r.Accept(ctx, qb.(*client.QP), []byte("from b"))
		acc <- res{c, err}
	}()
	conn, err := ca.Dial(ctx, qa.(*client.QP), netip.AddrPortFrom(ipB, 7471), []byte("from a"))
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.HasPrefix(conn.PrivateData, []byte("from b")) || len(conn.PrivateData) != rdmacm.MaxAcceptData {
		t.Fatalf("dial got private data %q (%d bytes)", conn.PrivateData[:8], len(conn.PrivateData))
	}
	sendOne(t, a, b, qa, qb, "over a CM connection")
	sendOne(t, b, a, qb, qa, "and back")

	// a disconnects: b's connection ends, and both QPs are in ERR.
	conn.Close()
	select {
	case <-r.c.Done():
	case <-ctx.Done():
		t.Fatal("the accepting side did not see the disconnect")
	}
	r.c.Close()
	for _, q := range []verbs.QP{qa, qb} {
		if st := q.State(); st != stack.StateErr {
			t.Errorf("QP 0x%x in %v after disconnect", q.QPN(), st)
		}
	}

	// Nobody listens on 7472: "invalid service ID", as rdma_cm answers.
	qc := a.qp(t, stack.RC)
	_, err = ca.Dial(ctx, qc.(*client.QP), netip.AddrPortFrom(ipB, 7472), nil)
	var rej *rdmacm.RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("dial to a port nobody listens on: %v", err)
	}
	// uroce stat shows the CM's counters.
	if cmb := p.sb.Stats(0).Device.CM; cmb["cm_no_listener"] != 1 || cmb["cm_mads_received"] < 4 || cmb["cm_mads_sent"] < 3 {
		t.Errorf("the listening daemon's CM counters: %v", cmb)
	}
	// A rejected request is rejected on the dialling side.
	go func() {
		r, err := ln.Accept(ctx)
		if err == nil {
			r.Reject([]byte("no thanks"))
		}
	}()
	qd := a.qp(t, stack.RC)
	_, err = ca.Dial(ctx, qd.(*client.QP), netip.AddrPortFrom(ipB, 7471), nil)
	if !errors.As(err, &rej) || rej.Reason != mad.RejConsumer || !bytes.HasPrefix(rej.PrivateData, []byte("no thanks")) {
		t.Fatalf("dial rejected by the application: %v", err)
	}
}

// TestDaemonCMRTULost: the active side's RTU is lost and its DREQ (it
// disconnects at once) comes first. The kernel's rdma_cm takes the DREQ
// as the end of an established connection: the accept succeeds and
// DISCONNECTED comes alone. So does the daemon's: the accepting client
// gets a connection already ended, and the QP is in ERR.
func TestDaemonCMRTULost(t *testing.T) {
	rtu := func(f []byte) bool {
		a, ok := frametest.MADAttr(f)
		return ok && mad.AttrID(a) == mad.AttrRTU
	}
	var fl *fault.Link
	p := newPairWith(t, stack.Limits{}, func(l stack.Link) stack.Link {
		fl = fault.Wrap(l, fault.Config{Drop: 1, Only: rtu})
		return fl
	})
	ca, cb := open(t, p.sa), open(t, p.sb)
	a, b := newEnd(t, ca, 1<<16), newEnd(t, cb, 1<<16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := cb.Listen(netip.AddrPortFrom(netip.Addr{}, 7473))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	qa, qb := a.qp(t, stack.RC), b.qp(t, stack.RC)
	dialed := make(chan error, 1)
	go func() {
		c, err := ca.Dial(ctx, qa.(*client.QP), netip.AddrPortFrom(ipB, 7473), nil)
		if err == nil {
			err = c.Close() // at once: the DREQ follows the lost RTU
		}
		dialed <- err
	}()
	r, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Accept(ctx, qb.(*client.QP), nil)
	if err != nil {
		t.Fatalf("accept, the RTU lost and a DREQ come: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("the accepted connection is not ended")
	}
	if !c.NeverEstablished() {
		t.Error("NeverEstablished false for a connection whose RTU never came")
	}
	c.Close()
	if st := qb.State(); st != stack.StateErr {
		t.Errorf("the accepting QP in %v, want ERR", st)
	}
	if err := <-dialed; err != nil {
		t.Fatalf("dial and close: %v", err)
	}
	if fl.Stats().Dropped == 0 {
		t.Fatal("no RTU was dropped")
	}
}

// TestDaemonCMInterop connects a daemon client with package rdmacm on an
// in-process device, both ways, and leaves no QP behind after many
// connections.
func TestDaemonCMInterop(t *testing.T) {
	p := newPair(t)
	ca := open(t, p.sa)
	a := newEnd(t, ca, 1<<16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pd, err := p.b.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := p.b.CreateCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := rdmacm.AgentFor(p.b)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := agent.Listen(netip.AddrPortFrom(netip.Addr{}, 7480))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := rdmacm.AgentFor(p.a); err != nil { // its QP1 stays
		t.Fatal(err)
	}
	before := p.a.NumQPs()
	for i := range 20 {
		q := a.qp(t, stack.RC)
		done := make(chan error, 1)
		go func() {
			r, err := ln.Accept(ctx)
			if err != nil {
				done <- err
				return
			}
			qb, err := pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 8})
			if err != nil {
				done <- err
				return
			}
			c, err := r.Accept(qb, nil)
			if err != nil {
				done <- err
				return
			}
			<-c.Done()
			c.Close()
			done <- qb.Destroy()
		}()
		c, err := ca.Dial(ctx, q.(*client.QP), netip.AddrPortFrom(ipB, 7480), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
		if err := <-done; err != nil {
			t.Fatalf("connection %d, accepting side: %v", i, err)
		}
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.a.NumQPs(); n != before {
		t.Errorf("%d QPs on the dialling device after the connections, %d before", n, before)
	}

	// The other way: the daemon's client listens, rdmacm dials.
	cl, err := ca.Listen(netip.AddrPortFrom(ipA, 7481))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	qa := a.qp(t, stack.RC)
	go func() {
		r, err := cl.Accept(ctx)
		if err == nil {
			r.Accept(ctx, qa.(*client.QP), []byte("daemon side"))
		}
	}()
	c, err := agent.Dial(ctx, pd, netip.AddrPortFrom(ipA, 7481), stack.QPInit{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8,
		MaxRecvWR: 8}, []byte("in-process side"), rdmacm.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(c.PrivateData, []byte("daemon side")) {
		t.Errorf("private data %q", c.PrivateData[:16])
	}
	c.Close()
}

// TestDaemonCMUD resolves a UD service of another daemon's client
// (SIDR, udaddy's exchange) and sends it a datagram.
func TestDaemonCMUD(t *testing.T) {
	p := newPair(t)
	ca, cb := open(t, p.sa), open(t, p.sb)
	a, b := newEnd(t, ca, 1<<16), newEnd(t, cb, 1<<16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qa, qb := a.qp(t, stack.UD), b.qp(t, stack.UD)
	connect(t, qa, qb, ipA, ipB) // UD: INIT (Q_Key 0x1111), RTR, RTS
	ln, err := cb.ListenUD(netip.AddrPortFrom(netip.Addr{}, 7490))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if r, err := ln.Accept(ctx); err == nil {
			r.AcceptUD(qb.(*client.QP), []byte("ud welcome"))
		}
	}()
	peer, err := ca.ResolveUD(ctx, qa.(*client.QP), netip.AddrPortFrom(ipB, 7490), []byte("ud hello"))
	if err != nil {
		t.Fatal(err)
	}
	if peer.QPN != qb.QPN() || peer.QKey != 0x1111 || peer.AH.DGID != ipB || !bytes.HasPrefix(peer.PrivateData, []byte("ud welcome")) {
		t.Fatalf("peer %+v", peer)
	}
	ah, err := a.pd.CreateAH(peer.AH)
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{b.mr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "datagram")
	if err := qa.PostSend(&verbs.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}); err != nil {
		t.Fatal(err)
	}
	waitN(t, a.cq, 1)
	if wc := waitN(t, b.cq, 1)[0]; wc.Status != stack.WCSuccess || string(b.buf[40:48]) != "datagram" {
		t.Fatalf("recv %v %q", wc.Status, b.buf[40:48])
	}
	_, err = ca.ResolveUD(ctx, qa.(*client.QP), netip.AddrPortFrom(ipB, 7491), nil)
	var se *rdmacm.SIDRError
	if !errors.As(err, &se) || se.Status != mad.SIDRServiceIDUnknown {
		t.Fatalf("nobody listening: %v", err)
	}
}
