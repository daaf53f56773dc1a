package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	pt "github.com/uroce/uroce/internal/oob/perftest"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// With -R (rdma_cm QPs) perftest 4.5 uses RDMA CM twice on the same port
// (-p, default 18515), and no TCP at all:
//
//   - the exchange connection: the server listens, accepts one request and
//     stops listening; the client connects with no private data and
//     responder resources and initiator depth 0. Each side posts one
//     receive of CMKeySize bytes before it connects or accepts and reposts
//     it after each message; every message of the exchange (version,
//     cycle buffer, cache line, MTU, keys in their binary form, reports)
//     is one signalled SEND, in the same order as over TCP;
//   - the test QPs, after a barrier on the exchange connection: the server
//     listens again and accepts one request per QP, the client connects
//     each QP (retrying, 10 times 100 ms apart, while rejected because the
//     server does not listen yet), offering out_reads as responder
//     resources and initiator depth for READ and atomics; another barrier
//     follows, then the keys (R_Key, VA) as without -R;
//   - at the end, no "done": the client disconnects the test QPs (DREQ,
//     waiting for the DREPs), and each side destroys its CM IDs, which
//     disconnects what is still connected.

// cmMsgSize is perftest's receive size on the exchange QP: the binary key.
const cmMsgSize = pt.CMKeySize

// cmRecvs is the number of receives the exchange QP keeps posted.
const cmRecvs = 2

// cmConn is the exchange connection of -R as a net.Conn: each Write is one
// SEND (at most cmMsgSize bytes), each Read returns what is left of the
// oldest message received. It polls its CQ in the caller's goroutine.
type cmConn struct {
	conn    *rdmacm.Conn
	pdOwned *stack.PD
	qp      *stack.QP
	cq      *stack.CQ
	mr      *stack.MR
	buf     []byte // cmRecvs receive slots, then the send slot

	wcs      [4]stack.WC
	sent     int   // send completions seen
	posted   int   // sends posted
	received []int // slots of received messages, oldest first
	lens     []int
	partial  int // bytes of received[0] already read
	err      error

	mu       sync.Mutex
	deadline time.Time
}

