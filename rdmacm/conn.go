package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/uroce/uroce/cm"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

// Errors.
var (
	// ErrRejected: the peer refused the connection; the error is a
	// *RejectError with its reason and private data.
	ErrRejected = errors.New("connection rejected")
	// ErrUnreachable: the peer did not answer within the CM's retries
	// (RDMA_CM_EVENT_UNREACHABLE).
	ErrUnreachable = errors.New("peer unreachable")
	// ErrListenerClosed: Accept on a closed listener.
	ErrListenerClosed = errors.New("listener closed")
	// ErrInUse: the port has a listener.
	ErrInUse = errors.New("port in use")
	// ErrGone: the request is no longer valid (the peer gave up).
	ErrGone = errors.New("connection request withdrawn")
)

// RejectError is a REJ received (RDMA_CM_EVENT_REJECTED).
type RejectError struct {
	Reason      mad.RejectReason
	PrivateData []byte // the REJ's 148 bytes
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("%v: %s (%d)", ErrRejected, e.Reason, uint16(e.Reason))
}

// Unwrap makes errors.Is(err, ErrRejected) hold.
func (e *RejectError) Unwrap() error { return ErrRejected }

// waiter is the agent's view of one connection an application
// goroutine waits on.
type waiter struct {
	qp       *stack.QP // nil: the application moves its QP (manual)
	manual   bool
	replied  chan struct{} // manual, active: closed when the REP came ...
	gotREP   bool          // ... (under the agent's mutex)
	sgid     int
	peer     netip.Addr
	rep      mad.REPFields
	priv     []byte
	estab    chan struct{}
	gone     chan struct{}
	estOnce  sync.Once
	goneOnce sync.Once
	end      cm.Event
	err      error
}

func newWaiter(*ConnRequest) *waiter {
	return &waiter{estab: make(chan struct{}), gone: make(chan struct{})}
}

func (w *waiter) established() { w.estOnce.Do(func() { close(w.estab) }) }

// finish records the connection's last event; guarded by the agent's mutex.
func (w *waiter) finish(e cm.Event, err error) {
	w.goneOnce.Do(func() {
		w.end, w.err = e, err
		close(w.gone)
	})
}

// result turns the last event into Dial's or Accept's error.
func (w *waiter) result() error {
	if w.err != nil {
		return w.err
	}
	switch w.end.Type {
	case cm.EventRejected:
		if w.end.Reason == mad.RejTimeout {
			return fmt.Errorf("%w: the peer timed out", ErrUnreachable)
		}
		return &RejectError{Reason: w.end.Reason, PrivateData: w.end.PrivateData}
	case cm.EventTimeout:
		return ErrUnreachable
	}
	return fmt.Errorf("connection closed by the peer (%v)", w.end.Type)
}

// ready moves the QP to RTR and RTS with the exchanged attributes.
func (w *waiter) ready(dev *stack.Device, at cm.QPAttrs) error {
	mtu := stack.MTU(at.PathMTU)
	if active := dev.Query().ActiveMTU; mtu == 0 || mtu > active {
		mtu = active
	}
	if err := w.qp.ToRTR(stack.RTRAttr{DestQPN: at.DestQPN, AH: stack.AHAttr{DGID: w.peer, SGIDIndex: w.sgid},
		RQPSN: at.RQPSN, PathMTU: mtu, MaxDestRdAtomic: at.MaxDestRdAtomic, MinRNRTimer: 12}); err != nil {
		return err
	}
	return w.qp.ToRTS(stack.RTSAttr{SQPSN: at.SQPSN, Timeout: at.Timeout, RetryCnt: at.RetryCnt,
		RNRRetry: at.RNRRetry, MaxRdAtomic: at.MaxRdAtomic})
}

// Listener takes connection requests for a port of rdma_cm's TCP port
// space (rdma_listen), like a net.Listener.
type Listener struct {
	a      *Agent
	sid    mad.ServiceID
	port   uint16
	addr   netip.Addr // the zero Addr: any of the device's
	ch     chan *ConnRequest
	closed chan struct{}
	once   sync.Once
}

