// Package cmatose is uroce's ucmatose and udaddy: the RDMA CM
// connection tests of rdma-core's librdmacm examples, wire-compatible
// with the stock tools on either side.
//
// cmatose (RC, rdma_cm's TCP port space): the client makes -c
// connections to the server, each with an RC QP whose receives are
// posted before it connects (no private data; responder resources and
// initiator depth 1, retry count 5). The server accepts them, then SENDs
// -C messages of -S bytes on each, waits for their completions and for
// as many messages back; the client receives, then sends its replies.
// The server disconnects every connection; the client answers each
// DISCONNECTED with its own disconnect.
//
// udaddy (UD, the UDP port space, SIDR): the client resolves the
// server's service for each of its UD QPs and SENDs -C messages WITH_IMM
// (its QPN as the immediate data) to the QPN and Q_Key the answer gave;
// the server answers from the address of the first message it got,
// with as many messages back.
//
// Both run on one stack device, through its rdmacm agent.
package cmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// Defaults, as the stock tools'.
const (
	DefaultPort   = 7471 // ucmatose
	DefaultUDPort = 7174 // udaddy
	DefaultCount  = 10
	DefaultSize   = 100
	grhLen        = 40
	// UDPQKey is rdma_cm's Q_Key for the UDP port space (RDMA_UDP_QKEY).
	UDPQKey = 0x01234567
)

// Config is a run of either tool.
type Config struct {
	Server bool
	// Addr is the server's address: the one the client connects to,
	// the one the server binds (zero: any of the device's).
	Addr netip.Addr
	// Source is the client's address (-b; zero: the device's).
	Source      netip.Addr
	Port        uint16
	Connections int
	Count       int // messages each way per connection
	Size        int
	// ConnectWait is how long the client retries a connection the
	// server refuses for want of a listener (uroce's own; the stock
	// tools try once).
	ConnectWait time.Duration
	// Agent, when set, is the device's CM agent (else rdmacm.AgentFor).
	Agent          *rdmacm.Agent
	Stdout, Stderr io.Writer
}

// EventError is a connection that ended with an RDMA CM error event, as
// the stock tools print it ("event: RDMA_CM_EVENT_REJECTED, error: 8").
type EventError struct {
	Event  string
	Status int
	Err    error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("event: %s, error: %d", e.Event, e.Status)
}

func (e *EventError) Unwrap() error { return e.Err }

// eventError names the event librdmacm would have reported for err.
func eventError(err error) error {
	var rej *rdmacm.RejectError
	var se *rdmacm.SIDRError
	switch {
	case errors.As(err, &rej):
		return &EventError{Event: "RDMA_CM_EVENT_REJECTED", Status: int(rej.Reason), Err: err}
	case errors.As(err, &se):
		return &EventError{Event: "RDMA_CM_EVENT_UNREACHABLE", Status: int(se.Status), Err: err}
	case errors.Is(err, rdmacm.ErrUnreachable):
		return &EventError{Event: "RDMA_CM_EVENT_UNREACHABLE", Status: -110, Err: err}
	}
	return err
}

// node is one connection's resources.
type node struct {
	qp      *stack.QP
	scq     *stack.CQ
	rcq     *stack.CQ // scq for UD
	mr      *stack.MR
	buf     []byte
	conn    *rdmacm.Conn
	ah      *stack.AH
	qpn     uint32 // UD: the peer's
	qkey    uint32
	scratch []stack.WC
}

