// Package rping is uroce's rping: the RDMA CM ping of rdma-core's
// librdmacm examples, wire-compatible with the stock tool on either side.
//
// The client connects with RDMA CM (no private data); each side posts
// one receive for a 16-byte rdma_info message (buffer address, R_Key
// and size, big-endian 64/32/32). Per iteration:
//
//	client: fills its start buffer with "rdma-ping-N: " and letters,
//	        SENDs the start buffer's info
//	server: RDMA READs the client's start buffer into its own,
//	        SENDs a go-ahead (16 bytes)
//	client: SENDs the info of its second buffer (the RDMA sink)
//	server: RDMA WRITEs the string read (up to its NUL) into the sink,
//	        SENDs a go-ahead
//	client: compares sink and start buffer (-V), prints the sink (-v)
//
// After its count the client disconnects; the server ends when the
// client does ("server DISCONNECT EVENT...").
//
// Run works on one stack device: the connection through the device's
// rdmacm agent, the data path on a QP of its own, polled by the calling
// goroutine.
package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// Defaults and limits, as rping's.
const (
	DefaultPort = 7174
	DefaultSize = 64
	// MinSize fits "rdma-ping-2147483647: " with its NUL.
	MinSize = 26
	// MaxSize is the largest -S rping takes (its buffer is 64 KiB and
	// the check is exclusive).
	MaxSize = 64*1024 - 1
	infoLen = 16
	sqDepth = 16
)

// Config is an rping run.
type Config struct {
	Server bool
	// Addr is the server's address: the one the client dials, the one
	// the server listens on (zero: any of the device's).
	Addr netip.Addr
	// Source is the client's address (-I; zero: the device's).
	Source netip.Addr
	Port   uint16
	// Count is the number of pings (0: until interrupted).
	Count int
	Size  int
	// Verbose prints the ping data, Validate compares it, Debug prints
	// the steps.
	Verbose, Validate, Debug bool
	// ConnectWait is how long the client retries a connection the
	// server rejects as having no listener (uroce's own; rping tries
	// once).
	ConnectWait time.Duration
	// Agent, when set, is the device's CM agent (else rdmacm.AgentFor).
	Agent          *rdmacm.Agent
	Stdout, Stderr io.Writer
}

// ErrDataMismatch is a ping that came back different (-V).
var ErrDataMismatch = errors.New("data mismatch")

// session is one side's verbs resources and connection.
type session struct {
	cfg  *Config
	dev  *stack.Device
	pd   *stack.PD
	cq   *stack.CQ
	qp   *stack.QP
	conn *rdmacm.Conn
	// recv and send hold rdma_info messages; rdma is the RDMA buffer
	// (the server's READ target and WRITE source, the client's sink);
	// start is the client's ping source.
	recv, send, rdma, start       []byte
	recvMR, sendMR, rdmaMR, strMR *stack.MR
	wcs                           []stack.WC
	pending                       []stack.WC
	done                          <-chan struct{} // the connection's end
}

