package xdp

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// sysSocket is the Linux state of a Socket: its descriptor and mappings.
type sysSocket struct {
	fd    int
	umem  []byte   // the UMEM mapping
	rings [][]byte // the four ring mappings
	pfd   [1]unix.PollFd
	ts    unix.Timespec
}

// Open creates an AF_XDP socket with its own UMEM and binds it to a queue of
// an interface. Interfaces are looked up, and the socket lives, in the
// network namespace of the calling thread (see internal/netns.Do).
//
// For frames to arrive, an XDP program must redirect them to the socket
// (package bpf: Program.Register with FD).
//
// The kernel lets go of a closed socket's queue some tens of milliseconds
// after Close returns. So that a queue can be bound again right away, Open
// retries a bind that fails with EBUSY for up to five seconds before it
// reports ErrQueueBusy.
func Open(cfg Config) (*Socket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open AF_XDP socket: %w", err)
	}
	name := cfg.Interface
	if cfg.Ifindex == 0 {
		if name == "" {
			return nil, fmt.Errorf("open AF_XDP socket: %w: no interface given", ErrNoInterface)
		}
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("open AF_XDP socket on %s: %w: %w", name, ErrNoInterface, err)
		}
		cfg.Ifindex = ifi.Index
	}
	if name == "" {
		name = "ifindex " + strconv.Itoa(cfg.Ifindex)
	}
	op := fmt.Sprintf("open AF_XDP socket on %s queue %d", name, cfg.Queue)

	sys := &sysSocket{fd: -1}
	ok := false
	defer func() {
		if !ok {
			sys.close()
		}
	}()

	sys.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		sys.fd = -1
		return nil, fmt.Errorf("%s: %w", op, classify(err))
	}
	if cfg.BusyPoll > 0 {
		if err := setBusyPoll(sys.fd, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	sys.umem, err = unix.Mmap(-1, 0, cfg.Frames*ChunkSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("%s: map %d-byte UMEM: %w", op, cfg.Frames*ChunkSize, err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptrOf(sys.umem)),
		Len:  uint64(len(sys.umem)),
		Size: ChunkSize,
	}
	if err := setsockoptUmemReg(sys.fd, &reg); err != nil {
		return nil, fmt.Errorf("%s: register UMEM: %w", op, classify(err))
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(sys.fd, unix.SOL_XDP, opt, cfg.RingSize); err != nil {
			return nil, fmt.Errorf("%s: set ring size %d: %w", op, cfg.RingSize, err)
		}
	}
	off, err := getsockoptMmapOffsets(sys.fd)
	if err != nil {
		return nil, fmt.Errorf("%s: read ring offsets: %w", op, err)
	}
	conv := func(o unix.XDPRingOffset) ringOffsets {
		return ringOffsets{producer: o.Producer, consumer: o.Consumer, desc: o.Desc, flags: o.Flags}
	}
	rings := &ringMems{fillOff: conv(off.Fr), rxOff: conv(off.Rx), txOff: conv(off.Tx), compOff: conv(off.Cr)}
	n := uint32(cfg.RingSize)
	for _, r := range []struct {
		mem   *[]byte
		pgoff int64
		size  int
	}{
		{&rings.fill, unix.XDP_UMEM_PGOFF_FILL_RING, ringMemSize[uint64](rings.fillOff, n)},
		{&rings.comp, unix.XDP_UMEM_PGOFF_COMPLETION_RING, ringMemSize[uint64](rings.compOff, n)},
		{&rings.rx, unix.XDP_PGOFF_RX_RING, ringMemSize[desc](rings.rxOff, n)},
		{&rings.tx, unix.XDP_PGOFF_TX_RING, ringMemSize[desc](rings.txOff, n)},
	} {
		m, err := unix.Mmap(sys.fd, r.pgoff, r.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("%s: map ring: %w", op, err)
		}
		sys.rings = append(sys.rings, m)
		*r.mem = m
	}

	s, err := newSocket(cfg, sys.umem, rings, sys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}

	var flags uint16
	switch cfg.Mode {
	case Copy:
		flags |= unix.XDP_COPY
	case ZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	if cfg.NeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if cfg.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	err = bind(sys.fd, sa)
	if errors.Is(err, unix.EOPNOTSUPP) && cfg.Mode == Auto {
		// The kernel falls back to copy mode by itself; should a
		// driver refuse anyway, ask for copy mode outright.
		sa.Flags |= unix.XDP_COPY
		err = bind(sys.fd, sa)
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.EBUSY):
			err = fmt.Errorf("%w: %w", ErrQueueBusy, err)
		case errors.Is(err, unix.EOPNOTSUPP) && cfg.Mode == ZeroCopy:
			err = fmt.Errorf("%w: %w", ErrNoZeroCopy, err)
		case errors.Is(err, unix.EINVAL) && cfg.Queue > 0:
			err = fmt.Errorf("%w (or flags not supported): %w", ErrNoQueue, err)
		case errors.Is(err, unix.ENODEV):
			err = fmt.Errorf("%w: %w", ErrNoInterface, err)
		default:
			err = classify(err)
		}
		return nil, fmt.Errorf("%s: bind (%s mode): %w", op, cfg.Mode, err)
	}
	opts, err := getsockoptOptions(sys.fd)
	if err != nil {
		return nil, fmt.Errorf("%s: read options: %w", op, err)
	}
	s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	// In copy mode one sendto transmits at most this many descriptors
	// (32 by default); allow a whole ring. Kernels without the option
	// keep the default.
	_ = unix.SetsockoptInt(sys.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, cfg.RingSize)

	s.sys = *sys
	s.wake = &s.sys
	ok = true
	return s, nil
}