func (c *Config) defaults(ud bool) error {
	if c.Port == 0 {
		c.Port = DefaultPort
		if ud {
			c.Port = DefaultUDPort
		}
	}
	if c.Connections <= 0 {
		c.Connections = 1
	}
	if c.Size == 0 {
		c.Count = 0 // as the stock tools: no size, no messages
	}
	if c.Count < 0 || c.Size < 0 {
		return fmt.Errorf("message count %d, size %d", c.Count, c.Size)
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	return nil
}

// resources creates a node's PD objects as the stock tools do: a QP
// whose queues hold Count requests, a buffer of Size bytes (UD: and the
// GRH).
func resources(pd *stack.PD, cfg *Config, ud bool) (*node, error) {
	n := &node{scratch: make([]stack.WC, 8)}
	depth := max(cfg.Count, 1)
	var err error
	if ud {
		if n.scq, err = pd.Device().CreateCQ(2 * depth); err != nil {
			return nil, err
		}
		n.rcq = n.scq
	} else {
		if n.scq, err = pd.Device().CreateCQ(depth); err != nil {
			return nil, err
		}
		if n.rcq, err = pd.Device().CreateCQ(depth); err != nil {
			n.scq.Destroy()
			return nil, err
		}
	}
	init := stack.QPInit{Type: stack.RC, SendCQ: n.scq, RecvCQ: n.rcq, MaxSendWR: depth, MaxRecvWR: depth,
		SignalAll: true}
	size := max(cfg.Size, 1)
	if ud {
		init.Type, init.SignalAll = stack.UD, false
		size += grhLen
	}
	n.buf = make([]byte, size)
	if n.mr, err = pd.RegisterMR(n.buf, stack.AccessLocalWrite); err == nil {
		n.qp, err = pd.CreateQP(init)
	}
	if err == nil && !ud {
		// What rdma_create_qp does, so that receives can be posted.
		err = n.qp.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteWrite | stack.AccessRemoteRead})
	}
	if err == nil && ud {
		if err = n.qp.ToInit(stack.InitAttr{QKey: UDPQKey}); err == nil {
			if err = n.qp.ToRTR(stack.RTRAttr{}); err == nil {
				err = n.qp.ToRTS(stack.RTSAttr{SQPSN: stack.PSN(time.Now().UnixNano() & 0xffffff)})
			}
		}
	}
	if err != nil {
		n.release()
		return nil, err
	}
	for range cfg.Count {
		if err := n.qp.PostRecv(&stack.RecvWR{SG: []stack.SGE{n.mr.SGE(0, uint32(size))}}); err != nil {
			n.release()
			return nil, err
		}
	}
	return n, nil
}

func (n *node) release() {
	if n.ah != nil {
		n.ah.Destroy()
	}
	if n.qp != nil {
		n.qp.Destroy()
	}
	if n.mr != nil {
		n.mr.Deregister()
	}
	if n.rcq != nil && n.rcq != n.scq {
		n.rcq.Destroy()
	}
	if n.scq != nil {
		n.scq.Destroy()
	}
}

