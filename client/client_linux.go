// Package client uses a uroce device that the uroce daemon runs: it
// implements the verbs interfaces (package verbs) over the daemon's
// socket and shared rings (proto/SPEC.md). A program needs no privilege
// and no interface of its own; its work requests go to the daemon
// through memory, without a system call while the daemon is busy.
//
//	dev, err := client.Open(ctx, "")        // /run/uroce/uroce0.sock
//	buf, _ := dev.AllocBuffer(1 << 20)       // memory the daemon shares
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegisterMR(buf, verbs.AccessLocalWrite)
//
// Every method is safe for concurrent use.
package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
	"github.com/uroce/uroce/verbs"
)

// DefaultSocket is where the daemon of device uroce0 listens.
const DefaultSocket = "/run/uroce/uroce0.sock"

// Errors a program may branch on (besides those of package stack, which
// the daemon's errors map to).
var (
	// ErrNoDaemon: no daemon listens on the socket.
	ErrNoDaemon = errors.New("no uroce daemon")
	// ErrDeviceGone: the daemon stopped; every object is gone.
	ErrDeviceGone = errors.New("device gone: the uroce daemon stopped")
)

// Device is a device the daemon serves (verbs.Device).
type Device struct {
	conn     *net.UnixConn
	sockFD   int // the socket's descriptor, to watch for the daemon's end
	socket   string
	doorbell int
	hello    proto.HelloResp
	attr     stack.DeviceAttr
	gids     []netip.Addr

	callMu sync.Mutex // one request at a time
	seq    uint32
	rbuf   []byte
	oob    []byte
	gone   atomic.Bool

	memMu  sync.Mutex
	allocs []*alloc // by address
	mrs    map[uint32]*MR
	closed atomic.Bool
}

// alloc is a buffer of AllocBuffer: a memfd mapped here and, once
// registered, in the daemon.
type alloc struct {
	base uintptr
	mem  []byte
	fd   int
}

var _ verbs.Device = (*Device)(nil)

// Open connects to the daemon listening on socket (DefaultSocket when
// empty) and opens its device.
func Open(ctx context.Context, socket string) (*Device, error) {
	if socket == "" {
		socket = DefaultSocket
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("open %s: %w: is the daemon running? (start it as root: uroce daemon -d IFACE)", socket, ErrNoDaemon)
		case errors.Is(err, syscall.EACCES):
			return nil, fmt.Errorf("open %s: permission denied: ask for membership of the daemon's group (uroce daemon --group)", socket)
		}
		return nil, fmt.Errorf("open %s: %w", socket, err)
	}
	d := &Device{conn: c.(*net.UnixConn), socket: socket, doorbell: -1, rbuf: make([]byte, proto.MaxMessage),
		oob: make([]byte, unix.CmsgSpace(4*4)), mrs: map[uint32]*MR{}, sockFD: -1}
	if rc, err := d.conn.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { d.sockFD = int(fd) })
	}
	fd, err := d.call(proto.OpHello, &proto.Hello{Version: proto.Version}, -1, &d.hello)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("open %s: %w", socket, err)
	}
	d.doorbell = fd
	var da proto.DeviceAttr
	var pa proto.PortAttr
	if _, err = d.call(proto.OpQueryDevice, nil, -1, &da); err == nil {
		_, err = d.call(proto.OpQueryPort, &proto.PortReq{Port: 1}, -1, &pa)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open %s: %w", socket, err)
	}
	for i := 0; i < int(pa.GIDTblLen); i++ {
		var g proto.GIDResp
		if _, err := d.call(proto.OpQueryGID, &proto.IndexReq{Port: 1, Index: int32(i)}, -1, &g); err != nil {
			break
		}
		d.gids = append(d.gids, netip.AddrFrom16(g.GID))
	}
	d.attr = stack.DeviceAttr{Name: d.hello.Device.String(), NodeGUID: da.NodeGUID, MaxMRSize: da.MaxMRSize,
		MaxPKeys: int(da.MaxPKeys), PortState: "ACTIVE", MaxMTU: stack.MTU(pa.MaxMTU), ActiveMTU: stack.MTU(pa.ActiveMTU),
		LinkMTU: int(pa.LinkMTU), GIDTableLen: int(pa.GIDTblLen), NumQueues: 1, TransportVer: "RoCEv2",
		MAC: [6]byte(pa.MAC[:6]),
		Limits: stack.Limits{MaxQP: int(da.MaxQP), MaxQPWR: int(da.MaxQPWR), MaxSGE: int(da.MaxSGE),
			MaxInline: int(da.MaxInline), MaxCQE: int(da.MaxCQE), MaxMR: int(da.MaxMR), MaxSRQWR: int(da.MaxSRQWR),
			MaxQPRdAtom: int(da.MaxQPRdAtom), MaxQPInitRdAtom: int(da.MaxQPInitRdAtom),
			MaxMcastGrp: int(da.MaxMcastGrp), MaxMcastQPAttach: int(da.MaxMcastQPAttach),
			MaxTotalMcastQPAttach: int(da.MaxTotalMcastQPAttach)}}
	return d, nil
}

