package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// session is one client connection and everything it created.
type session struct {
	srv  *Server
	conn *net.UnixConn
	id   uint32
	pid  int32
	uid  uint32
	comm string

	// Objects, by handle. The control goroutine changes them under mu;
	// the poller reads handles (address handles) under mu's read lock.
	mu      sync.RWMutex
	objs    map[uint32]any
	next    uint32
	count   [kinds]int
	mrBytes int64

	// The poller's view: the QPs and SRQs with rings, replaced whole.
	pollMu   sync.Mutex
	qps      atomic.Pointer[[]*qpObj]
	srqs     atomic.Pointer[[]*srqObj]
	doorbell *os.File // eventfd the client writes
	dbFD     int      // a duplicate, passed to the client
	dbSelf   int      // its number, for the daemon's own wake-ups
	poller   ringPoller
	stopPoll atomic.Bool
	pollDone chan struct{}
	broken   atomic.Bool // the client broke the protocol: end the session

	procMem *os.File // /proc/PID/mem, for MemProcess regions; nil if refused
	procErr error

	writeMu sync.Mutex
	started bool // Hello done
}

// Kinds of objects, for limits and handle checks.
type kind int

const (
	kindPD kind = iota
	kindMR
	kindCQ
	kindChannel
	kindSRQ
	kindQP
	kindAH
	kindCMChannel
	kindCMID
	kindMW
	kinds
)

var kindNames = [kinds]string{"pd", "mr", "cq", "channel", "srq", "qp", "ah", "cm event channel", "cm id", "mw"}

func newSession(s *Server, c *net.UnixConn, id uint32) *session {
	ss := &session{srv: s, conn: c, id: id, objs: map[uint32]any{}, pollDone: make(chan struct{})}
	empty := []*qpObj{}
	ss.qps.Store(&empty)
	none := []*srqObj{}
	ss.srqs.Store(&none)
	return ss
}

// run serves the session until the client leaves, then cleans up.
func (ss *session) run() {
	log := ss.srv.log
	defer ss.end()
	if err := ss.identify(); err != nil {
		log.Warn("client refused", "err", err)
		return
	}
	buf := make([]byte, proto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := ss.conn.ReadMsgUnix(buf, oob)
		fds := proto.ParseFDs(oob[:oobn])
		if err != nil || n == 0 {
			closeFDs(fds)
			if err != nil && !isEOF(err) {
				log.Debug("session read", "session", ss.id, "err", err)
			}
			return
		}
		if flags&unix.MSG_TRUNC != 0 {
			closeFDs(fds)
			log.Warn("client sent an oversized message", "session", ss.id, "pid", ss.pid)
			return
		}
		h, body, perr := proto.ParseHeader(buf[:n])
		if perr != nil {
			closeFDs(fds)
			log.Warn("client sent a malformed message", "session", ss.id, "pid", ss.pid, "err", perr)
			return
		}
		if !ss.started && h.Op != proto.OpHello {
			closeFDs(fds)
			log.Warn("client did not start with hello", "session", ss.id, "pid", ss.pid, "op", h.Op)
			return
		}
		resp, outFD, rerr := ss.handle(h, body, fds)
		if !ss.reply(h, resp, outFD, rerr) || ss.broken.Load() {
			return
		}
		if h.Op == proto.OpHello && rerr != nil {
			return
		}
	}
}

// identify reads the client's credentials and decides whether it may
// use the device; a refused client learns why from its Hello's answer.
func (ss *session) identify() error {
	raw, err := ss.conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(int(cred.Pid)) + "/comm")
	ss.mu.Lock() // Stats reads them
	ss.pid, ss.uid = cred.Pid, cred.Uid
	ss.comm = strings.TrimSpace(string(comm))
	ss.mu.Unlock()
	gids := append([]int{int(cred.Gid)}, groupsOf(int(cred.Pid))...)
	if !ss.srv.allowed(cred.Uid, gids) {
		msg := fmt.Sprintf("uid %d may not use %s: the daemon admits root, its own user", cred.Uid, ss.srv.cfg.Name)
		if ss.srv.cfg.Group != "" {
			msg += " and members of group " + ss.srv.cfg.Group
		} else {
			msg += " (start it with --group to admit a group)"
		}
		ss.refuse(msg)
		return fmt.Errorf("pid %d (%s): %s", ss.pid, ss.comm, msg)
	}
	return nil
}

