package client

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// RDMA CM through the daemon, in the spirit of package rdmacm (and of
// librdmacm and net.Listener): Listen and Accept, Dial, Close. The
// daemon's CM agent exchanges the MADs and moves the QPs; each listener
// and connection here has an event channel of its own.

// cmChannel is a daemon event channel.
type cmChannel struct {
	d  *Device
	h  uint32
	fd *os.File
}

func (d *Device) newCMChannel() (*cmChannel, error) {
	var r proto.ChannelResp
	fd, err := d.call(proto.OpCMCreateChannel, nil, -1, &r)
	if err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, fmt.Errorf("%v: no eventfd in the response", proto.OpCMCreateChannel)
	}
	return &cmChannel{d: d, h: r.Channel, fd: os.NewFile(uintptr(fd), "cm-channel")}, nil
}

// next waits for the channel's next event.
func (c *cmChannel) next(ctx context.Context) (proto.CMEvent, error) {
	for {
		if err := c.d.waitFD(ctx, c.fd); err != nil {
			return proto.CMEvent{}, err
		}
		var ev proto.CMEvent
		_, err := c.d.call(proto.OpCMGetEvent, &proto.Handle{Handle: c.h}, -1, &ev)
		var e *Error
		if errors.As(err, &e) && e.Errno == syscall.EAGAIN {
			continue
		}
		return ev, err
	}
}

func (c *cmChannel) close() {
	c.d.destroy(proto.OpCMDestroyChannel, c.h)
	c.fd.Close()
}

func (c *cmChannel) createID(ud bool) (uint32, error) {
	req := proto.CMCreateID{Channel: c.h, PS: proto.PSTCP, QPType: proto.QPTypeRC}
	if ud {
		req.PS, req.QPType = proto.PSUDP, proto.QPTypeUD
	}
	var r proto.Handle
	_, err := c.d.call(proto.OpCMCreateID, &req, -1, &r)
	return r.Handle, err
}

func cmAddr(ap netip.AddrPort) proto.CMAddr {
	if !ap.Addr().IsValid() {
		return proto.CMAddr{Family: proto.AFInet6, Port: ap.Port()}
	}
	a := proto.CMAddr{Family: proto.AFInet6, Port: ap.Port(), Addr: ap.Addr().As16()}
	if ap.Addr().Unmap().Is4() {
		a.Family = proto.AFInet
	}
	return a
}

func addrPort(a proto.CMAddr) netip.AddrPort {
	ip := netip.AddrFrom16(a.Addr)
	if a.Family == proto.AFInet {
		ip = ip.Unmap()
	}
	return netip.AddrPortFrom(ip, a.Port)
}

// CMEventError is an RDMA CM event that ended a Dial or an Accept other
// than as rdmacm's errors say: its type and status.
type CMEventError struct {
	Type   uint32
	Status int32
}

func (e *CMEventError) Error() string {
	return fmt.Sprintf("rdma cm event %d, status %d", e.Type, e.Status)
}

// eventErr turns a failing event into the error rdmacm's API gives.
func eventErr(ev *proto.CMEvent) error {
	switch ev.Type {
	case proto.CMEventRejected:
		n := min(int(ev.Param.PrivateDataLen), len(ev.Param.PrivateData))
		return &rdmacm.RejectError{Reason: mad.RejectReason(ev.Status), PrivateData: append([]byte(nil), ev.Param.PrivateData[:n]...)}
	case proto.CMEventUnreachable:
		if ev.Status > 0 { // a SIDR_REP's status
			n := min(int(ev.Param.PrivateDataLen), len(ev.Param.PrivateData))
			return &rdmacm.SIDRError{Status: mad.SIDRStatus(ev.Status), PrivateData: append([]byte(nil), ev.Param.PrivateData[:n]...)}
		}
		return rdmacm.ErrUnreachable
	case proto.CMEventAddrError, proto.CMEventRouteError, proto.CMEventConnectError:
		return fmt.Errorf("%w: %w", &CMEventError{Type: ev.Type, Status: ev.Status}, syscall.Errno(-ev.Status))
	}
	return &CMEventError{Type: ev.Type, Status: ev.Status}
}