// sends posts Count SENDs (UD: WITH_IMM, the QP's number, to the peer).
func (n *node) sends(cfg *Config, signaled bool) error {
	wr := stack.SendWR{Op: stack.OpSend, SG: []stack.SGE{n.mr.SGE(0, uint32(cfg.Size))}}
	if n.ah != nil {
		wr.Op, wr.Imm, wr.AH, wr.RemoteQPN, wr.RemoteQKey = stack.OpSendWithImm, n.qp.QPN(), n.ah, n.qpn, n.qkey
	}
	if signaled {
		wr.Flags = stack.SendSignaled
	}
	for range cfg.Count {
		if err := n.qp.PostSend(&wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// poll waits for k completions on cq, failing on an error status; first,
// when set, sees the first one.
func (n *node) poll(ctx context.Context, cq *stack.CQ, k int, first func(*stack.WC) error) error {
	for done := 0; done < k; {
		m := cq.Poll(n.scratch)
		for i := range n.scratch[:m] {
			wc := &n.scratch[i]
			if wc.Status != stack.WCSuccess {
				return fmt.Errorf("completion %v (wr %d)", wc.Status, wc.ID)
			}
			if done == 0 && first != nil {
				if err := first(wc); err != nil {
					return err
				}
			}
			done++
		}
		if m == 0 {
			if err := cq.Wait(ctx); err != nil {
				return fmt.Errorf("failed polling CQ: %w", err)
			}
		}
	}
	return nil
}

type run struct {
	cfg   *Config
	dev   *stack.Device
	a     *rdmacm.Agent
	pd    *stack.PD
	nodes []*node
	name  string
}

func (r *run) say(format string, args ...any) { fmt.Fprintf(r.cfg.Stdout, format+"\n", args...) }

func start(dev *stack.Device, cfg *Config, name string) (*run, error) {
	r := &run{cfg: cfg, dev: dev, a: cfg.Agent, name: name}
	if r.a == nil {
		var err error
		if r.a, err = rdmacm.AgentFor(dev); err != nil {
			return nil, err
		}
	}
	var err error
	if r.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *run) close() {
	for _, n := range r.nodes {
		if n.conn != nil {
			n.conn.Close()
		}
		n.release()
	}
	r.pd.Dealloc()
}

// Run runs cmatose (RC): the server until its connections are done and
// disconnected, the client until the server disconnects it.
func Run(ctx context.Context, dev *stack.Device, cfg Config) error {
	if err := cfg.defaults(false); err != nil {
		return err
	}
	r, err := start(dev, &cfg, "cmatose")
	if err != nil {
		return err
	}
	defer r.close()
	if cfg.Server {
		return r.server(ctx)
	}
	return r.client(ctx)
}

func (r *run) server(ctx context.Context) error {
	cfg := r.cfg
	r.say("cmatose: starting server")
	ln, err := r.a.Listen(netip.AddrPortFrom(cfg.Addr, cfg.Port))
	if err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	defer ln.Close()
	// Every request is answered as it comes (ucmatose's rdma_accept does
	// not wait); the RTUs are waited for once all are: a request left
	// waiting behind another's RTU could outlast the CM's patience.
	var answers []*rdmacm.Answering
	for len(r.nodes) < cfg.Connections {
		req, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		n, err := resources(r.pd, cfg, false)
		if err != nil {
			r.say("cmatose: failing connection request")
			req.Reject(nil)
			return err
		}
		r.nodes = append(r.nodes, n)
		rr, id := req.Offer()
		p, err := req.Answer(n.qp, nil, rdmacm.AcceptOptions{ResponderResources: rr, InitiatorDepth: id})
		if err != nil {
			return eventError(err)
		}
		answers = append(answers, p)
	}
	for i, p := range answers {
		var err error
		if r.nodes[i].conn, err = p.Wait(); err != nil {
			return eventError(err)
		}
	}
	if cfg.Count > 0 {
		r.say("initiating data transfers")
		for _, n := range r.nodes {
			if err := n.sends(cfg, false); err != nil {
				return err
			}
		}
		r.say("completing sends")
		for _, n := range r.nodes {
			if err := n.poll(ctx, n.scq, cfg.Count, nil); err != nil {
				return err
			}
		}
		r.say("receiving data transfers")
		for _, n := range r.nodes {
			if err := n.poll(ctx, n.rcq, cfg.Count, nil); err != nil {
				return err
			}
		}
		r.say("data transfers complete")
	}
	r.say("cmatose: disconnecting")
	for _, n := range r.nodes {
		n.conn.Close()
		n.conn = nil
	}
	r.say("disconnected")
	return nil
}

func (r *run) client(ctx context.Context) error {
	cfg := r.cfg
	r.say("cmatose: starting client")
	r.say("cmatose: connecting")
	to := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	for range cfg.Connections {
		n, err := resources(r.pd, cfg, false)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
		o := rdmacm.DialOptions{Source: netip.AddrPortFrom(cfg.Source, 0), QP: n.qp, ResponderResources: 1,
			InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 0, SetRetry: true}
		err = r.retry(ctx, func() (err error) {
			n.conn, err = r.a.Dial(ctx, nil, to, stack.QPInit{}, nil, o)
			return err
		})
		if err != nil {
			return eventError(err)
		}
	}
	if cfg.Count > 0 {
		r.say("receiving data transfers")
		for _, n := range r.nodes {
			if err := n.poll(ctx, n.rcq, cfg.Count, nil); err != nil {
				return err
			}
		}
		r.say("sending replies")
		for _, n := range r.nodes {
			if err := n.sends(cfg, false); err != nil {
				return err
			}
		}
		r.say("data transfers complete")
	}
	for _, n := range r.nodes {
		select {
		case <-n.conn.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		n.conn.Close()
		n.conn = nil
	}
	return nil
}

// retry runs connect again while the server has no listener, for
// ConnectWait.
func (r *run) retry(ctx context.Context, connect func() error) error {
	deadline := time.Now().Add(r.cfg.ConnectWait)
	for {
		err := connect()
		var rej *rdmacm.RejectError
		var se *rdmacm.SIDRError
		nobody := errors.As(err, &rej) && rej.Reason == mad.RejInvalidServiceID ||
			errors.As(err, &se) && se.Status == mad.SIDRServiceIDUnknown
		if !nobody || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RunUD runs udaddy (UD through SIDR).
func RunUD(ctx context.Context, dev *stack.Device, cfg Config) error {
	if err := cfg.defaults(true); err != nil {
		return err
	}
	r, err := start(dev, &cfg, "udaddy")
	if err != nil {
		return err
	}
	defer r.close()
	if mtu := dev.Query().ActiveMTU.Bytes(); cfg.Count > 0 && cfg.Size > mtu {
		return fmt.Errorf("message_size %d is larger than active mtu %d", cfg.Size, mtu)
	}
	if cfg.Server {
		return r.udServer(ctx)
	}
	return r.udClient(ctx)
}

func (r *run) udServer(ctx context.Context) error {
	cfg := r.cfg
	r.say("udaddy: starting server")
	ln, err := r.a.ListenUD(netip.AddrPortFrom(cfg.Addr, cfg.Port))
	if err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	defer ln.Close()
	for len(r.nodes) < cfg.Connections {
		req, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		n, err := resources(r.pd, cfg, true)
		if err != nil {
			r.say("udaddy: failing connection request")
			req.Reject(nil)
			return err
		}
		r.nodes = append(r.nodes, n)
		if err := req.AcceptUD(n.qp.QPN(), UDPQKey, nil); err != nil {
			return err
		}
	}
	if cfg.Count == 0 {
		return nil
	}
	r.say("receiving data transfers")
	for _, n := range r.nodes {
		// The first message tells where to answer: its GRH's source
		// and its immediate data, the sender's QPN.
		reply := func(wc *stack.WC) error {
			src, ok := stack.GRHSource(n.buf)
			if !ok {
				return errors.New("failed to create reply AH: no GRH")
			}
			sgid, _, err := rdmacm.SourceFor(r.dev, src, netip.Addr{})
			if err == nil {
				n.ah, err = r.pd.CreateAH(stack.AHAttr{DGID: src, SGIDIndex: sgid, HopLimit: 64})
			}
			if err != nil {
				return fmt.Errorf("failed to create reply AH: %w", err)
			}
			n.qpn, n.qkey = wc.Imm, UDPQKey
			return nil
		}
		if err := n.poll(ctx, n.rcq, cfg.Count, reply); err != nil {
			return err
		}
	}
	r.say("sending replies")
	for _, n := range r.nodes {
		if err := n.sends(cfg, true); err != nil {
			return err
		}
	}
	for _, n := range r.nodes {
		if err := n.poll(ctx, n.scq, cfg.Count, nil); err != nil {
			return err
		}
	}
	r.say("data transfers complete")
	return nil
}

func (r *run) udClient(ctx context.Context) error {
	cfg := r.cfg
	r.say("udaddy: starting client")
	r.say("udaddy: connecting")
	to := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	for range cfg.Connections {
		n, err := resources(r.pd, cfg, true)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
		var peer *rdmacm.UDPeer
		err = r.retry(ctx, func() (err error) {
			peer, err = r.a.ResolveUD(ctx, to, nil, rdmacm.DialOptions{Source: netip.AddrPortFrom(cfg.Source, 0)})
			return err
		})
		if err != nil {
			return eventError(err)
		}
		if n.ah, err = r.pd.CreateAH(stack.AHAttr{DGID: peer.Remote.Addr(), SGIDIndex: peer.SGIDIndex, HopLimit: 64}); err != nil {
			return fmt.Errorf("failure creating address handle: %w", err)
		}
		n.qpn, n.qkey = peer.QPN, peer.QKey
	}
	if cfg.Count == 0 {
		return nil
	}
	r.say("initiating data transfers")
	for _, n := range r.nodes {
		if err := n.sends(cfg, false); err != nil {
			return err
		}
	}
	r.say("receiving data transfers")
	for _, n := range r.nodes {
		if err := n.poll(ctx, n.rcq, cfg.Count, nil); err != nil {
			return err
		}
	}
	r.say("data transfers complete")
	return nil
}