// Listen listens on port of the device's addresses, through its agent.
func Listen(dev *stack.Device, port uint16) (*Listener, error) {
	a, err := AgentFor(dev)
	if err != nil {
		return nil, fmt.Errorf("listen %d: %w", port, err)
	}
	return a.Listen(netip.AddrPortFrom(netip.Addr{}, port))
}

// Listen listens on addr (the zero address: any of the device's).
func (a *Agent) Listen(addr netip.AddrPort) (*Listener, error) {
	return a.listen(addr, ServiceID(addr.Port()))
}

// ListenUD listens on addr in the UDP port space: its requests are
// SIDR_REQs for UD QPs (ConnRequest.UD), answered with AcceptUD.
func (a *Agent) ListenUD(addr netip.AddrPort) (*Listener, error) {
	return a.listen(addr, UDPServiceID(addr.Port()))
}

func (a *Agent) listen(addr netip.AddrPort, sid mad.ServiceID) (*Listener, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("listen %v: %w", addr, stack.ErrClosed)
	}
	if a.listeners[sid] != nil {
		return nil, fmt.Errorf("listen %v: %w", addr, ErrInUse)
	}
	if err := a.m.Listen(sid); err != nil {
		return nil, fmt.Errorf("listen %v: %w", addr, err)
	}
	l := &Listener{a: a, sid: sid, port: addr.Port(), addr: addr.Addr().Unmap(), ch: make(chan *ConnRequest, a.cfg.Backlog),
		closed: make(chan struct{})}
	a.listeners[sid] = l
	return l, nil
}

// Port returns the port listened on.
func (l *Listener) Port() uint16 { return l.port }

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.ch:
		return r, nil
	case <-l.closed:
		return nil, fmt.Errorf("accept: %w", ErrListenerClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("accept: %w", ctx.Err())
	}
}

// Close stops listening; requests not taken yet are rejected.
func (l *Listener) Close() error {
	a := l.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listeners[l.sid] == l {
		delete(a.listeners, l.sid)
		a.m.Unlisten(l.sid)
	}
	l.shut()
	for {
		select {
		case r := <-l.ch:
			if r.ud {
				a.m.AnswerSIDR(a.now(), r.id, mad.SIDRREPFields{Status: mad.SIDRRejected})
				continue
			}
			a.m.Reject(a.now(), r.id, mad.RejConsumer, nil, nil)
			delete(a.waiters, r.id)
		default:
			a.flushLocked()
			return nil
		}
	}
}

func (l *Listener) shut() { l.once.Do(func() { close(l.closed) }) }

// ConnRequest is a connection request (RDMA_CM_EVENT_CONNECT_REQUEST):
// the peer's addresses and private data; answer it with Accept or
// Reject.
type ConnRequest struct {
	a    *Agent
	id   cm.ID
	ud   bool // a SIDR_REQ
	req  mad.REQFields
	peer netip.Addr // the CM's address the REQ came from
	// Remote and Local are the addresses of the addressing header: the
	// peer's and the one it dialed.
	Remote, Local netip.AddrPort
	// PrivateData is the application's data after the addressing header
	// (56 bytes, zero padded, as librdmacm delivers it).
	PrivateData []byte
}

// AcceptOptions are the connection's read/atomic resources (default 1
// each, as rping asks); the REQ's offer trims them.
type AcceptOptions struct {
	ResponderResources uint8
	InitiatorDepth     uint8
}

// Accept connects the request to q, an RC QP of the device in RESET or
// INIT: it moves q to RTR and RTS with the REQ's values, sends the REP
// with priv (at most MaxAcceptData bytes) and waits for the RTU
// (rdma_accept and RDMA_CM_EVENT_ESTABLISHED).
func (r *ConnRequest) Accept(q *stack.QP, priv []byte) (*Conn, error) {
	return r.AcceptWith(q, priv, AcceptOptions{})
}