// CMListener takes connection requests for a port (rdma_listen).
type CMListener struct {
	d    *Device
	ch   *cmChannel
	h    uint32
	addr netip.AddrPort
	once sync.Once
}

// Listen listens on addr (the zero address: all of the device's; port
// 0: a free one, see Addr).
func (d *Device) Listen(addr netip.AddrPort) (*CMListener, error) { return d.listen(addr, false) }

// ListenUD listens on addr in the UDP port space: its requests are for
// UD QPs (SIDR), answered with AcceptUD.
func (d *Device) ListenUD(addr netip.AddrPort) (*CMListener, error) { return d.listen(addr, true) }

func (d *Device) listen(addr netip.AddrPort, ud bool) (*CMListener, error) {
	ch, err := d.newCMChannel()
	if err != nil {
		return nil, fmt.Errorf("listen %v: %w", addr, err)
	}
	h, err := ch.createID(ud)
	if err == nil {
		_, err = d.call(proto.OpCMBind, &proto.CMBind{ID: h, Addr: cmAddr(addr)}, -1, nil)
	}
	if err == nil {
		_, err = d.call(proto.OpCMListen, &proto.CMListen{ID: h, Backlog: 128}, -1, nil)
	}
	if err != nil {
		if h != 0 {
			d.destroy(proto.OpCMDestroyID, h)
		}
		ch.close()
		return nil, fmt.Errorf("listen %v: %w", addr, err)
	}
	return &CMListener{d: d, ch: ch, h: h, addr: addr}, nil
}

// Accept waits for the next connection request.
func (l *CMListener) Accept(ctx context.Context) (*CMRequest, error) {
	for {
		ev, err := l.ch.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("accept: %w", err)
		}
		if ev.Type != proto.CMEventConnectRequest {
			continue
		}
		n := min(int(ev.Param.PrivateDataLen), len(ev.Param.PrivateData))
		return &CMRequest{d: l.d, h: ev.ID, Local: addrPort(ev.Route.Src), Remote: addrPort(ev.Route.Dst),
			PrivateData: append([]byte(nil), ev.Param.PrivateData[:n]...)}, nil
	}
}

// Close stops listening.
func (l *CMListener) Close() error {
	l.once.Do(func() {
		l.d.destroy(proto.OpCMDestroyID, l.h)
		l.ch.close()
	})
	return nil
}

// CMRequest is a connection request: Accept or Reject it.
type CMRequest struct {
	d             *Device
	h             uint32
	Local, Remote netip.AddrPort
	PrivateData   []byte
}

// Accept connects the request to q (an RC QP of the device in RESET or
// INIT, which the daemon moves to RTS), sends priv in the REP and waits
// for the connection to be established.
func (r *CMRequest) Accept(ctx context.Context, q *QP, priv []byte) (*CMConn, error) {
	ch, err := r.d.newCMChannel()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	fail := func(err error) (*CMConn, error) {
		r.d.destroy(proto.OpCMDestroyID, r.h)
		ch.close()
		return nil, fmt.Errorf("accept: %w", err)
	}
	if _, err := r.d.call(proto.OpCMMigrateID, &proto.CMMigrateID{ID: r.h, Channel: ch.h}, -1, nil); err != nil {
		return fail(err)
	}
	req := proto.CMConnect{ID: r.h, QP: q.h}
	if len(priv) > len(req.Param.PrivateData) {
		return fail(fmt.Errorf("%d bytes of private data: %w", len(priv), syscall.EINVAL))
	}
	req.Param.PrivateDataLen = uint8(copy(req.Param.PrivateData[:], priv))
	if _, err := r.d.call(proto.OpCMAccept, &req, -1, nil); err != nil {
		return fail(err)
	}
	ev, err := ch.next(ctx)
	if err != nil {
		return fail(err)
	}
	switch ev.Type {
	case proto.CMEventEstablished:
	case proto.CMEventDisconnected:
		// The RTU was lost and the peer, established, has disconnected
		// already: the accept succeeded, and the connection is over
		// (rdma_cm's DISCONNECTED alone). It is returned ended.
		q.refresh()
		c := &CMConn{d: r.d, ch: ch, h: r.h, qp: q, done: make(chan struct{}), stop: func() {}, ended: true,
			Local: r.Local, Remote: r.Remote, PrivateData: r.PrivateData}
		close(c.done) // no events to watch for
		return c, nil
	default:
		return fail(eventErr(&ev))
	}
	q.refresh()
	return newConn(r.d, ch, r.h, q, r.Local, r.Remote, r.PrivateData), nil
}

