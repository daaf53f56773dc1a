package stack

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/link"
	"github.com/uroce/uroce/xdp"
)

// xdpLink is one queue of a network interface as a Link: an AF_XDP socket
// bound to the queue, plus an eventfd that Wake writes to so a Poll
// sleeping in ppoll(2) on both returns.
//
// The engine owning the link calls Receive, Release, Transmit and Poll;
// each holds mu for its duration (Poll while it sleeps too). Wake, Close
// and XDPStats may be called from any goroutine: Close and XDPStats wake
// a sleeping Poll before they take mu, and flag themselves (closed,
// waiters) so that Poll does not go back to sleep with mu before they got
// it. Received frames are views into the
// socket's UMEM; should Close come while the engine still holds some, the
// socket is closed by the Release that gives them back.
type xdpLink struct {
	mu      sync.Mutex
	sock    xdpSocket
	queue   int
	mtu     int
	maxLen  int
	lent    bool // frames of the last Receive not released yet
	txShort bool // the last Transmit did not take everything
	pfd     [2]unix.PollFd
	ts      unix.Timespec
	ebuf    [8]byte
	sockErr error // from closing the socket

	efdMu  sync.RWMutex // guards efd against Wake racing with Close
	efd    int
	closed atomic.Bool
	// waiters counts XDPStats calls waiting for mu: Poll does not go
	// to sleep while there are any, or it could keep mu forever after
	// consuming their wake-up.
	waiters atomic.Int32

	oversize atomic.Uint64
}

// xdpSocket is what an xdpLink uses of its AF_XDP socket (*xdp.Socket);
// tests substitute a socket whose device is busy.
type xdpSocket interface {
	Receive(frames [][]byte) int
	Release()
	Transmit(frames [][]byte) int
	Complete() int
	Unsent() int
	BusyPoll()
	FD() int
	Stats() (xdp.Stats, error)
	Close() error
}

// wakeOne is the eventfd increment written by Wake.
var wakeOne = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return }()

// txPollInterval is how long Poll sleeps at most when the last Transmit
// was short, or when frames are still on the TX ring because the device's
// queue was full: chunks come back on the completion ring, and a device
// queue gets room, without an event that ppoll(2) could wait for.
const txPollInterval = 50 * time.Microsecond

// newXDPLink wraps a bound socket. mtu is the interface's IP MTU.
func newXDPLink(s xdpSocket, queue, mtu int) (*xdpLink, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("create eventfd for queue %d: %w", queue, err)
	}
	return &xdpLink{sock: s, queue: queue, mtu: mtu, maxLen: link.MaxFrameLen(mtu), efd: efd}, nil
}

// Receive implements Link.
func (l *xdpLink) Receive(frames [][]byte) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return 0
	}
	n := l.sock.Receive(frames)
	l.lent = n > 0
	return n
}

// Release implements Link.
func (l *xdpLink) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sock == nil {
		return
	}
	l.lent = false
	if l.closed.Load() {
		l.closeSocket()
		return
	}
	l.sock.Release()
}

// Transmit implements Link. Frames longer than the interface's MTU allows
// are taken and dropped.
func (l *xdpLink) Transmit(frames [][]byte) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return len(frames)
	}
	taken := 0
	for taken < len(frames) {
		// The longest run of frames of acceptable length goes in one
		// call.
		end := taken
		for end < len(frames) && len(frames[end]) <= l.maxLen {
			end++
		}
		if end > taken {
			n := l.sock.Transmit(frames[taken:end])
			taken += n
			if taken < end {
				l.txShort = true
				return taken
			}
		}
		if taken < len(frames) {
			l.oversize.Add(1)
			taken++
		}
	}
	l.txShort = false
	return taken
}

// Poll implements Link. Poll(0) does not sleep, but it still kicks what
// a busy device left on the TX ring and, on a socket opened with kernel
// busy polling (Config.SocketBusyPoll), polls the queue: an engine that
// spins (BusyPoll, or before it sleeps) calls it on every idle turn for
// that.
func (l *xdpLink) Poll(timeout time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() || l.waiters.Load() > 0 {
		return
	}
	if l.txShort || l.sock.Unsent() > 0 {
		// Frames wait for chunks or ring slots (txShort), or sit on the
		// TX ring of a busy device: Complete takes chunks back and
		// wakes the kernel to send again, and Poll comes back soon to
		// repeat that. Sleeping until a frame arrives could leave READ
		// responses unsent until the requester's ACK timeout.
		reclaimed := l.sock.Complete() > 0
		if reclaimed && l.txShort {
			l.txShort = false
			return
		}
		if !l.txShort && l.sock.Unsent() == 0 {
			return // the device took the rest: the engine may have more
		}
		if timeout < 0 || timeout > txPollInterval {
			timeout = txPollInterval
		}
	}
	if timeout == 0 {
		l.sock.BusyPoll()
		return
	}
	l.pfd[0] = unix.PollFd{Fd: int32(l.sock.FD()), Events: unix.POLLIN}
	l.pfd[1] = unix.PollFd{Fd: int32(l.efd), Events: unix.POLLIN}
	var ts *unix.Timespec
	if timeout > 0 {
		l.ts = unix.NsecToTimespec(int64(timeout))
		ts = &l.ts
	}
	n, err := unix.Ppoll(l.pfd[:], ts, nil)
	if err == nil && n > 0 && l.pfd[1].Revents&unix.POLLIN != 0 {
		unix.Read(l.efd, l.ebuf[:]) // reset the eventfd
	}
}

// Wake implements Link.
func (l *xdpLink) Wake() {
	l.efdMu.RLock()
	if l.efd >= 0 {
		unix.Write(l.efd, wakeOne[:])
	}
	l.efdMu.RUnlock()
}

// MTU implements Link: the interface's IP MTU.
func (l *xdpLink) MTU() int { return l.mtu }

// Queue returns the interface queue the link is bound to.
func (l *xdpLink) Queue() int { return l.queue }

// XDPStats returns the AF_XDP socket's counters (the kernel's and its
// own) and the number of frames Transmit dropped for their length (in
// TxRejected). It may be called from any goroutine; it briefly wakes the
// engine.
func (l *xdpLink) XDPStats() (xdp.Stats, error) {
	if l.closed.Load() {
		return xdp.Stats{}, fmt.Errorf("read AF_XDP statistics of queue %d: %w", l.queue, ErrLinkClosed)
	}
	l.waiters.Add(1)
	l.Wake()
	l.mu.Lock()
	l.waiters.Add(-1)
	defer l.mu.Unlock()
	if l.sock == nil || l.closed.Load() {
		return xdp.Stats{}, fmt.Errorf("read AF_XDP statistics of queue %d: %w", l.queue, ErrLinkClosed)
	}
	st, err := l.sock.Stats()
	st.TxRejected += l.oversize.Load()
	return st, err
}

// Close implements Link: it closes the socket (at once, or at the
// engine's next Release if it holds received frames) and the eventfd.
func (l *xdpLink) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.Wake()
	l.mu.Lock()
	if !l.lent {
		l.closeSocket()
	}
	err := l.sockErr
	l.mu.Unlock()

	l.efdMu.Lock()
	if l.efd >= 0 {
		if cerr := unix.Close(l.efd); cerr != nil && err == nil {
			err = fmt.Errorf("close eventfd: %w", cerr)
		}
		l.efd = -1
	}
	l.efdMu.Unlock()
	return err
}

// closeSocket closes the socket; mu is held.
func (l *xdpLink) closeSocket() {
	if l.sock == nil {
		return
	}
	l.sockErr = l.sock.Close()
	l.sock = nil
}
