// Package daemon serves a uroce device to local programs: the uroce
// daemon. It listens on a Unix socket, gives each connection a session
// of its own (objects, limits, rings), runs the sessions' work requests
// on the device through rings in shared memory, and destroys what a
// session created when it ends. proto/SPEC.md is the protocol.
//
// # Goroutines
//
// The server has one accepting goroutine (Serve). Each session has two:
// the control goroutine reads requests and answers them in order (it
// alone creates and destroys the session's objects), and the doorbell's
// goroutine wakes the device's engines when the client rings it. The
// engines themselves take the work requests from the session's send,
// receive and SRQ rings (ringPoller, a stack.Poller) and post them, in
// their own goroutines, so that a request passes from the client's
// process to the wire with no hand-off between goroutines; they write
// completions into the CQ rings (cqRing, a stack.CQSink). An engine
// holds pollMu while it scans the session's rings; the control goroutine
// takes pollMu after removing an object from the session's lists and
// before unmapping its rings, so that no ring is unmapped under a scan.
package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/uroce/uroce/rdmacm"
	"github.com/uroce/uroce/stack"
)

// Limits bound what one session may create.
type Limits struct {
	QPs, CQs, MRs, PDs, SRQs, AHs, Channels int
	MRBytes                                 int64 // registered bytes
}

// DefaultLimits are the per-session limits unless Config says otherwise.
var DefaultLimits = Limits{QPs: 4096, CQs: 4096, MRs: 65536, PDs: 1024, SRQs: 1024, AHs: 1024, Channels: 1024,
	MRBytes: 16 << 30}

// DefaultSpin is what uroce daemon gives its engines as
// stack.Config.IdleSpin: how long an idle engine goes on polling its
// queue and the clients' rings before it sleeps until a frame or a
// doorbell. A client waiting for a round trip posts again within that
// time and finds the engine awake: no doorbell, whose wake-up costs tens
// of microseconds.
const DefaultSpin = 500 * time.Microsecond

// Config describes a daemon.
type Config struct {
	Device *stack.Device
	// Name is the device name clients see (default uroce0); Netdev the
	// interface it runs on.
	Name, Netdev string
	// Socket is the path of the Unix socket (default
	// /run/uroce/NAME.sock).
	Socket string
	// Group names a group whose members may use the device, besides
	// root and the daemon's own user.
	Group  string
	Limits Limits
	Log    *slog.Logger
}

// Server is a running daemon.
type Server struct {
	cfg   Config
	ln    *net.UnixListener
	gid   int // the allowed group, -1 none
	log   *slog.Logger
	start time.Time

	mu       sync.Mutex
	sessions map[*session]struct{}
	nextID   uint32
	closing  bool
	wg       sync.WaitGroup
}

// Listen creates the socket and returns a server ready to Serve. A
// socket file left by a daemon that is gone is replaced; one a running
// daemon answers on is an error.
func Listen(cfg Config) (*Server, error) {
	if cfg.Device == nil {
		return nil, errors.New("daemon: no device")
	}
	if cfg.Name == "" {
		cfg.Name = "uroce0"
	}
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join("/run/uroce", cfg.Name+".sock")
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, gid: -1, log: cfg.Log, sessions: map[*session]struct{}{}, start: time.Now()}
	// The device answers connection requests from the start, as an RNIC
	// does, whether or not a client uses RDMA CM yet (a REQ for a port
	// nobody listens on is then refused at once, not left to time out).
	if _, err := rdmacm.AgentFor(cfg.Device); err != nil {
		s.log.Warn("rdma cm: no agent on the device; connection requests go unanswered", "err", err)
	}
	if cfg.Group != "" {
		g, err := user.LookupGroup(cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("daemon: group %q: %w", cfg.Group, err)
		}
		s.gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, fmt.Errorf("daemon: socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unixpacket", cfg.Socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("daemon: another daemon answers on %s", cfg.Socket)
	}
	os.Remove(cfg.Socket) // left by a daemon that is gone
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("daemon: listen on %s: %w", cfg.Socket, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(cfg.Socket, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if s.gid >= 0 {
		if err := os.Chown(cfg.Socket, -1, s.gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	s.ln = ln
	return s, nil
}

// Socket returns the path the server listens on.
func (s *Server) Socket() string { return s.cfg.Socket }

// Serve accepts clients until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				s.log.Warn("accept: out of file descriptors", "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return fmt.Errorf("daemon: accept: %w", err)
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.nextID++
		ss := newSession(s, c, s.nextID)
		s.sessions[ss] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			ss.run()
			s.mu.Lock()
			delete(s.sessions, ss)
			s.mu.Unlock()
		}()
	}
}

// Shutdown stops accepting, moves every client QP to ERR (their work
// completes with flush errors in the clients' CQ rings), tells every
// client the device is gone, closes the sessions, destroys what they
// created and removes the socket. The device itself stays open.
func (s *Server) Shutdown() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closing = true
	list := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		list = append(list, ss)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, ss := range list {
		ss.deviceGone()
	}
	s.wg.Wait()
}

// allowed reports whether a client of uid (with primary and
// supplementary groups gids) may use the device.
func (s *Server) allowed(uid uint32, gids []int) bool {
	if uid == 0 || int(uid) == os.Geteuid() {
		return true
	}
	for _, g := range gids {
		if s.gid >= 0 && g == s.gid {
			return true
		}
	}
	return false
}

// snapshot returns the sessions.
func (s *Server) snapshot() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		l = append(l, ss)
	}
	return l
}