// openCMConn creates the exchange QP of dev in pd, posts its receives and
// connects it: the client dials addr (retrying while the server does not
// listen yet, until wait passes), the server accepts one request on
// addr's port.
func openCMConn(ctx context.Context, dev *stack.Device, client bool, addr netip.AddrPort, wait time.Duration) (_ *cmConn, err error) {
	a, err := rdmacm.AgentFor(dev)
	if err != nil {
		return nil, err
	}
	c := &cmConn{buf: make([]byte, (cmRecvs+1)*cmMsgSize)}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release(pd)
		}
	}()
	if c.cq, err = dev.CreateCQ(2 * (cmRecvs + 1)); err != nil {
		return nil, err
	}
	if c.mr, err = pd.RegisterMR(c.buf, stack.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.qp, err = pd.CreateQP(stack.QPInit{Type: stack.RC, SendCQ: c.cq, RecvCQ: c.cq,
		MaxSendWR: 2, MaxRecvWR: cmRecvs, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return nil, err
	}
	if err := c.qp.ToInit(stack.InitAttr{}); err != nil {
		return nil, err
	}
	for i := range cmRecvs {
		if err := c.postRecv(i); err != nil {
			return nil, err
		}
	}
	if client {
		c.conn, err = dialRetry(ctx, a, pd, addr, rdmacm.DialOptions{QP: c.qp}, wait)
		if err != nil {
			return nil, err
		}
		c.pdOwned = pd
		return c, nil
	}
	l, err := a.Listen(addr)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	if c.conn, err = r.Accept(c.qp, nil); err != nil {
		return nil, err
	}
	c.pdOwned = pd
	return c, nil
}

// dialRetry dials addr until it is accepted, retrying every 100 ms while
// the peer rejects the request for want of a listener, until wait passes.
func dialRetry(ctx context.Context, a *rdmacm.Agent, pd *stack.PD, addr netip.AddrPort, o rdmacm.DialOptions, wait time.Duration) (*rdmacm.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		c, err := a.Dial(ctx, pd, addr, stack.QPInit{}, nil, o)
		var rej *rdmacm.RejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID || !time.Now().Before(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *cmConn) postRecv(slot int) error {
	return c.qp.PostRecv(&stack.RecvWR{ID: uint64(slot), SG: []stack.SGE{c.mr.SGE(uint64(slot*cmMsgSize), cmMsgSize)}})
}

// poll takes the completions there are.
func (c *cmConn) poll() {
	for {
		n := c.cq.Poll(c.wcs[:])
		if n == 0 {
			return
		}
		for _, wc := range c.wcs[:n] {
			switch {
			case wc.Status == stack.WCWRFlushErr:
				if c.err == nil {
					c.err = io.EOF
				}
			case wc.Status != stack.WCSuccess:
				if c.err == nil {
					c.err = fmt.Errorf("exchange QP completion: %v", wc.Status)
				}
			case wc.Opcode == stack.WCSend:
				c.sent++
			case wc.Opcode == stack.WCRecv:
				c.received = append(c.received, int(wc.ID))
				c.lens = append(c.lens, int(wc.ByteLen))
			}
		}
	}
}

// waitFor polls until done says so, the connection fails or ends, or the
// deadline passes.
func (c *cmConn) waitFor(done func() bool) error {
	for {
		c.poll()
		if done() {
			return nil
		}
		if c.err != nil {
			return c.err
		}
		select {
		case <-c.conn.Done():
			c.poll()
			if done() {
				return nil
			}
			return io.EOF
		default:
		}
		c.mu.Lock()
		dl := c.deadline
		c.mu.Unlock()
		slice := 20 * time.Millisecond
		if !dl.IsZero() {
			left := time.Until(dl)
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		ctx, cancel := context.WithTimeout(context.Background(), slice)
		err := c.cq.Wait(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// Write sends b as one message.
func (c *cmConn) Write(b []byte) (int, error) {
	if len(b) > cmMsgSize {
		return 0, fmt.Errorf("exchange message of %d bytes, at most %d", len(b), cmMsgSize)
	}
	off := cmRecvs * cmMsgSize
	copy(c.buf[off:], b)
	if err := c.qp.PostSend(&stack.SendWR{ID: cmRecvs, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{c.mr.SGE(uint64(off), uint32(len(b)))}}); err != nil {
		return 0, err
	}
	c.posted++
	if err := c.waitFor(func() bool { return c.sent == c.posted }); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Read returns bytes of the oldest message received, reposting its
// receive once it is read to the end.
func (c *cmConn) Read(p []byte) (int, error) {
	if err := c.waitFor(func() bool { return len(c.received) > 0 }); err != nil {
		return 0, err
	}
	slot, n := c.received[0], c.lens[0]
	msg := c.buf[slot*cmMsgSize : slot*cmMsgSize+n]
	k := copy(p, msg[c.partial:])
	c.partial += k
	if c.partial == n {
		c.received, c.lens, c.partial = c.received[1:], c.lens[1:], 0
		if err := c.postRecv(slot); err != nil {
			return k, err
		}
	}
	return k, nil
}

func (c *cmConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *cmConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *cmConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }
func (c *cmConn) LocalAddr() net.Addr                { return net.TCPAddrFromAddrPort(c.conn.Local) }
func (c *cmConn) RemoteAddr() net.Addr               { return net.TCPAddrFromAddrPort(c.conn.Remote) }

// Close disconnects (a DREQ unless the peer did first) and frees the QP.
func (c *cmConn) Close() error {
	if c.conn != nil {
		c.conn.Close()
	}
	c.release(c.pdOwned)
	return nil
}

func (c *cmConn) release(pd *stack.PD) {
	if c.qp != nil {
		c.qp.Destroy()
		c.qp = nil
	}
	if c.mr != nil {
		c.mr.Deregister()
		c.mr = nil
	}
	if c.cq != nil {
		c.cq.Destroy()
		c.cq = nil
	}
	if pd != nil {
		pd.Dealloc()
	}
	c.pdOwned = nil
}

// peerWait bounds how long a side waits for its peer to disconnect first.
const peerWait = 2 * time.Second

// awaitPeer waits up to peerWait for c's peer to disconnect.
func awaitPeer(c *rdmacm.Conn) {
	t := time.NewTimer(peerWait)
	defer t.Stop()
	select {
	case <-c.Done():
	case <-t.C:
	}
}

// cmConnect is the CMConnect hook: the test's resources, then its QPs
// connected with rdma_cm as perftest's create_rdma_cm_connection does.
func (s *session) cmConnect(a pt.Agreed) error {
	if err := s.resources(a); err != nil {
		return err
	}
	cfg := &s.cfg
	agent, err := rdmacm.AgentFor(s.sdev)
	if err != nil {
		return err
	}
	pd, _ := verbs.StackPD(s.pd)
	o := rdmacm.DialOptions{}
	if v := cfg.verb(); v == pt.Read || v == pt.Atomic {
		o.ResponderResources = uint8(min(s.outReads, 255))
		o.InitiatorDepth = o.ResponderResources
	}
	qps := make([]*stack.QP, len(s.qps))
	for i, q := range s.qps {
		sq, ok := verbs.StackQP(q)
		if !ok {
			return errors.New("rdma_cm needs the in-process device's QPs")
		}
		qps[i] = sq
	}
	if cfg.Client {
		for _, q := range qps {
			o.QP = q
			c, err := dialRetry(s.ctx, agent, pd, cfg.CMAddr, o, cfg.ConnectWait)
			if err != nil {
				return fmt.Errorf("failed to create RDMA CM connection: %w", err)
			}
			s.cmConns = append(s.cmConns, c)
		}
		return nil
	}
	l, err := agent.Listen(cfg.CMAddr)
	if err != nil {
		return fmt.Errorf("failed to listen on RDMA CM server listen ID: %w", err)
	}
	defer l.Close()
	for _, q := range qps {
		r, err := l.Accept(s.ctx)
		if err != nil {
			return fmt.Errorf("failed to create RDMA CM connection: %w", err)
		}
		c, err := r.AcceptWith(q, nil, rdmacm.AcceptOptions{ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth})
		if err != nil {
			return fmt.Errorf("failed to accept RDMA CM connection: %w", err)
		}
		s.cmConns = append(s.cmConns, c)
	}
	return nil
}

// cmDisconnect ends the test QPs' connections: the client disconnects
// them, the server waits a while for that first.
func (s *session) cmDisconnect() {
	for _, c := range s.cmConns {
		if !s.cfg.Client {
			awaitPeer(c)
		}
		c.Close()
	}
	s.cmConns = nil
}