// AcceptUD answers a UD request with q, a UD QP of the device in RTS,
// and its Q_Key (SIDR).
func (r *CMRequest) AcceptUD(q *QP, priv []byte) error {
	req := proto.CMConnect{ID: r.h, QP: q.h}
	req.Param.PrivateDataLen = uint8(copy(req.Param.PrivateData[:rdmacm.MaxUDAcceptData], priv))
	_, err := r.d.call(proto.OpCMAccept, &req, -1, nil)
	r.d.destroy(proto.OpCMDestroyID, r.h)
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return nil
}

// ResolveUD resolves the UD service at addr (SIDR) for q, a UD QP of
// the device: the peer's QPN and Q_Key, and an address handle's
// attributes to reach it.
func (d *Device) ResolveUD(ctx context.Context, q *QP, addr netip.AddrPort, priv []byte) (*UDPeer, error) {
	ch, err := d.newCMChannel()
	if err != nil {
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	defer ch.close()
	h, err := ch.createID(true)
	if err != nil {
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	defer d.destroy(proto.OpCMDestroyID, h)
	ev, err := d.connectID(ctx, ch, h, q, addr, priv)
	if err != nil {
		return nil, fmt.Errorf("resolve %v: %w", addr, err)
	}
	n := min(int(ev.Param.PrivateDataLen), len(ev.Param.PrivateData))
	return &UDPeer{QPN: ev.Param.QPN, QKey: ev.Param.QKey, AH: stack.AHAttr{DGID: netip.AddrFrom16(ev.AH.DGID).Unmap(),
		SGIDIndex: int(ev.AH.SGIDIndex), HopLimit: ev.AH.HopLimit, DMAC: ev.AH.DMAC},
		PrivateData: append([]byte(nil), ev.Param.PrivateData[:n]...)}, nil
}

// UDPeer is a resolved UD service.
type UDPeer struct {
	QPN, QKey   uint32
	AH          stack.AHAttr
	PrivateData []byte
}

// Reject refuses the request ("consumer reject") with priv.
func (r *CMRequest) Reject(priv []byte) error {
	req := proto.CMReject{ID: r.h}
	req.PrivateDataLen = uint32(copy(req.PrivateData[:], priv))
	_, err := r.d.call(proto.OpCMReject, &req, -1, nil)
	r.d.destroy(proto.OpCMDestroyID, r.h)
	if err != nil {
		return fmt.Errorf("reject: %w", err)
	}
	return nil
}

// Dial connects q (an RC QP of the device in RESET or INIT) to addr:
// address and route resolution, then the REQ with priv (at most 56
// bytes); the daemon moves q to RTS from the REP.
func (d *Device) Dial(ctx context.Context, q *QP, addr netip.AddrPort, priv []byte) (*CMConn, error) {
	ch, err := d.newCMChannel()
	if err != nil {
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	h, err := ch.createID(false)
	if err != nil {
		ch.close()
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	fail := func(err error) (*CMConn, error) {
		d.destroy(proto.OpCMDestroyID, h)
		ch.close()
		return nil, fmt.Errorf("dial %v: %w", addr, err)
	}
	ev, err := d.connectID(ctx, ch, h, q, addr, priv)
	if err != nil {
		return fail(err)
	}
	rt := ev.Route
	q.refresh()
	n := min(int(ev.Param.PrivateDataLen), len(ev.Param.PrivateData))
	return newConn(d, ch, h, q, addrPort(rt.Src), addr, append([]byte(nil), ev.Param.PrivateData[:n]...)), nil
}

// connectID resolves the address and route of ID h and connects it
// with q; it returns the ESTABLISHED event.
func (d *Device) connectID(ctx context.Context, ch *cmChannel, h uint32, q *QP, addr netip.AddrPort, priv []byte) (proto.CMEvent, error) {
	timeout := uint32(2000)
	if t, ok := ctx.Deadline(); ok {
		timeout = uint32(max(1, time.Until(t).Milliseconds()))
	}
	if _, err := d.call(proto.OpCMResolveAddr, &proto.CMResolve{ID: h, TimeoutMS: timeout, Dst: cmAddr(addr)}, -1, nil); err != nil {
		return proto.CMEvent{}, err
	}
	step := func(want uint32) (proto.CMEvent, error) {
		ev, err := ch.next(ctx)
		if err == nil && ev.Type != want {
			err = eventErr(&ev)
		}
		return ev, err
	}
	if _, err := step(proto.CMEventAddrResolved); err != nil {
		return proto.CMEvent{}, err
	}
	if _, err := d.call(proto.OpCMResolveRoute, &proto.CMResolve{ID: h, TimeoutMS: timeout}, -1, nil); err != nil {
		return proto.CMEvent{}, err
	}
	if _, err := step(proto.CMEventRouteResolved); err != nil {
		return proto.CMEvent{}, err
	}
	req := proto.CMConnect{ID: h, QP: q.h, Param: proto.CMConnParam{ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}}
	if len(priv) > len(req.Param.PrivateData) {
		return proto.CMEvent{}, fmt.Errorf("%d bytes of private data: %w", len(priv), syscall.EINVAL)
	}
	req.Param.PrivateDataLen = uint8(copy(req.Param.PrivateData[:], priv))
	if _, err := d.call(proto.OpCMConnect, &req, -1, nil); err != nil {
		return proto.CMEvent{}, err
	}
	return step(proto.CMEventEstablished)
}

// CMConn is an established connection.
type CMConn struct {
	d     *Device
	ch    *cmChannel
	h     uint32
	qp    *QP
	done  chan struct{}
	stop  context.CancelFunc
	once  sync.Once
	ended bool // accepted after the peer had ended it (NeverEstablished)
	// Local and Remote are the connection's addresses; PrivateData the
	// peer's (the REP's for Dial, the REQ's for Accept).
	Local, Remote netip.AddrPort
	PrivateData   []byte
}

func newConn(d *Device, ch *cmChannel, h uint32, q *QP, local, remote netip.AddrPort, priv []byte) *CMConn {
	ctx, stop := context.WithCancel(context.Background())
	c := &CMConn{d: d, ch: ch, h: h, qp: q, done: make(chan struct{}), stop: stop, Local: local, Remote: remote,
		PrivateData: priv}
	go func() {
		defer close(c.done)
		for {
			ev, err := ch.next(ctx)
			if err != nil || ev.Type == proto.CMEventDisconnected || ev.Type == proto.CMEventDeviceRemoval {
				return
			}
		}
	}()
	return c
}

// QP returns the connection's QP.
func (c *CMConn) QP() *QP { return c.qp }

// NeverEstablished reports an accepted connection that the peer ended
// before this end saw it established (its RTU lost, its DREQ first):
// Done is closed from the start.
func (c *CMConn) NeverEstablished() bool { return c.ended }

// Done is closed when the connection has ended (the peer disconnected,
// or Close ran).
func (c *CMConn) Done() <-chan struct{} { return c.done }

// Close disconnects (the QP goes to ERR) and waits for the peer's DREP,
// at most a few seconds; the QP stays the caller's.
func (c *CMConn) Close() error {
	c.once.Do(func() {
		c.d.call(proto.OpCMDisconnect, &proto.Handle{Handle: c.h}, -1, nil)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
		c.stop()
		<-c.done
		c.d.destroy(proto.OpCMDestroyID, c.h)
		c.ch.close()
		c.qp.refresh()
	})
	return nil
}
