package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// RDMA CM for the clients (proto/SPEC.md, "Connection management"): the
// device's rdmacm agent does the CM; each client ID is a cmIDObj whose
// events wait in a cmChannelObj until the client takes them. Requests
// that wait for the network (address resolution, connect, accept,
// disconnect) answer at once and run on a goroutine of their own, which
// reports the outcome as an event.

// maxCMEvents bounds the events a channel holds.
const maxCMEvents = 1024

// cmChannelObj is an RDMA CM event channel.
type cmChannelObj struct {
	efd int // EFD_SEMAPHORE: one count per queued event

	mu      sync.Mutex
	q       []proto.CMEvent
	dropped uint64
	closed  bool
}

// push queues ev and counts it on the eventfd; false when the channel is
// full or gone.
func (c *cmChannelObj) push(ev *proto.CMEvent) bool {
	c.mu.Lock()
	if c.closed || len(c.q) >= maxCMEvents {
		c.dropped++
		c.mu.Unlock()
		return false
	}
	c.q = append(c.q, *ev)
	c.mu.Unlock()
	c.signal(1)
	return true
}

func (c *cmChannelObj) signal(n uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	unix.Write(c.efd, b[:])
}

func (c *cmChannelObj) pop() (proto.CMEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return proto.CMEvent{}, false
	}
	ev := c.q[0]
	c.q = c.q[1:]
	return ev, true
}

// take removes and returns the queued events of ID h (a listener's
// connection requests among them).
func (c *cmChannelObj) take(h uint32) []proto.CMEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []proto.CMEvent
	keep := c.q[:0]
	for _, ev := range c.q {
		if ev.ID == h || ev.Type == proto.CMEventConnectRequest && ev.ListenID == h {
			out = append(out, ev)
		} else {
			keep = append(keep, ev)
		}
	}
	c.q = keep
	return out
}

func (c *cmChannelObj) close() error {
	c.mu.Lock()
	c.closed, c.q = true, nil
	c.mu.Unlock()
	return unix.Close(c.efd)
}

// States of a CM ID, as far as the daemon needs them.
type cmState int

const (
	cmIdle cmState = iota
	cmAddrQuery
	cmAddrResolved
	cmRouteResolved
	cmListening
	cmConnecting // connect sent, or request accepted
	cmRequest    // a connection request waits for accept or reject
	cmReplied    // manual, active: the REP came, the client moves its QP, then establishes
	cmConnected
	cmDisconnected
)

// cmIDObj is an RDMA CM ID of a session.
type cmIDObj struct {
	ss     *session
	handle uint32
	ps     uint32
	qpType uint32

	mu        sync.Mutex
	ch        *cmChannelObj
	state     cmState
	destroyed bool
	tried     bool // connect or accept ran: disconnect is then never wrong
	bound     bool
	src, dst  netip.AddrPort
	sgid      int
	dmac      [6]byte
	cancel    context.CancelFunc // of what runs on the ID's behalf
	ln        *rdmacm.Listener
	req       *rdmacm.ConnRequest
	conn      *rdmacm.Conn
	qp        *stack.QP // nil: the client moves its QP itself (manual)
	// Manual connections: the PSN the REQ or REP names, and the QP's
	// attributes once known (CMInitQPAttr).
	manual bool
	psn    stack.PSN
	attrs  *rdmacm.QPAttrs
}

// emit queues an event of the ID on its channel, unless the ID is gone.
func (id *cmIDObj) emit(ev *proto.CMEvent) bool {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		return false
	}
	defer id.mu.Unlock()
	ev.ID = id.handle
	if ev.Route == (proto.CMRoute{}) {
		ev.Route = id.routeLocked()
	}
	// Pushed under the ID's lock, so that a migration moves either
	// this event or none (lock order: ID, then channel).
	return id.ch.push(ev)
}

func (id *cmIDObj) routeLocked() proto.CMRoute {
	r := proto.CMRoute{Src: cmAddrTo(id.src), Dst: cmAddrTo(id.dst), SGIDIndex: uint32(id.sgid), DMAC: id.dmac,
		HopLimit: 64, Bound: b2u8(id.bound)}
	if id.src.Addr().IsValid() {
		r.SGID = id.src.Addr().As16()
	}
	if id.dst.Addr().IsValid() {
		r.DGID = id.dst.Addr().As16()
	}
	r.PathMTU = uint32(id.ss.srv.cfg.Device.Query().ActiveMTU)
	return r
}