// AcceptWith is Accept with options.
func (r *ConnRequest) AcceptWith(q *stack.QP, priv []byte, o AcceptOptions) (*Conn, error) {
	p, err := r.Answer(q, priv, o)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// Offer returns what the REQ offers, as the passive side sees it: its
// responder resources are the peer's initiator depth and the other way
// round (the values of RDMA_CM_EVENT_CONNECT_REQUEST).
func (r *ConnRequest) Offer() (responderResources, initiatorDepth uint8) {
	return r.req.InitiatorDepth, r.req.ResponderResources
}

// Answering is an accepted request whose REP is on its way: Wait for
// the RTU.
type Answering struct {
	r *ConnRequest
	w *waiter
	q *stack.QP
}

// Answer is the first half of AcceptWith: when it returns, q is in RTS
// and the REP is sent (what rdma_accept has done when it returns).
func (r *ConnRequest) Answer(q *stack.QP, priv []byte, o AcceptOptions) (*Answering, error) {
	a := r.a
	if len(priv) > MaxAcceptData {
		return nil, fmt.Errorf("accept: private data: %d bytes, %d fit", len(priv), MaxAcceptData)
	}
	if o.ResponderResources == 0 {
		o.ResponderResources = 1
	}
	if o.InitiatorDepth == 0 {
		o.InitiatorDepth = 1
	}
	sgid, _, err := sourceGID(a.dev, r.peer, r.Local.Addr())
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	if q.Type() != stack.RC {
		return nil, fmt.Errorf("accept: QP 0x%x is not RC: %w", q.QPN(), stack.ErrInvalidArg)
	}
	if st, _ := q.Query(); st.State == stack.StateReset {
		if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead}); err != nil {
			return nil, fmt.Errorf("accept: %w", err)
		}
	}
	rep := cm.Answer(&r.req, q.QPN(), randPSN(), o.ResponderResources, o.InitiatorDepth, 7, 0)
	copy(rep.PrivateData[:], priv)

	a.mu.Lock()
	w := a.waiters[r.id]
	if w == nil || a.m.State(r.id) != cm.ReqRcvd && a.m.State(r.id) != cm.MRAReqSent {
		a.mu.Unlock()
		return nil, fmt.Errorf("accept: %w", ErrGone)
	}
	w.qp, w.sgid, w.peer = q, sgid, r.peer
	if err := w.ready(a.dev, cm.QPAttrsFor(false, &r.req, &rep)); err != nil {
		a.m.Reject(a.now(), r.id, mad.RejNoResources, nil, nil)
		delete(a.waiters, r.id)
		a.flushLocked()
		a.mu.Unlock()
		return nil, fmt.Errorf("accept: %w", err)
	}
	err = a.m.Accept(a.now(), r.id, rep)
	a.flushLocked()
	a.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return &Answering{r: r, w: w, q: q}, nil
}

// Wait waits for the RTU (RDMA_CM_EVENT_ESTABLISHED), or for the
// connection's end.
func (p *Answering) Wait() (*Conn, error) {
	r, w, a := p.r, p.w, p.r.a
	select {
	case <-w.estab:
	case <-w.gone:
		a.mu.Lock()
		early := w.err == nil && w.end.Type == cm.EventDisconnectRequest
		err := w.result()
		a.mu.Unlock()
		if !early {
			return nil, fmt.Errorf("accept: %w", err)
		}
		// A DREQ before the RTU: the RTU was lost, and the active side,
		// established, has disconnected already. rdma_accept succeeds
		// then, and RDMA_CM_EVENT_DISCONNECTED follows: the connection
		// is returned ended (Done is closed).
	}
	var early bool
	select {
	case <-w.estab:
	default:
		early = true
	}
	return &Conn{a: a, id: r.id, w: w, qp: p.q, manual: p.q == nil, Local: r.Local, Remote: r.Remote,
		PrivateData: r.PrivateData, noRTU: early}, nil
}

// Reject refuses the request with a REJ "consumer reject" carrying
// priv (at most MaxRejectData bytes).
func (r *ConnRequest) Reject(priv []byte) error {
	a := r.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.ud {
		f := mad.SIDRREPFields{Status: mad.SIDRRejected}
		copy(f.PrivateData[:], priv)
		err := a.m.AnswerSIDR(a.now(), r.id, f)
		a.flushLocked()
		if err != nil {
			return fmt.Errorf("reject: %w", err)
		}
		return nil
	}
	delete(a.waiters, r.id)
	err := a.m.Reject(a.now(), r.id, mad.RejConsumer, nil, priv)
	a.flushLocked()
	if err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	return nil
}

