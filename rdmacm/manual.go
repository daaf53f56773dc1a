package rdmacm

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/cm"
	"github.com/uroce/uroce/stack"
)

// Connections whose QP the application moves itself (librdmacm's
// rdma_connect and rdma_accept of an ID without a QP, rping -q): the
// agent exchanges the MADs and says which attributes the QP takes
// (rdma_init_qp_attr); the active side sends the RTU when the
// application has moved its QP to RTS (rdma_establish).

// QPAttrs are the attributes of a QP the application moves itself, as
// rdma_init_qp_attr gives them: the CM's values, where the peer is and
// the path MTU (the REQ's, at most the device's).
type QPAttrs struct {
	cm.QPAttrs
	Peer      netip.Addr
	SGIDIndex int
	MTU       stack.MTU
}

func (a *Agent) qpAttrs(at cm.QPAttrs, peer netip.Addr, sgid int) QPAttrs {
	mtu := stack.MTU(at.PathMTU)
	if active := a.dev.Query().ActiveMTU; mtu == 0 || mtu > active {
		mtu = active
	}
	return QPAttrs{QPAttrs: at, Peer: peer, SGIDIndex: sgid, MTU: mtu}
}

// DialManual is Dial for a QP the caller moves itself, named by its
// number: it sends the REQ (starting at psn) and returns when the REP
// arrives (RDMA_CM_EVENT_CONNECT_RESPONSE). The caller moves its QP to
// RTR and RTS with the connection's QPAttrs, then calls Establish.
func (a *Agent) DialManual(ctx context.Context, qpn uint32, psn stack.PSN, addr netip.AddrPort, priv []byte, o DialOptions) (*Conn, error) {
	to := addr.Addr().Unmap()
	req, local, sgid, err := a.buildREQ(to, addr.Port(), priv, &o)
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	req.LocalQPN, req.StartingPSN = qpn&0xffffff, psn&0xffffff
	w := &waiter{manual: true, sgid: sgid, peer: to, estab: make(chan struct{}), gone: make(chan struct{}),
		replied: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("dial %v: %w", addr, stack.ErrClosed)
	}
	id, err := a.m.Connect(a.now(), to, req)
	if err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	a.waiters[id] = w
	replied := w.replied // closed, never replaced, when the REP comes
	a.flushLocked()
	a.mu.Unlock()
	select {
	case <-replied:
	case <-w.gone:
		a.mu.Lock()
		err := w.result()
		a.mu.Unlock()
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.waiters, id)
		a.m.Disconnect(a.now(), id, nil)
		a.flushLocked()
		a.mu.Unlock()
		return nil, fmt.Errorf("dial %v: %w", addr, ctx.Err())
	}
	a.mu.Lock()
	c := &Conn{a: a, id: id, w: w, manual: true, Local: local, Remote: netip.AddrPortFrom(to, addr.Port()),
		PrivateData: w.priv, attrs: a.qpAttrs(cm.QPAttrsFor(true, &req, &w.rep), to, sgid)}
	a.mu.Unlock()
	return c, nil
}

// QPAttrs returns the attributes the connection's QP takes (a
// connection of DialManual or AnswerManual).
func (c *Conn) QPAttrs() QPAttrs { return c.attrs }

// Establish sends the RTU of a DialManual connection once the caller's
// QP is in RTS (rdma_establish).
func (c *Conn) Establish() error {
	if !c.manual {
		return fmt.Errorf("establish: the agent moved this connection's QP: %w", stack.ErrInvalidArg)
	}
	a := c.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.m.ReadyToUse(a.now(), c.id, nil); err != nil {
		return fmt.Errorf("establish: %w", err)
	}
	a.flushLocked()
	return nil
}

// QPAttrs returns the attributes a QP accepting the request takes, its
// first PSN psn and the REQ's offer of READ resources (what
// rdma_init_qp_attr gives a passive side before rdma_accept).
func (r *ConnRequest) QPAttrs(psn stack.PSN) (QPAttrs, error) {
	sgid, _, err := sourceGID(r.a.dev, r.peer, r.Local.Addr())
	if err != nil {
		return QPAttrs{}, err
	}
	rr, id := r.Offer()
	rep := cm.Answer(&r.req, 0, psn, rr, id, 7, 0)
	return r.a.qpAttrs(cm.QPAttrsFor(false, &r.req, &rep), r.peer, sgid), nil
}

// AnswerManual is Answer for a QP the caller moved itself to RTS (with
// the request's QPAttrs of the same psn): the REP names qpn and psn.
func (r *ConnRequest) AnswerManual(qpn uint32, psn stack.PSN, priv []byte, o AcceptOptions) (*Answering, error) {
	a := r.a
	if len(priv) > MaxAcceptData {
		return nil, fmt.Errorf("accept: private data: %d bytes, %d fit", len(priv), MaxAcceptData)
	}
	// Unset, they are the REQ's offer, as the QPAttrs were.
	rr, id := r.Offer()
	if o.ResponderResources == 0 {
		o.ResponderResources = max(rr, 1)
	}
	if o.InitiatorDepth == 0 {
		o.InitiatorDepth = max(id, 1)
	}
	rep := cm.Answer(&r.req, qpn, psn, o.ResponderResources, o.InitiatorDepth, 7, 0)
	copy(rep.PrivateData[:], priv)
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.waiters[r.id]
	if w == nil || a.m.State(r.id) != cm.ReqRcvd && a.m.State(r.id) != cm.MRAReqSent {
		return nil, fmt.Errorf("accept: %w", ErrGone)
	}
	w.manual, w.peer = true, r.peer
	if err := a.m.Accept(a.now(), r.id, rep); err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	a.flushLocked()
	return &Answering{r: r, w: w}, nil
}