// refuse answers the client's Hello with EACCES and the reason.
func (ss *session) refuse(msg string) {
	ss.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, proto.MaxMessage)
	n, oobn, _, _, err := ss.conn.ReadMsgUnix(buf, make([]byte, unix.CmsgSpace(16)))
	_ = oobn
	h := proto.Header{Op: proto.OpHello}
	if err == nil {
		if hh, _, perr := proto.ParseHeader(buf[:n]); perr == nil {
			h = hh
		}
	}
	ss.reply(h, nil, -1, errnoErr{unix.EACCES, msg})
}

// groupsOf returns the supplementary groups of a process.
func groupsOf(pid int) []int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	var gids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "Groups:"); ok {
			for _, g := range strings.Fields(l) {
				if n, err := strconv.Atoi(g); err == nil {
					gids = append(gids, n)
				}
			}
		}
	}
	return gids
}

// reply sends the response to h: body, or the error's errno and text.
func (ss *session) reply(h proto.Header, body any, fd int, err error) bool {
	rh := proto.Header{Op: h.Op, Seq: h.Seq}
	if err != nil {
		rh.Err = int32(errnoOf(err))
		body = []byte(err.Error())
		if fd >= 0 {
			unix.Close(fd)
			fd = -1
		}
	}
	msg, merr := proto.Marshal(rh, body)
	if merr != nil {
		ss.srv.log.Error("marshal", "op", h.Op, "err", merr)
		return false
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	ss.writeMu.Lock()
	defer ss.writeMu.Unlock()
	ss.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _, werr := ss.conn.WriteMsgUnix(msg, oob, nil)
	if fd >= 0 && h.Op != proto.OpHello {
		unix.Close(fd) // the client has its own copy now; the doorbell stays open
	}
	return werr == nil
}

// event sends an event (seq 0) to the client, giving up on a client that
// does not read.
func (ss *session) event(op proto.Op, body any) {
	msg, err := proto.Marshal(proto.Header{Op: op}, body)
	if err != nil {
		return
	}
	ss.writeMu.Lock()
	ss.conn.SetWriteDeadline(time.Now().Add(time.Second))
	ss.conn.WriteMsgUnix(msg, nil, nil)
	ss.writeMu.Unlock()
}

// deviceGone ends the session because the daemon stops: QPs to ERR, the
// event, then the connection closes and run cleans up.
func (ss *session) deviceGone() {
	ss.mu.RLock()
	for _, o := range ss.objs {
		switch o := o.(type) {
		case *qpObj:
			o.q.ToErr()
		case *cmChannelObj:
			// Wake whoever waits for a CM event: its next request
			// fails, and the library reports DEVICE_REMOVAL.
			o.signal(1)
		}
	}
	ss.mu.RUnlock()
	ss.event(proto.OpEventDeviceGone, nil)
	ss.conn.CloseRead()
}

// end destroys everything the session created and closes it.
func (ss *session) end() {
	ss.stopPoller()
	ss.mu.Lock()
	objs := ss.objs
	ss.objs = map[uint32]any{}
	ss.mu.Unlock()
	// Dependency order: what uses an object goes before it.
	// CM IDs first: their connections use the QPs.
	// Windows before regions: a bound window keeps its region.
	for _, k := range []kind{kindCMID, kindQP, kindAH, kindSRQ, kindCQ, kindMW, kindMR, kindChannel, kindCMChannel, kindPD} {
		for h, o := range objs {
			if kindOf(o) == k {
				if err := ss.destroy(o); err != nil {
					ss.srv.log.Error("cleanup", "session", ss.id, "handle", h, "kind", kindNames[k], "err", err)
				}
			}
		}
	}
	if ss.doorbell != nil {
		ss.doorbell.Close()
	}
	if ss.procMem != nil {
		ss.procMem.Close()
	}
	ss.conn.Close()
	if ss.started {
		ss.srv.log.Info("client left", "session", ss.id, "pid", ss.pid, "comm", ss.comm)
	}
}

// add stores an object and returns its handle, or fails on the limit.
func (ss *session) add(k kind, o any) (uint32, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.next++
	h := ss.next
	ss.objs[h] = o
	ss.count[k]++
	return h, nil
}

// room checks the limit of kind k before creating one.
func (ss *session) room(k kind) error {
	lim := ss.srv.cfg.Limits
	max := [kinds]int{kindPD: lim.PDs, kindMR: lim.MRs, kindCQ: lim.CQs, kindChannel: lim.Channels,
		kindSRQ: lim.SRQs, kindQP: lim.QPs, kindAH: lim.AHs,
		// CM event channels count as channels, and a session may have
		// as many CM IDs as QPs.
		kindCMChannel: lim.Channels, kindCMID: lim.QPs,
		// Windows and regions share a limit, as they share the
		// device's key space.
		kindMW: lim.MRs}[k]
	ss.mu.RLock()
	n := ss.count[k]
	if k == kindMR || k == kindMW {
		n = ss.count[kindMR] + ss.count[kindMW]
	}
	ss.mu.RUnlock()
	if n >= max {
		what := kindNames[k] + "s"
		if k == kindMR || k == kindMW {
			what = "mrs and mws"
		}
		return errnoErr{unix.ENOMEM, fmt.Sprintf("limit of %d %s per client reached", max, what)}
	}
	return nil
}

// get returns the object of handle h if it is of kind k.
func get[T any](ss *session, h uint32) (T, error) {
	ss.mu.RLock()
	o, ok := ss.objs[h].(T)
	ss.mu.RUnlock()
	if !ok {
		var zero T
		return zero, errnoErr{unix.EINVAL, fmt.Sprintf("no %s with handle %d", kindName[T](), h)}
	}
	return o, nil
}

// remove forgets handle h.
func (ss *session) remove(h uint32, k kind) {
	ss.mu.Lock()
	delete(ss.objs, h)
	ss.count[k]--
	ss.mu.Unlock()
}

// errnoErr is an error with the errno the client gets.
type errnoErr struct {
	errno syscall.Errno
	msg   string
}

func (e errnoErr) Error() string { return e.msg }

// errnoOf maps an error to the errno libibverbs would return.
func errnoOf(err error) syscall.Errno {
	var e errnoErr
	var se syscall.Errno
	switch {
	case errors.As(err, &e):
		return e.errno
	case errors.Is(err, stack.ErrBusy):
		return unix.EBUSY
	case errors.Is(err, stack.ErrNoResources), errors.Is(err, stack.ErrQueueFull):
		return unix.ENOMEM
	case errors.Is(err, stack.ErrUnsupported):
		return unix.EOPNOTSUPP
	case errors.Is(err, stack.ErrNoNeighbor):
		return unix.EHOSTUNREACH
	case errors.Is(err, stack.ErrClosed):
		return unix.ENODEV
	case errors.As(err, &se):
		return se
	}
	return unix.EINVAL
}

// eventfdPair creates an eventfd and a duplicate of it to pass to the
// client (which the reply closes once sent).
func eventfdPair(flags int) (efd, dup int, err error) {
	if efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|flags); err != nil {
		return -1, -1, err
	}
	if dup, err = unix.Dup(efd); err != nil {
		unix.Close(efd)
		return -1, -1, err
	}
	return efd, dup, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func isEOF(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || bytes.Contains([]byte(err.Error()), []byte("EOF"))
}