// DialOptions tune Dial; zero values take the defaults.
type DialOptions struct {
	// Source is the local address (default: the device's first address
	// of the destination's family) and port (default: random).
	Source netip.AddrPort
	// ResponderResources and InitiatorDepth are the READ/atomic
	// resources offered (default 1 each).
	ResponderResources uint8
	InitiatorDepth     uint8
	// RetryCount and RNRRetryCount are the REQ's (default 7 each, as
	// rping asks), taken as given when SetRetry is true.
	RetryCount, RNRRetryCount uint8
	SetRetry                  bool
	// QP, when set, is the caller's RC QP of the device (in RESET or
	// INIT) to connect instead of one Dial creates: receives posted in
	// INIT are then in place before the peer can send. Close leaves it
	// to the caller to destroy.
	QP *stack.QP
}

// Dial connects to addr through the device's agent (rdma_connect after
// address and route resolution): it creates an RC QP in pd with init
// (Type is set to RC), sends a REQ with priv (at most MaxDialData
// bytes) after the addressing header, moves the QP to RTR and RTS from
// the REP, sends the RTU and returns the connection. Close destroys the
// QP.
func Dial(ctx context.Context, dev *stack.Device, pd *stack.PD, addr netip.AddrPort, init stack.QPInit, priv []byte) (*Conn, error) {
	a, err := AgentFor(dev)
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	return a.Dial(ctx, pd, addr, init, priv, DialOptions{})
}

// buildREQ builds the REQ of a connection to port at to, with priv
// after the addressing header; it returns the local address and the
// source GID's index too.
func (a *Agent) buildREQ(to netip.Addr, port uint16, priv []byte, o *DialOptions) (mad.REQFields, netip.AddrPort, int, error) {
	sgid, src, err := sourceGID(a.dev, to, o.Source.Addr())
	if err != nil {
		return mad.REQFields{}, netip.AddrPort{}, 0, err
	}
	sport := o.Source.Port()
	if sport == 0 {
		sport = uint16(32768 + rand.IntN(28232))
	}
	if o.ResponderResources == 0 {
		o.ResponderResources = 1
	}
	if o.InitiatorDepth == 0 {
		o.InitiatorDepth = 1
	}
	retry, rnr := uint8(7), uint8(7)
	if o.SetRetry {
		retry, rnr = min(o.RetryCount, 7), min(o.RNRRetryCount, 7)
	}
	local := netip.AddrPortFrom(src, sport)
	req, err := RequestFields(local, netip.AddrPortFrom(to, port), mad.MTU(a.dev.Query().ActiveMTU), priv)
	if err != nil {
		return mad.REQFields{}, netip.AddrPort{}, 0, err
	}
	req.ResponderResources, req.InitiatorDepth = o.ResponderResources, o.InitiatorDepth
	req.RemoteCMResponseTimeout, req.LocalCMResponseTimeout = a.cfg.ResponseTimeout, a.cfg.ResponseTimeout
	req.RetryCount, req.RNRRetryCount, req.MaxCMRetries = retry, rnr, a.cfg.MaxRetries
	return req, local, sgid, nil
}

// RequestFields returns the REQ an RDMA CM client sends from local to
// the listener at remote (the TCP port space's service ID, rdma_cm's
// private-data header followed by priv): an RC connection of path MTU
// mtu, one READ/atomic each way, retry and RNR retry 7, rdma_cm's
// response timeout (code 20) and 15 CM retries. The caller sets the QPN
// and starting PSN; package cm's Connect sets the communication ID.
func RequestFields(local, remote netip.AddrPort, mtu mad.MTU, priv []byte) (mad.REQFields, error) {
	req := mad.REQFields{ServiceID: ServiceID(remote.Port()), ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, TransportType: mad.TransportRC, RetryCount: 7,
		PKey: 0xffff, PathMTU: mtu, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.PathFields{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: local.Addr(), RemoteGID: remote.Addr(),
			HopLimit: 64, LocalACKTimeout: 19}}
	if err := requestData(req.PrivateData[:], local, remote, priv); err != nil {
		return mad.REQFields{}, err
	}
	return req, nil
}