func (id *cmIDObj) route() proto.CMRoute {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.routeLocked()
}

// agent returns the device's CM agent, started on first use.
func (ss *session) agent() (*rdmacm.Agent, error) {
	a, err := rdmacm.AgentFor(ss.srv.cfg.Device)
	if err != nil {
		return nil, errnoErr{unix.ENODEV, fmt.Sprintf("rdma cm: %v", err)}
	}
	return a, nil
}

// handleCM runs the RDMA CM requests.
func (ss *session) handleCM(h proto.Header, body []byte) (any, int, error) {
	switch h.Op {
	case proto.OpCMCreateChannel:
		if err := ss.room(kindCMChannel); err != nil {
			return nil, -1, err
		}
		// Not EFD_NONBLOCK: the flag belongs to the file, which the
		// client shares; its reads block unless it asks otherwise. The
		// daemon only writes, which blocks only at a count of 2^64-1.
		efd, dup, err := eventfdPair(unix.EFD_SEMAPHORE)
		if err != nil {
			return nil, -1, err
		}
		hd, _ := ss.add(kindCMChannel, &cmChannelObj{efd: efd})
		return &proto.ChannelResp{Channel: hd}, dup, nil
	case proto.OpCMDestroyChannel:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		ch, err := get[*cmChannelObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		ss.mu.RLock()
		for _, o := range ss.objs {
			if id, ok := o.(*cmIDObj); ok && id.channel() == ch {
				ss.mu.RUnlock()
				return nil, -1, errnoErr{unix.EBUSY, "destroy event channel: an id uses it"}
			}
		}
		ss.mu.RUnlock()
		return ss.destroyHandle(body, kindCMChannel)
	case proto.OpCMCreateID:
		var req proto.CMCreateID
		proto.Unmarshal(body, &req)
		ch, err := get[*cmChannelObj](ss, req.Channel)
		if err != nil {
			return nil, -1, err
		}
		switch {
		case req.PS == proto.PSTCP && (req.QPType == proto.QPTypeRC || req.QPType == 0):
			req.QPType = proto.QPTypeRC
		case req.PS == proto.PSIPoIB:
			return nil, -1, errnoErr{unix.EOPNOTSUPP, "create id: the IPoIB port space is not supported (TCP and UDP are)"}
		case req.PS == proto.PSUDP && (req.QPType == proto.QPTypeUD || req.QPType == 0):
			req.QPType = proto.QPTypeUD
		default:
			return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("create id: port space %#x with qp type %d", req.PS, req.QPType)}
		}
		if err := ss.room(kindCMID); err != nil {
			return nil, -1, err
		}
		if _, err := ss.agent(); err != nil {
			return nil, -1, err
		}
		id := &cmIDObj{ss: ss, ps: req.PS, qpType: req.QPType, ch: ch}
		id.handle, _ = ss.add(kindCMID, id)
		return &proto.Handle{Handle: id.handle}, -1, nil
	case proto.OpCMDestroyID:
		return ss.destroyHandle(body, kindCMID)
	case proto.OpCMMigrateID:
		var req proto.CMMigrateID
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		ch, err := get[*cmChannelObj](ss, req.Channel)
		if err != nil {
			return nil, -1, err
		}
		id.mu.Lock()
		if old := id.ch; old != ch && old != nil {
			// The ID's queued events go along (as the kernel's
			// rdma_migrate_id moves them). The old channel's eventfd
			// keeps their counts: its reader finds no event (EAGAIN)
			// and waits again.
			for _, ev := range old.take(id.handle) {
				ch.push(&ev)
			}
			id.ch = ch
		}
		id.mu.Unlock()
		return nil, -1, nil
	case proto.OpCMBind:
		var req proto.CMBind
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return ss.cmBind(id, &req)
	case proto.OpCMResolveAddr:
		var req proto.CMResolve
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return ss.cmResolveAddr(id, &req)
	case proto.OpCMResolveRoute:
		var req proto.CMResolve
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		id.mu.Lock()
		if id.state != cmAddrResolved && id.state != cmRouteResolved {
			id.mu.Unlock()
			return nil, -1, errnoErr{unix.EINVAL, "resolve route: the address is not resolved"}
		}
		id.state = cmRouteResolved
		id.mu.Unlock()
		id.emit(&proto.CMEvent{Type: proto.CMEventRouteResolved})
		return ptr(id.route()), -1, nil
	case proto.OpCMListen:
		var req proto.CMListen
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.cmListen(id)
	case proto.OpCMConnect:
		var req proto.CMConnect
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.cmConnect(id, &req)
	case proto.OpCMAccept:
		var req proto.CMConnect
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.cmAccept(id, &req)
	case proto.OpCMReject:
		var req proto.CMReject
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		id.mu.Lock()
		r := id.req
		if id.state != cmRequest || r == nil {
			id.mu.Unlock()
			return nil, -1, errnoErr{unix.EINVAL, "reject: the id has no connection request"}
		}
		id.state, id.req = cmIdle, nil
		id.mu.Unlock()
		n := min(int(req.PrivateDataLen), len(req.PrivateData))
		if err := r.Reject(req.PrivateData[:n]); err != nil {
			return nil, -1, errnoErr{unix.EINVAL, err.Error()}
		}
		return nil, -1, nil
	case proto.OpCMDisconnect:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		return nil, -1, ss.cmDisconnect(id)
	case proto.OpCMInitQPAttr:
		var req proto.CMInitQPAttr
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.ID)
		if err != nil {
			return nil, -1, err
		}
		return id.initQPAttr(req.State)
	case proto.OpCMEstablish:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		id, err := get[*cmIDObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		id.mu.Lock()
		c := id.conn
		if id.state != cmReplied || c == nil {
			id.mu.Unlock()
			return nil, -1, errnoErr{unix.EINVAL, "establish: no connect response to complete"}
		}
		id.state = cmConnected
		id.mu.Unlock()
		if err := c.Establish(); err != nil {
			return nil, -1, errnoErr{unix.EINVAL, err.Error()}
		}
		return nil, -1, nil
	case proto.OpCMGetEvent:
		var req proto.Handle
		proto.Unmarshal(body, &req)
		ch, err := get[*cmChannelObj](ss, req.Handle)
		if err != nil {
			return nil, -1, err
		}
		ev, ok := ch.pop()
		if !ok {
			return nil, -1, errnoErr{unix.EAGAIN, "no event"}
		}
		return &ev, -1, nil
	}
	return nil, -1, errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("%v: not supported", h.Op)}
}