// Run runs rping on dev until the client's count is done (client) or the
// client disconnects (server).
func Run(ctx context.Context, dev *stack.Device, cfg Config) error {
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Size < MinSize || cfg.Size > MaxSize {
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", cfg.Size, MinSize, MaxSize)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	a := cfg.Agent
	if a == nil {
		var err error
		if a, err = rdmacm.AgentFor(dev); err != nil {
			return err
		}
	}
	s, err := newSession(dev, &cfg)
	if err != nil {
		return err
	}
	defer s.close()
	if cfg.Server {
		return s.server(ctx, a)
	}
	return s.client(ctx, a)
}

func (s *session) debugf(format string, args ...any) {
	if s.cfg.Debug {
		fmt.Fprintf(s.cfg.Stdout, format, args...)
	}
}

func newSession(dev *stack.Device, cfg *Config) (s *session, err error) {
	s = &session{cfg: cfg, dev: dev, wcs: make([]stack.WC, 2*sqDepth)}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(2 * sqDepth); err != nil {
		return nil, err
	}
	reg := func(n int, acc stack.Access) ([]byte, *stack.MR, error) {
		b := make([]byte, n)
		mr, err := s.pd.RegisterMR(b, acc)
		return b, mr, err
	}
	remote := stack.AccessLocalWrite | stack.AccessRemoteRead | stack.AccessRemoteWrite
	if s.recv, s.recvMR, err = reg(infoLen, stack.AccessLocalWrite); err != nil {
		return nil, err
	}
	if s.send, s.sendMR, err = reg(infoLen, 0); err != nil {
		return nil, err
	}
	if s.rdma, s.rdmaMR, err = reg(cfg.Size, remote); err != nil {
		return nil, err
	}
	if !cfg.Server {
		if s.start, s.strMR, err = reg(cfg.Size, remote); err != nil {
			return nil, err
		}
	}
	s.debugf("allocated & registered buffers...\n")
	return s, nil
}

func (s *session) qpInit() stack.QPInit {
	return stack.QPInit{Type: stack.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: sqDepth, MaxRecvWR: 2,
		MaxSendSGE: 1, MaxRecvSGE: 1}
}

func (s *session) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.qp != nil && s.cfg.Server {
		s.qp.Destroy()
	}
	for _, mr := range []*stack.MR{s.recvMR, s.sendMR, s.rdmaMR, s.strMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if s.cq != nil {
		s.cq.Destroy()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}

func (s *session) postRecv() error {
	return s.qp.PostRecv(&stack.RecvWR{ID: 1, SG: []stack.SGE{s.recvMR.SGE(0, infoLen)}})
}

// postInfo sends the info of buffer buf (registered as mr).
func (s *session) postInfo(mr *stack.MR) error {
	binary.BigEndian.PutUint64(s.send[0:], mr.Addr())
	binary.BigEndian.PutUint32(s.send[8:], mr.RKey())
	binary.BigEndian.PutUint32(s.send[12:], uint32(s.cfg.Size))
	s.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), s.cfg.Size)
	return s.postSend()
}

func (s *session) postSend() error {
	return s.qp.PostSend(&stack.SendWR{ID: 2, Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{s.sendMR.SGE(0, infoLen)}})
}

// errDisconnected: the peer disconnected while a completion was awaited.
var errDisconnected = errors.New("disconnected")

// await waits for the next completion of kind op (a receive, an RDMA
// READ or WRITE), skipping send completions and flushed work as rping
// does. It returns errDisconnected when the connection ends first.
func (s *session) await(ctx context.Context, op stack.WCOpcode) (stack.WC, error) {
	for {
		for len(s.pending) > 0 {
			wc := s.pending[0]
			s.pending = s.pending[1:]
			if wc.Status == stack.WCWRFlushErr {
				continue
			}
			if wc.Status != stack.WCSuccess {
				return wc, fmt.Errorf("cq completion failed status %d (%v)", wc.Status, wc.Status)
			}
			switch wc.Opcode {
			case stack.WCSend:
				s.debugf("send completion\n")
				continue
			case stack.WCRecv:
				s.debugf("recv completion\n")
				if wc.ByteLen != infoLen {
					return wc, fmt.Errorf("received bogus data, size %d", wc.ByteLen)
				}
				if err := s.postRecv(); err != nil {
					return wc, fmt.Errorf("post recv error: %w", err)
				}
			case stack.WCRDMARead:
				s.debugf("rdma read completion\n")
			case stack.WCRDMAWrite:
				s.debugf("rdma write completion\n")
			}
			if wc.Opcode != op {
				return wc, fmt.Errorf("unexpected %v completion while waiting for %v", wc.Opcode, op)
			}
			return wc, nil
		}
		if n := s.cq.Poll(s.wcs); n > 0 {
			s.pending = append(s.pending[:0], s.wcs[:n]...)
			continue
		}
		select {
		case <-s.done:
			return stack.WC{}, errDisconnected
		default:
		}
		wctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-stop:
			}
		}()
		err := s.cq.Wait(wctx)
		close(stop)
		cancel()
		if err != nil && s.cq.Len() == 0 {
			select {
			case <-s.done:
				return stack.WC{}, errDisconnected
			default:
			}
			return stack.WC{}, err
		}
	}
}