// Dial is the package's Dial on this agent's device, with options.
func (a *Agent) Dial(ctx context.Context, pd *stack.PD, addr netip.AddrPort, init stack.QPInit, priv []byte, o DialOptions) (*Conn, error) {
	to := addr.Addr().Unmap()
	req, local, sgid, err := a.buildREQ(to, addr.Port(), priv, &o)
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	q, own := o.QP, o.QP == nil
	if own {
		init.Type = stack.RC
		var err error
		if q, err = pd.CreateQP(init); err != nil {
			return nil, fmt.Errorf("dial %v: %w", addr, err)
		}
	} else if q.Type() != stack.RC {
		return nil, fmt.Errorf("dial %v: QP 0x%x is not RC", addr, q.QPN())
	}
	fail := func(err error) (*Conn, error) {
		if own {
			q.Destroy()
		}
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	if st, _ := q.Query(); st.State == stack.StateReset {
		if err := q.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead}); err != nil {
			return fail(err)
		}
	}
	req.LocalQPN, req.StartingPSN = q.QPN(), randPSN()

	w := &waiter{qp: q, sgid: sgid, peer: to, estab: make(chan struct{}), gone: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return fail(stack.ErrClosed)
	}
	id, err := a.m.Connect(a.now(), to, req)
	if err != nil {
		a.mu.Unlock()
		return fail(err)
	}
	a.waiters[id] = w
	a.flushLocked()
	a.mu.Unlock()

	select {
	case <-w.estab:
	case <-w.gone:
		a.mu.Lock()
		err := w.result()
		a.mu.Unlock()
		return fail(err)
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.waiters, id)
		a.m.Disconnect(a.now(), id, nil)
		a.flushLocked()
		a.mu.Unlock()
		return fail(ctx.Err())
	}
	a.mu.Lock()
	peerData := w.priv
	a.mu.Unlock()
	return &Conn{a: a, id: id, w: w, qp: q, ownQP: own, Local: local, Remote: netip.AddrPortFrom(to, addr.Port()),
		PrivateData: peerData}, nil
}

// Conn is an established connection: its QP is in RTS, connected to the
// peer's.
type Conn struct {
	a      *Agent
	id     cm.ID
	w      *waiter
	qp     *stack.QP // nil when manual
	ownQP  bool
	manual bool
	attrs  QPAttrs // manual
	once   sync.Once
	// noRTU: accepted, and disconnected by a DREQ that came before the
	// RTU (NeverEstablished).
	noRTU bool
	// Local and Remote are the connection's addresses.
	Local, Remote netip.AddrPort
	// PrivateData is the peer's: the REP's (Dial) or the REQ's after
	// the addressing header (Accept).
	PrivateData []byte
}

// QP returns the connection's QP.
func (c *Conn) QP() *stack.QP { return c.qp }

// NeverEstablished reports an accepted connection that the peer
// disconnected before its RTU came (the RTU was lost): it ended without
// reaching ESTABLISHED on this side, as the kernel's rdma_cm reports
// RDMA_CM_EVENT_DISCONNECTED alone then. Done is closed.
func (c *Conn) NeverEstablished() bool { return c.noRTU }

// Done is closed when the connection ends: the peer disconnected
// (RDMA_CM_EVENT_DISCONNECTED; the QP is then in ERR) or Close ran.
func (c *Conn) Done() <-chan struct{} { return c.w.gone }

// Close disconnects (rdma_disconnect): a DREQ, then wait for the DREP
// (or the CM's retries); the QP goes to ERR and, when Dial created it,
// is destroyed.
func (c *Conn) Close() error {
	c.once.Do(func() {
		a := c.a
		a.mu.Lock()
		a.m.Disconnect(a.now(), c.id, nil)
		wait := a.m.State(c.id) == cm.DREQSent
		if !wait {
			c.w.finish(cm.Event{Type: cm.EventDisconnected, ID: c.id}, nil)
			delete(a.waiters, c.id)
		}
		a.flushLocked()
		a.mu.Unlock()
		<-c.w.gone
		// The DREP answering a peer's DREQ may still be queued on QP1:
		// let it go out before the caller closes the device.
		a.drainSends(drainWait)
		if c.qp != nil {
			c.qp.ToErr()
		}
		if c.ownQP {
			c.qp.Destroy()
		}
	})
	return nil
}