func (id *cmIDObj) channel() *cmChannelObj {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ch
}

// cmBind binds an ID to an address of the device (or any) and a port
// (0: a free one when it listens or connects).
func (ss *session) cmBind(id *cmIDObj, req *proto.CMBind) (any, int, error) {
	ap, err := cmAddrFrom(req.Addr)
	if err != nil {
		return nil, -1, err
	}
	d := ss.srv.cfg.Device
	if ap.Addr().IsValid() && !ap.Addr().IsUnspecified() && d.GIDIndex(ap.Addr()) < 0 {
		return nil, -1, errnoErr{unix.EADDRNOTAVAIL, fmt.Sprintf("bind %v: not an address of %s", ap.Addr(), ss.srv.cfg.Name)}
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.bound || id.state != cmIdle {
		return nil, -1, errnoErr{unix.EINVAL, "bind: the id is bound already"}
	}
	id.src, id.bound = ap, true
	if ap.Addr().IsValid() && !ap.Addr().IsUnspecified() {
		id.sgid = d.GIDIndex(ap.Addr())
	}
	return ptr(id.routeLocked()), -1, nil
}

// cmResolveAddr picks the source address at once and resolves the
// peer's MAC on a goroutine: ADDR_RESOLVED or ADDR_ERROR.
func (ss *session) cmResolveAddr(id *cmIDObj, req *proto.CMResolve) (any, int, error) {
	dst, err := cmAddrFrom(req.Dst)
	if err != nil || !dst.Addr().IsValid() || dst.Addr().IsUnspecified() {
		return nil, -1, errnoErr{unix.EINVAL, "resolve addr: no destination address"}
	}
	src, err := cmAddrFrom(req.Src)
	if err != nil {
		return nil, -1, err
	}
	d := ss.srv.cfg.Device
	id.mu.Lock()
	if id.state != cmIdle && id.state != cmAddrResolved {
		id.mu.Unlock()
		return nil, -1, errnoErr{unix.EINVAL, "resolve addr: the id is in use"}
	}
	if !src.Addr().IsValid() && id.bound {
		src = id.src
	}
	if src.Addr().IsUnspecified() {
		src = netip.AddrPortFrom(netip.Addr{}, src.Port())
	}
	sgid, saddr, serr := rdmacm.SourceFor(d, dst.Addr(), src.Addr())
	if serr != nil {
		id.mu.Unlock()
		return nil, -1, errnoErr{unix.EADDRNOTAVAIL, fmt.Sprintf("resolve addr %v: %v", dst.Addr(), serr)}
	}
	port := src.Port()
	if port == 0 {
		port = uint16(32768 + rand.IntN(28232))
	}
	id.src, id.dst, id.sgid, id.bound = netip.AddrPortFrom(saddr, port), dst, sgid, true
	id.state = cmAddrQuery
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	id.cancel = cancel
	r := id.routeLocked()
	id.mu.Unlock()
	go func() {
		defer cancel()
		mac, err := d.ResolveMAC(ctx, dst.Addr())
		id.mu.Lock()
		if id.state != cmAddrQuery {
			id.mu.Unlock()
			return
		}
		ev := proto.CMEvent{Type: proto.CMEventAddrResolved}
		if err != nil {
			ev.Type, ev.Status = proto.CMEventAddrError, -int32(unix.EHOSTUNREACH)
			if errors.Is(err, context.DeadlineExceeded) {
				ev.Status = -int32(unix.ETIMEDOUT)
			}
			id.state = cmIdle
			ss.srv.log.Info("rdma cm: address not resolved", "session", ss.id, "dst", dst.Addr(), "err", err)
		} else {
			id.dmac, id.state = mac, cmAddrResolved
		}
		id.mu.Unlock()
		id.emit(&ev)
	}()
	return &r, -1, nil
}

// cmListen starts the ID's listener and the goroutine that turns its
// requests into CONNECT_REQUEST events with new IDs.
func (ss *session) cmListen(id *cmIDObj) error {
	a, err := ss.agent()
	if err != nil {
		return err
	}
	listen := a.Listen
	if id.qpType == proto.QPTypeUD {
		listen = a.ListenUD
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == cmListening {
		return nil
	}
	if id.state != cmIdle {
		return errnoErr{unix.EINVAL, "listen: the id is in use"}
	}
	addr := id.src
	if addr.Addr().IsUnspecified() {
		addr = netip.AddrPortFrom(netip.Addr{}, addr.Port())
	}
	var ln *rdmacm.Listener
	if addr.Port() == 0 {
		for range 64 {
			p := netip.AddrPortFrom(addr.Addr(), uint16(32768+rand.IntN(28232)))
			if ln, err = listen(p); err == nil {
				addr = p
				break
			}
		}
	} else {
		ln, err = listen(addr)
	}
	if err != nil {
		if errors.Is(err, rdmacm.ErrInUse) {
			return errnoErr{unix.EADDRINUSE, fmt.Sprintf("listen on port %d: %v", addr.Port(), err)}
		}
		return errnoErr{unix.EINVAL, fmt.Sprintf("listen: %v", err)}
	}
	id.src, id.bound, id.ln, id.state = addr, true, ln, cmListening
	ctx, cancel := context.WithCancel(context.Background())
	id.cancel = cancel
	go ss.acceptLoop(ctx, id, ln)
	return nil
}

func (ss *session) acceptLoop(ctx context.Context, id *cmIDObj, ln *rdmacm.Listener) {
	d := ss.srv.cfg.Device
	for {
		r, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		if ss.room(kindCMID) != nil {
			r.Reject(nil)
			continue
		}
		child := &cmIDObj{ss: ss, ps: id.ps, qpType: id.qpType, ch: id.channel(), state: cmRequest, req: r,
			src: r.Local, dst: r.Remote, bound: true}
		child.sgid, _, _ = rdmacm.SourceFor(d, r.Remote.Addr(), r.Local.Addr())
		child.psn = randPSN()
		child.handle, _ = ss.add(kindCMID, child)
		ev := proto.CMEvent{Type: proto.CMEventConnectRequest, ListenID: id.handle}
		ev.Param.ResponderResources, ev.Param.InitiatorDepth = r.Offer()
		ev.Param.PrivateDataLen = uint8(copy(ev.Param.PrivateData[:], r.PrivateData))
		if !r.UD() {
			ev.Param.RetryCount, ev.Param.RNRRetryCount = 7, 7
		}
		ev.Route = child.route()
		ev.ID = child.handle
		id.mu.Lock()
		child.mu.Lock()
		child.ch = id.ch // the listener's channel, now: it may have migrated
		child.mu.Unlock()
		queued := !id.destroyed && id.ch.push(&ev)
		id.mu.Unlock()
		if !queued {
			ss.mu.Lock()
			delete(ss.objs, child.handle)
			ss.count[kindCMID]--
			ss.mu.Unlock()
			r.Reject(nil)
		}
	}
}

// cmQP finds the QP a connect or accept names.
func (ss *session) cmQP(h, qpn uint32) (*qpObj, error) {
	if h != 0 {
		return get[*qpObj](ss, h)
	}
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, o := range ss.objs {
		if q, ok := o.(*qpObj); ok && q.q.QPN() == qpn {
			return q, nil
		}
	}
	return nil, errnoErr{unix.EINVAL, fmt.Sprintf("no qp 0x%x in this session", qpn)}
}

func checkCMQP(id *cmIDObj, q *qpObj) error {
	if id.qpType == proto.QPTypeUD {
		if q.typ != stack.UD {
			return errnoErr{unix.EINVAL, fmt.Sprintf("rdma cm: qp 0x%x is not UD, the id's type", q.q.QPN())}
		}
		return nil
	}
	if q.typ != stack.RC {
		return errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("rdma cm: qp 0x%x is not RC: only RC QPs are connected", q.q.QPN())}
	}
	st, _ := q.q.Query()
	if st.State != stack.StateReset && st.State != stack.StateInit {
		return errnoErr{unix.EINVAL, fmt.Sprintf("rdma cm: qp 0x%x is in %v, not RESET or INIT", q.q.QPN(), st.State)}
	}
	return nil
}

// cmRequestQP checks what a connect or accept (what) names: the QP,
// whether the client moves it itself (manual: no handle, an RC ID), and
// the private data's length, at most most bytes (mostUD for a UD ID).
func (ss *session) cmRequestQP(id *cmIDObj, req *proto.CMConnect, what string, most, mostUD int) (q *qpObj, manual bool, n int, err error) {
	if q, err = ss.cmQP(req.QP, req.Param.QPN); err != nil {
		return nil, false, 0, err
	}
	manual = req.QP == 0 && id.qpType == proto.QPTypeRC
	if manual {
		if q.typ != stack.RC {
			return nil, false, 0, errnoErr{unix.EOPNOTSUPP, fmt.Sprintf("%s: qp 0x%x is not RC", what, q.q.QPN())}
		}
	} else if err := checkCMQP(id, q); err != nil {
		return nil, false, 0, err
	}
	if id.qpType == proto.QPTypeUD {
		most = mostUD
	}
	if n = int(req.Param.PrivateDataLen); n > most {
		return nil, false, 0, errnoErr{unix.EINVAL, fmt.Sprintf("%s: %d bytes of private data, %d fit", what, n, most)}
	}
	return q, manual, n, nil
}

// cmConnect sends the REQ on a goroutine that reports ESTABLISHED,
// REJECTED or UNREACHABLE.
func (ss *session) cmConnect(id *cmIDObj, req *proto.CMConnect) error {
	a, err := ss.agent()
	if err != nil {
		return err
	}
	q, manual, n, err := ss.cmRequestQP(id, req, "connect", rdmacm.MaxDialData, rdmacm.MaxResolveData)
	if err != nil {
		return err
	}
	id.mu.Lock()
	if id.state != cmRouteResolved {
		id.mu.Unlock()
		return errnoErr{unix.EINVAL, "connect: the route is not resolved"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	id.state, id.cancel, id.qp, id.tried = cmConnecting, cancel, q.q, true
	if manual {
		id.qp, id.psn, id.manual = nil, randPSN(), true
	}
	psn := id.psn
	dst, o := id.dst, rdmacm.DialOptions{Source: id.src, QP: q.q, ResponderResources: req.Param.ResponderResources,
		InitiatorDepth: req.Param.InitiatorDepth, RetryCount: req.Param.RetryCount,
		RNRRetryCount: req.Param.RNRRetryCount, SetRetry: true}
	id.mu.Unlock()
	priv := append([]byte(nil), req.Param.PrivateData[:n]...)
	if manual {
		// The client moves its QP: CONNECT_RESPONSE when the REP
		// comes, the RTU when it establishes.
		qpn := q.q.QPN()
		go func() {
			c, err := a.DialManual(ctx, qpn, psn, dst, priv, o)
			cancel()
			ss.connected(id, c, err)
		}()
		return nil
	}
	if id.qpType == proto.QPTypeUD {
		go func() {
			peer, err := a.ResolveUD(ctx, dst, priv, o)
			cancel()
			ss.resolvedUD(id, peer, err)
		}()
		return nil
	}
	go func() {
		c, err := a.Dial(ctx, nil, dst, stack.QPInit{}, priv, o)
		cancel()
		ss.connected(id, c, err)
	}()
	return nil
}

// cmAccept answers a connection request: when it returns the QP is in
// RTS and the REP sent; ESTABLISHED follows the RTU.
func (ss *session) cmAccept(id *cmIDObj, req *proto.CMConnect) error {
	q, manual, n, err := ss.cmRequestQP(id, req, "accept", rdmacm.MaxAcceptData, rdmacm.MaxUDAcceptData)
	if err != nil {
		return err
	}
	id.mu.Lock()
	r := id.req
	if id.state != cmRequest || r == nil {
		id.mu.Unlock()
		return errnoErr{unix.EINVAL, "accept: the id has no connection request"}
	}
	if r.UD() {
		// SIDR: the answer names the QP; nothing changes state and no
		// event follows on this side.
		id.state, id.req = cmConnected, nil
		id.mu.Unlock()
		st, _ := q.q.Query()
		qkey := st.QKey
		if req.Param.QKey != 0 {
			qkey = req.Param.QKey
		}
		if err := r.AcceptUD(q.q.QPN(), qkey, req.Param.PrivateData[:n]); err != nil {
			return errnoErr{unix.EINVAL, err.Error()}
		}
		return nil
	}
	id.state, id.req, id.qp, id.tried = cmConnecting, nil, q.q, true
	psn := id.psn
	if manual {
		id.qp, id.manual = nil, true
		if at, err := r.QPAttrs(psn); err == nil {
			id.attrs = &at
		}
	}
	id.mu.Unlock()
	opts := rdmacm.AcceptOptions{ResponderResources: req.Param.ResponderResources, InitiatorDepth: req.Param.InitiatorDepth}
	var p *rdmacm.Answering
	if manual {
		// The client moved its QP to RTS with CMInitQPAttr's values.
		p, err = r.AnswerManual(q.q.QPN(), psn, req.Param.PrivateData[:n], opts)
	} else {
		p, err = r.Answer(q.q, req.Param.PrivateData[:n], opts)
	}
	if err != nil {
		id.mu.Lock()
		id.state = cmIdle
		id.mu.Unlock()
		if errors.Is(err, rdmacm.ErrGone) {
			return errnoErr{unix.EINVAL, err.Error()}
		}
		return err
	}
	go func() {
		c, err := p.Wait()
		ss.connected(id, c, err)
	}()
	return nil
}

// connected reports how a connect or accept ended, and watches an
// established connection for its end.
func (ss *session) connected(id *cmIDObj, c *rdmacm.Conn, err error) {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		if c != nil {
			c.Close()
		}
		return
	}
	ev := proto.CMEvent{Type: proto.CMEventEstablished}
	if err == nil {
		id.conn, id.state = c, cmConnected
		ev.Param.PrivateDataLen = uint8(copy(ev.Param.PrivateData[:], c.PrivateData))
		if id.manual && c.QPAttrs().DestQPN != 0 { // the active side's (a passive one has none)
			// Manual and active: the client moves its QP, then
			// establishes (rdma_establish sends the RTU).
			at := c.QPAttrs()
			id.attrs, id.state = &at, cmReplied
			ev.Type = proto.CMEventConnectResponse
			ev.Param.ResponderResources, ev.Param.InitiatorDepth = at.MaxDestRdAtomic, at.MaxRdAtomic
		}
	} else {
		id.state = cmIdle
		var rej *rdmacm.RejectError
		switch {
		case errors.As(err, &rej):
			ev.Type, ev.Status = proto.CMEventRejected, int32(rej.Reason)
			ev.Param.PrivateDataLen = uint8(copy(ev.Param.PrivateData[:], rej.PrivateData))
		case errors.Is(err, rdmacm.ErrUnreachable):
			ev.Type, ev.Status = proto.CMEventUnreachable, -int32(unix.ETIMEDOUT)
		case errors.Is(err, context.Canceled):
			id.mu.Unlock()
			return
		default:
			ev.Type, ev.Status = proto.CMEventConnectError, -int32(errnoOf(err))
		}
		ss.srv.log.Info("rdma cm: not connected", "session", ss.id, "peer", id.dst, "err", err)
	}
	if c != nil && c.NeverEstablished() {
		// The RTU was lost and the peer has disconnected: the kernel's
		// rdma_cm reports DISCONNECTED alone.
		id.state = cmDisconnected
		id.mu.Unlock()
		id.emit(&proto.CMEvent{Type: proto.CMEventDisconnected})
		return
	}
	id.mu.Unlock()
	id.emit(&ev)
	if c != nil {
		go func() {
			<-c.Done()
			id.mu.Lock()
			id.state = cmDisconnected
			id.mu.Unlock()
			id.emit(&proto.CMEvent{Type: proto.CMEventDisconnected})
		}()
	}
}

// resolvedUD reports how a UD connect (SIDR) ended: ESTABLISHED with the
// peer's QPN, Q_Key and address, or UNREACHABLE.
func (ss *session) resolvedUD(id *cmIDObj, peer *rdmacm.UDPeer, err error) {
	id.mu.Lock()
	if id.destroyed || errors.Is(err, context.Canceled) {
		id.mu.Unlock()
		return
	}
	ev := proto.CMEvent{Type: proto.CMEventEstablished}
	var se *rdmacm.SIDRError
	switch {
	case err == nil:
		id.state = cmConnected
		ev.Param.QPN, ev.Param.QKey = peer.QPN, peer.QKey
		ev.Param.PrivateDataLen = uint8(copy(ev.Param.PrivateData[:], peer.PrivateData))
		ev.AH = proto.AHAttr{DGID: peer.Remote.Addr().As16(), SGIDIndex: uint8(peer.SGIDIndex), HopLimit: 64,
			IsGlobal: 1, Port: 1, DMAC: id.dmac}
	case errors.As(err, &se):
		id.state = cmIdle
		ev.Type, ev.Status = proto.CMEventUnreachable, int32(se.Status)
		ev.Param.PrivateDataLen = uint8(copy(ev.Param.PrivateData[:], se.PrivateData))
	default:
		id.state = cmIdle
		ev.Type, ev.Status = proto.CMEventUnreachable, -int32(unix.ETIMEDOUT)
	}
	if err != nil {
		ss.srv.log.Info("rdma cm: ud service not resolved", "session", ss.id, "peer", id.dst, "err", err)
	}
	id.mu.Unlock()
	id.emit(&ev)
}

// cmDisconnect moves the QP to ERR and sends the DREQ; DISCONNECTED
// follows the DREP (or the peer's DREQ, if that came first).
func (ss *session) cmDisconnect(id *cmIDObj) error {
	id.mu.Lock()
	c, q, tried := id.conn, id.qp, id.tried
	id.mu.Unlock()
	if !tried {
		return errnoErr{unix.EINVAL, "disconnect: the id is not connected"}
	}
	if q != nil {
		q.ToErr()
	}
	if c != nil {
		go c.Close()
	}
	return nil
}

// destroyCMID ends what the ID does; no event of it follows.
func (ss *session) destroyCMID(id *cmIDObj) error {
	id.mu.Lock()
	id.destroyed = true
	cancel, ln, r, c := id.cancel, id.ln, id.req, id.conn
	id.ln, id.req, id.conn = nil, nil, nil
	id.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if ln != nil {
		ln.Close()
	}
	if r != nil {
		r.Reject(nil)
	}
	if c != nil {
		go c.Close()
	}
	return nil
}

func cmAddrFrom(a proto.CMAddr) (netip.AddrPort, error) {
	switch a.Family {
	case 0:
		return netip.AddrPort{}, nil
	case proto.AFInet:
		ip := netip.AddrFrom16(a.Addr)
		if !ip.Is4In6() {
			return netip.AddrPort{}, errnoErr{unix.EINVAL, "an AF_INET address not in IPv4-mapped form"}
		}
		return netip.AddrPortFrom(ip.Unmap(), a.Port), nil
	case proto.AFInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), a.Port), nil
	}
	return netip.AddrPort{}, errnoErr{unix.EAFNOSUPPORT, fmt.Sprintf("address family %d", a.Family)}
}