// call sends one request and waits for its response, which it decodes
// into resp (nil: none). fd, when not -1, goes with the request. It
// returns a descriptor that came with the response, or -1.
func (d *Device) call(op proto.Op, body any, fd int, resp any) (int, error) {
	d.callMu.Lock()
	defer d.callMu.Unlock()
	if d.gone.Load() {
		return -1, fmt.Errorf("%v: %w", op, ErrDeviceGone)
	}
	if d.closed.Load() {
		return -1, fmt.Errorf("%v: %w", op, stack.ErrClosed)
	}
	d.seq++
	msg, err := proto.Marshal(proto.Header{Op: op, Seq: d.seq}, body)
	if err != nil {
		return -1, err
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if _, _, err := d.conn.WriteMsgUnix(msg, oob, nil); err != nil {
		return -1, d.lost(op, err)
	}
	for {
		n, oobn, _, _, err := d.conn.ReadMsgUnix(d.rbuf, d.oob)
		if err != nil || n == 0 {
			if err == nil {
				err = errors.New("connection closed")
			}
			return -1, d.lost(op, err)
		}
		rfd := -1
		if fds := proto.ParseFDs(d.oob[:oobn]); len(fds) > 0 {
			rfd = fds[0]
			for _, f := range fds[1:] {
				unix.Close(f)
			}
		}
		h, rb, err := proto.ParseHeader(d.rbuf[:n])
		if err != nil {
			return -1, fmt.Errorf("%v: daemon sent a malformed message: %w", op, err)
		}
		if h.Seq == 0 {
			if h.Op == proto.OpEventDeviceGone {
				d.gone.Store(true)
			}
			if rfd >= 0 {
				unix.Close(rfd)
			}
			continue
		}
		if h.Seq != d.seq || h.Op != op {
			if rfd >= 0 {
				unix.Close(rfd)
			}
			return -1, fmt.Errorf("%v: daemon answered %v #%d", op, h.Op, h.Seq)
		}
		if h.Err != 0 {
			if rfd >= 0 {
				unix.Close(rfd)
			}
			return -1, &Error{Op: op, Errno: syscall.Errno(h.Err), Msg: string(rb)}
		}
		switch r := resp.(type) {
		case nil:
		case *rawBody:
			r.b = append([]byte(nil), rb...)
		default:
			if err := proto.Unmarshal(rb, resp); err != nil {
				return -1, err
			}
		}
		return rfd, nil
	}
}

func (d *Device) lost(op proto.Op, err error) error {
	d.gone.Store(true)
	return fmt.Errorf("%v: %w (%v)", op, ErrDeviceGone, err)
}

// Error is an error the daemon answered with.
type Error struct {
	Op    proto.Op
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return fmt.Sprintf("%v: %v", e.Op, e.Errno)
}

// Unwrap gives the errno, and the stack error a program would get
// in-process for it.
func (e *Error) Unwrap() []error {
	l := []error{e.Errno}
	switch e.Errno {
	case unix.EINVAL:
		l = append(l, stack.ErrInvalidArg)
	case unix.EBUSY:
		l = append(l, stack.ErrBusy)
	case unix.ENOMEM:
		l = append(l, stack.ErrNoResources)
	case unix.EOPNOTSUPP:
		l = append(l, stack.ErrUnsupported)
	case unix.EHOSTUNREACH:
		l = append(l, stack.ErrNoNeighbor)
	}
	return l
}

// Session returns the daemon's number for this connection (the id of
// its session in Stat).
func (d *Device) Session() uint32 { return d.hello.Session }

// Name returns the device's name (uroce0).
func (d *Device) Name() string { return d.hello.Device.String() }

// Query implements verbs.Device.
func (d *Device) Query() stack.DeviceAttr { return d.attr }

// GIDs implements verbs.Device.
func (d *Device) GIDs() []netip.Addr { return append([]netip.Addr(nil), d.gids...) }

// GID implements verbs.Device.
func (d *Device) GID(i int) (netip.Addr, error) {
	if i < 0 || i >= len(d.gids) {
		return netip.Addr{}, fmt.Errorf("gid index %d of %d: %w", i, len(d.gids), stack.ErrInvalidArg)
	}
	return d.gids[i], nil
}

// Counters implements verbs.Device: the daemon's device counters.
func (d *Device) Counters() stack.Counters {
	var c stack.Counters
	st, err := d.Stat(^uint32(0))
	if err != nil {
		return c
	}
	for k, v := range st.Device.Counters {
		c.Set(k, v)
	}
	return c
}

// Stat returns the daemon's counters, sessions and QPs (all QPs for qpn
// 0, none for ^0).
func (d *Device) Stat(qpn uint32) (*proto.Stat, error) {
	body, err := d.callRaw(proto.OpStat, &proto.StatReq{QPN: qpn})
	if err != nil {
		return nil, err
	}
	var st proto.Stat
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	return &st, nil
}

func (d *Device) callRaw(op proto.Op, body any) ([]byte, error) {
	var r rawBody
	if _, err := d.call(op, body, -1, &r); err != nil {
		return nil, err
	}
	return r.b, nil
}

// rawBody is a response body taken as it is.
type rawBody struct{ b []byte }

// AllocBuffer implements verbs.Device: n bytes of a memfd mapped here,
// sealed against resizing, that RegisterMR shares with the daemon.
func (d *Device) AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("alloc buffer: %d bytes: %w", n, stack.ErrInvalidArg)
	}
	size := (n + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	fd, err := unix.MemfdCreate("uroce-buf", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("alloc buffer: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("alloc buffer: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("alloc buffer: seal: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("alloc buffer: %w", err)
	}
	a := &alloc{base: uintptr(unsafe.Pointer(&mem[0])), mem: mem, fd: fd}
	d.memMu.Lock()
	d.allocs = append(d.allocs, a)
	sort.Slice(d.allocs, func(i, j int) bool { return d.allocs[i].base < d.allocs[j].base })
	d.memMu.Unlock()
	return mem[:n:n], nil
}

// FreeBuffer implements verbs.Device.
func (d *Device) FreeBuffer(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("free buffer: empty: %w", stack.ErrInvalidArg)
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	d.memMu.Lock()
	defer d.memMu.Unlock()
	for i, a := range d.allocs {
		if a.base == p {
			for _, mr := range d.mrs {
				if mr.alloc == a {
					return fmt.Errorf("free buffer: a region still uses it: %w", stack.ErrBusy)
				}
			}
			d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
			unix.Munmap(a.mem)
			unix.Close(a.fd)
			return nil
		}
	}
	return fmt.Errorf("free buffer: not a buffer of AllocBuffer: %w", stack.ErrInvalidArg)
}

// allocOf returns the buffer of AllocBuffer holding [p, p+n), if any.
func (d *Device) allocOf(p uintptr, n int) *alloc {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	for _, a := range d.allocs {
		if p >= a.base && p+uintptr(n) <= a.base+uintptr(len(a.mem)) {
			return a
		}
	}
	return nil
}

// AllocPD implements verbs.Device.
func (d *Device) AllocPD() (verbs.PD, error) {
	var h proto.Handle
	if _, err := d.call(proto.OpAllocPD, nil, -1, &h); err != nil {
		return nil, fmt.Errorf("alloc pd: %w", err)
	}
	return &PD{d: d, h: h.Handle}, nil
}

// Close implements verbs.Device: the daemon destroys what the program
// created; its buffers are unmapped.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.callMu.Lock()
	err := d.conn.Close()
	d.callMu.Unlock()
	if d.doorbell >= 0 {
		unix.Close(d.doorbell)
	}
	d.memMu.Lock()
	for _, a := range d.allocs {
		unix.Munmap(a.mem)
		unix.Close(a.fd)
	}
	d.allocs = nil
	d.memMu.Unlock()
	return err
}

// ring rings the session's doorbell.
func (d *Device) ring() { unix.Write(d.doorbell, one) }

var one = func() []byte { b := make([]byte, 8); binary.NativeEndian.PutUint64(b, 1); return b }()

// destroy sends a destroy request for handle h.
func (d *Device) destroy(op proto.Op, h uint32) error {
	_, err := d.call(op, &proto.Handle{Handle: h}, -1, nil)
	return err
}

// mapRing maps a ring memfd of size bytes and closes the descriptor.
func mapRing(fd int, size uint32) ([]byte, error) {
	defer unix.Close(fd)
	if fd < 0 {
		return nil, errors.New("daemon sent no ring")
	}
	return unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// waitFD waits until eventfd f is signalled, ctx is done, or the
// daemon ends the session (it stopped, or was killed): the socket then
// reads as closed, or holds the DeviceGone event.
func (d *Device) waitFD(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var efd int
	rc.Control(func(fd uintptr) { efd = int(fd) })
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}, {Fd: int32(d.sockFD), Events: unix.POLLIN}}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.gone.Load() {
			return ErrDeviceGone
		}
		ms := 50
		if t, ok := ctx.Deadline(); ok {
			ms = max(0, min(ms, int(time.Until(t).Milliseconds())+1))
		}
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, ms); err != nil && err != unix.EINTR {
			return err
		}
		if fds[1].Revents != 0 {
			d.checkGone()
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			var b [8]byte
			unix.Read(efd, b[:])
			return nil
		}
	}
}

// checkGone reads what the daemon sent outside a request: its end, or an
// event.
func (d *Device) checkGone() {
	if !d.callMu.TryLock() {
		return // a request in progress reads the socket
	}
	defer d.callMu.Unlock()
	d.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer d.conn.SetReadDeadline(time.Time{})
	n, oobn, _, _, err := d.conn.ReadMsgUnix(d.rbuf, d.oob)
	for _, fd := range proto.ParseFDs(d.oob[:oobn]) {
		unix.Close(fd)
	}
	if err != nil {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			d.gone.Store(true)
		}
		return
	}
	if n == 0 {
		d.gone.Store(true)
		return
	}
	if h, _, err := proto.ParseHeader(d.rbuf[:n]); err == nil && h.Op == proto.OpEventDeviceGone {
		d.gone.Store(true)
	}
}