// busyRetry bounds how long Open keeps retrying a bind that fails with
// EBUSY. The kernel releases a closed socket's hold on its queue in deferred
// work, tens of milliseconds after close returns (more than a second on a
// loaded machine, when the socket map that held it is freed after an RCU
// grace period), so a queue bound again right after Close, or after the
// previous owner process exited, is briefly busy.
const busyRetry = 5 * time.Second

// bind binds the socket, retrying while the queue is busy, up to busyRetry.
func bind(fd int, sa *unix.SockaddrXDP) error {
	deadline := time.Now().Add(busyRetry)
	for pause := 500 * time.Microsecond; ; pause = min(2*pause, 20*time.Millisecond) {
		err := unix.Bind(fd, sa)
		if !errors.Is(err, unix.EBUSY) || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

// classify wraps the errors Open reports with a sentinel.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w", ErrNoAFXDP, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	}
	return err
}

// close unmaps everything and closes the descriptor.
func (sys *sysSocket) close() error {
	var errs []error
	for _, m := range sys.rings {
		if err := unix.Munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("unmap ring: %w", err))
		}
	}
	sys.rings = nil
	if sys.umem != nil {
		if err := unix.Munmap(sys.umem); err != nil {
			errs = append(errs, fmt.Errorf("unmap UMEM: %w", err))
		}
		sys.umem = nil
	}
	if sys.fd >= 0 {
		if err := unix.Close(sys.fd); err != nil {
			errs = append(errs, fmt.Errorf("close: %w", err))
		}
		sys.fd = -1
	}
	return errors.Join(errs...)
}

// FD returns the socket's file descriptor, for registering it with an XDP
// program; -1 once closed.
func (s *Socket) FD() int {
	if s.closed {
		return -1
	}
	return s.sys.fd
}

// Wait blocks until frames are waiting on the RX ring or timeout passes
// (forever if timeout is negative; not at all if zero), using ppoll(2). It
// returns nil either way; call Receive. It reports ErrClosed, a failed
// wake-up of the kernel (such as the interface going away), or a poll
// failure. Wait does not allocate.
func (s *Socket) Wait(timeout time.Duration) error {
	if s.closed {
		return fmt.Errorf("wait on AF_XDP socket: %w", ErrClosed)
	}
	if s.err != nil {
		return fmt.Errorf("AF_XDP socket: %w", s.err)
	}
	if s.rx.available(1) > 0 {
		return nil
	}
	s.sys.pfd[0] = unix.PollFd{Fd: int32(s.sys.fd), Events: unix.POLLIN}
	var ts *unix.Timespec
	if timeout >= 0 {
		s.sys.ts = unix.NsecToTimespec(int64(timeout))
		ts = &s.sys.ts
	}
	_, err := unix.Ppoll(s.sys.pfd[:], ts, nil)
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("wait on AF_XDP socket: %w", err)
	}
	return nil
}

// Stats returns the kernel's counters for the socket together with the
// socket's own.
func (s *Socket) Stats() (Stats, error) {
	st := s.counters()
	st.ZeroCopy = s.zeroCopy
	if s.closed {
		return st, fmt.Errorf("read AF_XDP statistics: %w", ErrClosed)
	}
	k, err := getsockoptStatistics(s.sys.fd)
	if err != nil {
		return st, fmt.Errorf("read AF_XDP statistics: %w", err)
	}
	st.RxDropped, st.RxInvalidDescs, st.TxInvalidDescs = k.Rx_dropped, k.Rx_invalid_descs, k.Tx_invalid_descs
	st.RxRingFull, st.RxFillRingEmptyDescs, st.TxRingEmptyDescs = k.Rx_ring_full, k.Rx_fill_ring_empty_descs, k.Tx_ring_empty_descs
	return st, nil
}

// Close unmaps the rings and the UMEM and closes the socket, which also
// removes it from any XDP socket map. The queue can then be bound again.
// Frames returned by Receive must not be used after Close. Closing twice is
// not an error.
func (s *Socket) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.umem, s.scratch, s.held, s.free = nil, nil, nil, nil
	if err := s.sys.close(); err != nil {
		return fmt.Errorf("close AF_XDP socket: %w", err)
	}
	return nil
}

// setBusyPoll sets the socket's busy-poll options.
func setBusyPoll(fd int, cfg Config) error {
	for _, o := range []struct {
		name string
		opt  int
		v    int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, max(1, int(cfg.BusyPoll/time.Microsecond))},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, cfg.BusyPollBudget},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.v); err != nil {
			switch {
			case errors.Is(err, unix.ENOPROTOOPT):
				return fmt.Errorf("set %s: the kernel has no busy polling of AF_XDP sockets (Linux 5.11 or later): %w", o.name, err)
			case errors.Is(err, unix.EPERM):
				return fmt.Errorf("set %s: busy polling needs CAP_NET_ADMIN: %w", o.name, ErrPermission)
			}
			return fmt.Errorf("set %s to %d: %w", o.name, o.v, err)
		}
	}
	return nil
}