func cmAddrTo(ap netip.AddrPort) proto.CMAddr {
	ip := ap.Addr()
	if !ip.IsValid() {
		if ap.Port() == 0 {
			return proto.CMAddr{}
		}
		return proto.CMAddr{Family: proto.AFInet6, Port: ap.Port()}
	}
	a := proto.CMAddr{Family: proto.AFInet6, Port: ap.Port(), Addr: ip.As16()}
	if ip.Unmap().Is4() {
		a.Family = proto.AFInet
	}
	return a
}

func ptr[T any](v T) *T { return &v }

func randPSN() stack.PSN { return stack.PSN(rand.Uint32() & 0xffffff) }

// ibv_qp_attr_mask bits.
const (
	maskState         = 1 << 0
	maskAccessFlags   = 1 << 3
	maskPKeyIndex     = 1 << 4
	maskPort          = 1 << 5
	maskQKey          = 1 << 6
	maskAV            = 1 << 7
	maskPathMTU       = 1 << 8
	maskTimeout       = 1 << 9
	maskRetryCnt      = 1 << 10
	maskRNRRetry      = 1 << 11
	maskRQPSN         = 1 << 12
	maskMaxQPRdAtomic = 1 << 13
	maskMinRNRTimer   = 1 << 15
	maskSQPSN         = 1 << 16
	maskMaxDestRdAtom = 1 << 17
	maskDestQPN       = 1 << 20
	udpQKey           = 0x01234567 // RDMA_UDP_QKEY
	accessRemote      = 2 | 4 | 8  // IBV_ACCESS_REMOTE_WRITE, _READ, _ATOMIC
	qpStateInit       = 1
	qpStateRTR        = 2
	qpStateRTS        = 3
)

