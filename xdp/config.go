package xdp

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ChunkSize is the size of a UMEM chunk: one page. Larger chunks are refused
// by the kernels uroce targets, so a frame larger than a chunk travels as
// several descriptors (see Config.MultiBuffer).
const ChunkSize = 4096

// maxFrags bounds the descriptors of one frame, as the kernel does
// (MAX_SKB_FRAGS plus the linear part).
const maxFrags = 17

// Defaults for Config.
const (
	DefaultFrames   = 4096
	DefaultRingSize = 2048
)

// BindMode selects between zero-copy and copy mode.
type BindMode int

// Bind modes.
const (
	// Auto lets the kernel use zero-copy when the driver supports it and
	// copy mode otherwise.
	Auto BindMode = iota
	// Copy forces copy mode (XDP_COPY).
	Copy
	// ZeroCopy demands zero-copy (XDP_ZEROCOPY); Open fails with
	// ErrNoZeroCopy when the driver cannot do it.
	ZeroCopy
)

func (m BindMode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Copy:
		return "copy"
	case ZeroCopy:
		return "zerocopy"
	}
	return fmt.Sprintf("BindMode(%d)", int(m))
}

// ParseBindMode parses "auto", "copy" and "zerocopy" (or "zc").
func ParseBindMode(s string) (BindMode, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return Auto, nil
	case "copy":
		return Copy, nil
	case "zerocopy", "zero-copy", "zc":
		return ZeroCopy, nil
	}
	return Auto, fmt.Errorf("parse AF_XDP bind mode %q: want auto, copy or zerocopy", s)
}

// Config describes an AF_XDP socket. Zero fields take defaults.
type Config struct {
	// Interface names the network interface, looked up in the network
	// namespace of the calling thread. Ifindex may be given instead.
	Interface string
	// Ifindex is the interface index; it takes precedence over Interface.
	Ifindex int
	// Queue is the interface queue to bind to.
	Queue int
	// Frames is the number of UMEM chunks (ChunkSize bytes each),
	// DefaultFrames by default, or twice RingSize when that is more. Up
	// to RingSize of them (at most half) are
	// kept on the fill ring for receiving; the rest carry transmitted
	// frames.
	Frames int
	// RingSize is the number of entries of each of the four rings, a
	// power of two; DefaultRingSize by default.
	RingSize int
	// Mode chooses copy or zero-copy.
	Mode BindMode
	// NeedWakeup binds with XDP_USE_NEED_WAKEUP: the kernel says through
	// ring flags when it needs a system call to make progress, and the
	// socket makes one only then. Recommended.
	NeedWakeup bool
	// MultiBuffer binds with XDP_USE_SG, so frames larger than a chunk
	// (jumbo frames, RoCE at path MTU 4096) can be received and sent as
	// chains of descriptors.
	MultiBuffer bool
	// BusyPoll, when positive, asks the kernel to poll the queue's NAPI
	// context from the socket's own system calls (SO_PREFER_BUSY_POLL,
	// SO_BUSY_POLL with this many microseconds, SO_BUSY_POLL_BUDGET):
	// a recvfrom or sendto then processes the device's receive queue
	// itself instead of leaving it to a softirq. It needs a kernel with
	// the options (Linux 5.11) and CAP_NET_ADMIN. See Socket.BusyPoll.
	BusyPoll time.Duration
	// BusyPollBudget is the most packets one busy poll processes
	// (SO_BUSY_POLL_BUDGET), 64 by default.
	BusyPollBudget int
}