// info decodes the rdma_info received.
func (s *session) info() (addr uint64, rkey, size uint32) {
	return binary.BigEndian.Uint64(s.recv[0:]), binary.BigEndian.Uint32(s.recv[8:]), binary.BigEndian.Uint32(s.recv[12:])
}

// cString is b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func (s *session) server(ctx context.Context, a *rdmacm.Agent) error {
	l, err := a.Listen(netip.AddrPortFrom(s.cfg.Addr, s.cfg.Port))
	if err != nil {
		return err
	}
	defer l.Close()
	s.debugf("rdma_listen\n")
	r, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	s.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST (child) from %v\n", r.Remote)
	if s.qp, err = s.pd.CreateQP(s.qpInit()); err != nil {
		r.Reject(nil)
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	if err := s.qp.ToInit(stack.InitAttr{AccessFlags: stack.AccessRemoteRead | stack.AccessRemoteWrite}); err != nil {
		r.Reject(nil)
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	if err := s.postRecv(); err != nil {
		r.Reject(nil)
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	s.debugf("accepting client connection request\n")
	if s.conn, err = r.Accept(s.qp, nil); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	s.done = s.conn.Done()
	s.debugf("ESTABLISHED\n")
	err = s.serve(ctx)
	if errors.Is(err, errDisconnected) {
		// As rping: the CM thread's line, then the loop's.
		fmt.Fprintf(s.cfg.Stderr, "server DISCONNECT EVENT...\n")
		fmt.Fprintf(s.cfg.Stderr, "wait for RDMA_READ_ADV state 10\n")
		return nil
	}
	if err != nil {
		return fmt.Errorf("rping server failed: %w", err)
	}
	return nil
}

// serve is the server's loop, until the client disconnects.
func (s *session) serve(ctx context.Context) error {
	for {
		if _, err := s.await(ctx, stack.WCRecv); err != nil {
			return err
		}
		addr, rkey, n := s.info()
		s.debugf("Received rkey %x addr %x len %d from peer\n", rkey, addr, n)
		if int(n) > len(s.rdma) {
			return fmt.Errorf("the client's buffer is %d bytes, ours %d", n, len(s.rdma))
		}
		if err := s.qp.PostSend(&stack.SendWR{ID: 3, Op: stack.OpRead, Flags: stack.SendSignaled,
			SG: []stack.SGE{s.rdmaMR.SGE(0, n)}, Remote: stack.RemoteAddr{Addr: addr, RKey: rkey}}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		s.debugf("server posted rdma read req\n")
		if _, err := s.await(ctx, stack.WCRDMARead); err != nil {
			return err
		}
		if s.cfg.Verbose {
			fmt.Fprintf(s.cfg.Stdout, "server ping data: %s\n", cString(s.rdma))
		}
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		s.debugf("server posted go ahead\n")
		if _, err := s.await(ctx, stack.WCRecv); err != nil {
			return err
		}
		addr, rkey, _ = s.info()
		s.debugf("server received sink adv\n")
		w := uint32(len(cString(s.rdma)) + 1)
		if int(w) > len(s.rdma) {
			w = uint32(len(s.rdma))
		}
		if err := s.qp.PostSend(&stack.SendWR{ID: 4, Op: stack.OpWrite, Flags: stack.SendSignaled,
			SG: []stack.SGE{s.rdmaMR.SGE(0, w)}, Remote: stack.RemoteAddr{Addr: addr, RKey: rkey}}); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		s.debugf("rdma write from lkey %x laddr %x len %d\n", s.rdmaMR.LKey(), s.rdmaMR.Addr(), w)
		if _, err := s.await(ctx, stack.WCRDMAWrite); err != nil {
			return err
		}
		s.debugf("server rdma write complete\n")
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		s.debugf("server posted go ahead\n")
	}
}

// ConnectError is a client's failed connection: the CM event rping
// reports (RDMA_CM_EVENT_REJECTED, ..._UNREACHABLE) and why.
type ConnectError struct {
	Event  string
	Status int
	Err    error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cma event %s, error %d: %v", e.Event, e.Status, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

func (s *session) dial(ctx context.Context, a *rdmacm.Agent) (*rdmacm.Conn, error) {
	to := netip.AddrPortFrom(s.cfg.Addr, s.cfg.Port)
	deadline := time.Now().Add(s.cfg.ConnectWait)
	for {
		c, err := a.Dial(ctx, s.pd, to, s.qpInit(), nil, rdmacm.DialOptions{Source: netip.AddrPortFrom(s.cfg.Source, 0)})
		if err == nil {
			return c, nil
		}
		var rej *rdmacm.RejectError
		switch {
		case errors.As(err, &rej):
			if rej.Reason == mad.RejInvalidServiceID && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			why := err
			if rej.Reason == mad.RejInvalidServiceID {
				why = fmt.Errorf("%w: nobody listens on %v", err, to)
			}
			return nil, &ConnectError{Event: "RDMA_CM_EVENT_REJECTED", Status: int(rej.Reason), Err: why}
		case errors.Is(err, rdmacm.ErrUnreachable):
			return nil, &ConnectError{Event: "RDMA_CM_EVENT_UNREACHABLE", Status: -110, Err: fmt.Errorf("%v: %w", to, err)}
		}
		return nil, err
	}
}

func (s *session) client(ctx context.Context, a *rdmacm.Agent) error {
	if !s.cfg.Addr.IsValid() {
		return errors.New("no server address: give -a ADDR")
	}
	c, err := s.dial(ctx, a)
	if err != nil {
		return err
	}
	s.conn, s.qp, s.done = c, c.QP(), c.Done()
	s.debugf("rdma_connect successful\n")
	if err := s.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	err = s.pings(ctx)
	if errors.Is(err, errDisconnected) {
		fmt.Fprintf(s.cfg.Stderr, "client DISCONNECT EVENT...\n")
		return fmt.Errorf("rping client failed: the server disconnected")
	}
	if err != nil {
		return fmt.Errorf("rping client failed: %w", err)
	}
	s.conn = nil
	c.Close()
	fmt.Fprintf(s.cfg.Stderr, "client DISCONNECT EVENT...\n")
	return nil
}

// Fill writes ping number ping into b as rping does: "rdma-ping-N: ",
// then letters from start ('A' to 'z', wrapping), a NUL last.
func Fill(b []byte, ping int, start byte) {
	n := copy(b[:len(b)-1], "rdma-ping-"+strconv.Itoa(ping)+": ")
	c := start
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// pings is the client's loop.
func (s *session) pings(ctx context.Context) error {
	start := byte(65)
	for ping := 0; s.cfg.Count == 0 || ping < s.cfg.Count; ping++ {
		Fill(s.start, ping, start)
		if start++; start > 122 {
			start = 65
		}
		if err := s.postInfo(s.strMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, stack.WCRecv); err != nil {
			return err
		}
		if err := s.postInfo(s.rdmaMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.await(ctx, stack.WCRecv); err != nil {
			return err
		}
		if s.cfg.Validate && !bytes.Equal(s.start, s.rdma) {
			return fmt.Errorf("ping %d: %w", ping, ErrDataMismatch)
		}
		if s.cfg.Verbose {
			fmt.Fprintf(s.cfg.Stdout, "ping data: %s\n", cString(s.rdma))
		}
	}
	return nil
}