// initQPAttr answers rdma_init_qp_attr: INIT at any time, RTR and RTS
// once the CM exchange gave them (a connection request, or the REP of
// a connect whose QP the client moves).
func (id *cmIDObj) initQPAttr(state uint32) (any, int, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	r := proto.CMQPAttr{Attr: proto.QPAttr{State: state, Port: 1}}
	if state == qpStateInit {
		r.Mask = maskState | maskPKeyIndex | maskPort
		if id.qpType == proto.QPTypeUD {
			r.Mask |= maskQKey
			r.Attr.QKey = udpQKey
		} else {
			r.Mask |= maskAccessFlags
			r.Attr.AccessFlags = accessRemote
		}
		return &r, -1, nil
	}
	at := id.attrs
	if at == nil && id.state == cmRequest && id.req != nil {
		a, err := id.req.QPAttrs(id.psn)
		if err != nil {
			return nil, -1, errnoErr{unix.EINVAL, err.Error()}
		}
		at = &a
	}
	if at == nil || id.qpType != proto.QPTypeRC {
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("init qp attr: state %d not known before the connection's exchange", state)}
	}
	switch state {
	case qpStateRTR:
		r.Mask = maskState | maskAV | maskPathMTU | maskDestQPN | maskRQPSN | maskMaxDestRdAtom | maskMinRNRTimer
		r.Attr.PathMTU, r.Attr.DestQPN, r.Attr.RQPSN = uint32(at.MTU), at.DestQPN, uint32(at.RQPSN)
		r.Attr.MaxDestRdAtomic, r.Attr.MinRNRTimer = at.MaxDestRdAtomic, 12
		r.Attr.AH = proto.AHAttr{DGID: at.Peer.As16(), SGIDIndex: uint8(at.SGIDIndex), HopLimit: 64, IsGlobal: 1,
			Port: 1, DMAC: id.dmac}
	case qpStateRTS:
		r.Mask = maskState | maskTimeout | maskRetryCnt | maskRNRRetry | maskSQPSN | maskMaxQPRdAtomic
		r.Attr.Timeout, r.Attr.RetryCnt, r.Attr.RNRRetry = at.Timeout, at.RetryCnt, at.RNRRetry
		r.Attr.SQPSN, r.Attr.MaxRdAtomic = uint32(at.SQPSN), at.MaxRdAtomic
	default:
		return nil, -1, errnoErr{unix.EINVAL, fmt.Sprintf("init qp attr: state %d", state)}
	}
	return &r, -1, nil
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