// Errors returned by Open and the Socket methods. Open wraps them together
// with the underlying system error, so errors.Is works with both.
var (
	// ErrNoAFXDP: the kernel has no AF_XDP sockets (EAFNOSUPPORT).
	ErrNoAFXDP = errors.New("the kernel has no AF_XDP sockets")
	// ErrPermission: AF_XDP needs root or CAP_NET_RAW (and CAP_NET_ADMIN
	// for the XDP program).
	ErrPermission = errors.New("AF_XDP sockets need root or CAP_NET_RAW")
	// ErrNoInterface: the interface does not exist in this network
	// namespace.
	ErrNoInterface = errors.New("no such network interface")
	// ErrQueueBusy: another AF_XDP socket is bound to the queue (EBUSY).
	ErrQueueBusy = errors.New("queue already has an AF_XDP socket")
	// ErrNoQueue: the interface has no such queue.
	ErrNoQueue = errors.New("no such queue on the interface")
	// ErrNoZeroCopy: ZeroCopy was asked for and the driver cannot do it.
	ErrNoZeroCopy = errors.New("zero-copy not supported by the driver")
	// ErrClosed: the socket is closed.
	ErrClosed = errors.New("AF_XDP socket closed")
	// ErrUnsupported: AF_XDP exists on Linux only.
	ErrUnsupported = errors.New("AF_XDP is only available on Linux")
)

// withDefaults fills in defaults and checks the configuration.
func (c Config) withDefaults() (Config, error) {
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.Frames == 0 {
		// As many chunks for transmitting as the fill ring holds.
		c.Frames = max(DefaultFrames, 2*c.RingSize)
	}
	switch {
	case c.Frames < 2 || c.Frames > 1<<20:
		return c, fmt.Errorf("AF_XDP config: %d frames, want 2 to %d", c.Frames, 1<<20)
	case c.RingSize < 2 || c.RingSize > 1<<20 || c.RingSize&(c.RingSize-1) != 0:
		return c, fmt.Errorf("AF_XDP config: ring size %d, want a power of two from 2 to %d", c.RingSize, 1<<20)
	case c.Queue < 0:
		return c, fmt.Errorf("AF_XDP config: queue %d: %w", c.Queue, ErrNoQueue)
	case c.Mode < Auto || c.Mode > ZeroCopy:
		return c, fmt.Errorf("AF_XDP config: unknown bind mode %d", int(c.Mode))
	case c.BusyPoll < 0 || c.BusyPoll > time.Second:
		return c, fmt.Errorf("AF_XDP config: busy poll %v, want 0 to 1s", c.BusyPoll)
	case c.BusyPollBudget < 0 || c.BusyPollBudget > 1<<16:
		return c, fmt.Errorf("AF_XDP config: busy poll budget %d, want 0 to %d", c.BusyPollBudget, 1<<16)
	}
	if c.BusyPoll > 0 && c.BusyPollBudget == 0 {
		c.BusyPollBudget = 64
	}
	return c, nil
}

// rxChunks is the number of chunks kept circulating between the fill and
// RX rings and the application; the others are for transmit.
func (c Config) rxChunks() int { return min(c.RingSize, c.Frames/2) }

// Stats are a socket's counters: the kernel's (XDP_STATISTICS) and the
// socket's own.
type Stats struct {
	// Kernel counters.
	RxDropped            uint64 // frames dropped for lack of an RX slot or too large
	RxInvalidDescs       uint64 // invalid descriptors on the fill ring
	TxInvalidDescs       uint64 // invalid descriptors on the TX ring
	RxRingFull           uint64 // frames dropped because the RX ring was full
	RxFillRingEmptyDescs uint64 // times the fill ring was found empty
	TxRingEmptyDescs     uint64 // times the TX ring was found empty

	// Socket counters.
	RxFrames      uint64 // frames returned by Receive
	RxBytes       uint64
	RxMultiBuffer uint64 // of which assembled from several descriptors
	RxBad         uint64 // descriptors outside the UMEM, or frames too large to assemble
	TxFrames      uint64 // frames accepted by Transmit
	TxBytes       uint64
	TxMultiBuffer uint64 // of which sent as several descriptors
	TxRejected    uint64 // frames Transmit could never send (empty, or too large)
	TxBusy        uint64 // copy-mode wake-ups after which frames stayed on the TX ring (device queue full)
	Completed     uint64 // chunks returned through the completion ring
	Wakeups       uint64 // sendto/recvfrom calls made to wake the kernel
	WakeupErrors  uint64 // of which failed with an error other than EAGAIN, EBUSY, ENOBUFS, ENETDOWN

	ZeroCopy bool // the socket is bound in zero-copy mode (else copy mode)
}
