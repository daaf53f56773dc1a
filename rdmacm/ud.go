package rdmacm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/uroce/uroce/cm"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

// UD "connections" (rdma_cm's UDP port space, udaddy): the active side
// resolves the peer's service to its QPN and Q_Key with SIDR; no QP
// changes state and nothing has to be torn down.

// SIDRError is a SIDR_REP that did not give a QP
// (RDMA_CM_EVENT_UNREACHABLE with the status).
type SIDRError struct {
	Status mad.SIDRStatus
	// PrivateData is the SIDR_REP's.
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("service id resolution: %s (%d)", e.Status, uint8(e.Status))
}

// UD reports whether the request is a SIDR_REQ (ListenUD): answer it
// with AcceptUD or Reject.
func (r *ConnRequest) UD() bool { return r.ud }

// AcceptUD answers a SIDR_REQ with the local UD QP's number and Q_Key
// and priv (at most MaxUDAcceptData bytes) (rdma_accept of a UD ID).
func (r *ConnRequest) AcceptUD(qpn, qkey uint32, priv []byte) error {
	if !r.ud {
		return fmt.Errorf("accept: not a UD request: %w", stack.ErrInvalidArg)
	}
	if len(priv) > MaxUDAcceptData {
		return fmt.Errorf("accept: private data: %d bytes, %d fit", len(priv), MaxUDAcceptData)
	}
	f := mad.SIDRREPFields{Status: mad.SIDRValid, QPN: qpn, QKey: qkey}
	copy(f.PrivateData[:], priv)
	a := r.a
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.m.AnswerSIDR(a.now(), r.id, f)
	a.flushLocked()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return nil
}

// UDPeer is a resolved UD service: where to send datagrams.
type UDPeer struct {
	QPN, QKey uint32
	// Remote is the peer's address; Local the source address, whose
	// GID index is SGIDIndex.
	Remote, Local netip.AddrPort
	SGIDIndex     int
	// PrivateData is the SIDR_REP's.
	PrivateData []byte
}

// ResolveUD resolves the UD service at addr (rdma_connect of a UD ID):
// a SIDR_REQ with the addressing header and priv (at most
// MaxResolveData bytes), resent until the answer comes.
func (a *Agent) ResolveUD(ctx context.Context, addr netip.AddrPort, priv []byte, o DialOptions) (*UDPeer, error) {
	to := addr.Addr().Unmap()
	sgid, src, err := sourceGID(a.dev, to, o.Source.Addr())
	if err != nil {
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	sport := o.Source.Port()
	if sport == 0 {
		sport = uint16(32768 + rand.IntN(28232))
	}
	local := netip.AddrPortFrom(src, sport)
	f := mad.SIDRREQFields{PKey: 0xffff, ServiceID: UDPServiceID(addr.Port())}
	if err := requestData(f.PrivateData[:], local, netip.AddrPortFrom(to, addr.Port()), priv); err != nil {
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	ch := make(chan cm.Event, 1)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("resolve %v: %w", addr, stack.ErrClosed)
	}
	id, err := a.m.ResolveSIDR(a.now(), to, f, a.cfg.ResponseTimeout, int(a.cfg.MaxRetries))
	if err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	a.sidrs[id] = ch
	a.flushLocked()
	a.mu.Unlock()
	var e cm.Event
	select {
	case e = <-ch:
	case <-ctx.Done():
		a.mu.Lock()
		delete(a.sidrs, id)
		a.m.CancelSIDR(id)
		a.mu.Unlock()
		return nil, fmt.Errorf("resolve %v: %w", addr, ctx.Err())
	}
	switch {
	case e.Type == cm.EventSIDRReply && e.SIDRREP.Status == mad.SIDRValid:
		return &UDPeer{QPN: e.SIDRREP.QPN, QKey: e.SIDRREP.QKey, Remote: netip.AddrPortFrom(to, addr.Port()),
			Local: local, SGIDIndex: sgid, PrivateData: e.PrivateData}, nil
	case e.Type == cm.EventSIDRReply:
		return nil, fmt.Errorf("resolve %v: %w", addr, &SIDRError{Status: e.SIDRREP.Status, PrivateData: e.PrivateData})
	case e.Type == cm.EventTimeout:
		return nil, fmt.Errorf("resolve %v: %w", addr, ErrUnreachable)
	}
	return nil, fmt.Errorf("resolve %v: %v", addr, e.Type)
}

// sidrEvent hands a SIDR event to whoever waits for it; reports whether
// the event was one.
func (a *Agent) sidrEvent(now cm.Time, e *cm.Event) bool {
	switch e.Type {
	case cm.EventSIDRRequest:
		src, dst, data, ok := parseSIDRRequest(e.SIDRREQ)
		l := a.listeners[e.ServiceID]
		if !ok || l == nil || (l.addr.IsValid() && l.addr != dst.Addr()) || a.dev.GIDIndex(dst.Addr()) < 0 {
			a.m.AnswerSIDR(now, e.ID, mad.SIDRREPFields{Status: mad.SIDRServiceIDUnknown})
			return true
		}
		r := &ConnRequest{a: a, id: e.ID, ud: true, peer: e.Peer, Remote: src, Local: dst, PrivateData: data}
		select {
		case l.ch <- r:
		default:
			a.m.AnswerSIDR(now, e.ID, mad.SIDRREPFields{Status: mad.SIDRNoQP})
		}
		return true
	case cm.EventSIDRReply, cm.EventTimeout:
		ch := a.sidrs[e.ID]
		if ch == nil {
			return e.Type == cm.EventSIDRReply
		}
		delete(a.sidrs, e.ID)
		ch <- *e
		return true
	}
	return false
}
