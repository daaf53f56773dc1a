package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

var ne = binary.NativeEndian

// Mode selects how the program is attached to an interface.
type Mode int

// Attach modes.
const (
	// Auto tries native (driver) mode and falls back to generic mode.
	Auto Mode = iota
	// Native attaches in the driver's receive path; fails when the driver
	// has no XDP support.
	Native
	// Generic attaches after the kernel has built its socket buffer; works
	// on any interface, more slowly.
	Generic
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Native:
		return "native"
	case Generic:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "auto", "native" (or "drv") and "generic" (or "skb").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return Auto, nil
	case "native", "drv", "driver":
		return Native, nil
	case "generic", "skb":
		return Generic, nil
	}
	return Auto, fmt.Errorf("parse XDP mode %q: want auto, native or generic", s)
}

// ErrClosed reports use of a closed Program.
var ErrClosed = errors.New("XDP program closed")

// ErrAttached reports an Attach on a Program that is already attached. A
// Program serves one interface: its socket map is indexed by queue alone, and
// the kernel refuses to redirect a frame to a socket bound to another
// interface (it drops it). Load one Program per interface.
var ErrAttached = errors.New("program already attached to an interface")

// Program is the loaded steering program with its maps, for one interface.
// Its methods may be called from several goroutines.
type Program struct {
	prog  *ebpf.Program
	xsks  *ebpf.Map
	cfg   *ebpf.Map
	stats *ebpf.Map

	mu      sync.Mutex
	link    link.Link
	ifindex int
	mode    Mode
	closed  bool
}

// Load loads the program and creates its maps. It needs root (or
// CAP_BPF with CAP_NET_ADMIN).
func Load() (*Program, error) {
	coll, err := ebpf.NewCollection(collectionSpec())
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load XDP program: %+v", verr)
		}
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("load XDP program (needs root or CAP_BPF and CAP_NET_ADMIN): %w", err)
		}
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	return &Program{
		prog:  coll.Programs[progName],
		xsks:  coll.Maps[xsksName],
		cfg:   coll.Maps[cfgName],
		stats: coll.Maps[statsName],
	}, nil
}

// Attach attaches the program to the interface with index ifindex, which is
// looked up in the network namespace of the calling thread (see
// internal/netns.Do). With Auto, native mode is tried first and generic mode
// second. Attaching fails when any XDP program, this one or another, is
// already attached to the interface; nothing is replaced.
func (p *Program) Attach(ifindex int, mode Mode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("attach XDP program to ifindex %d: %w", ifindex, ErrClosed)
	}
	if p.link != nil {
		return fmt.Errorf("attach XDP program to ifindex %d: %w (ifindex %d)", ifindex, ErrAttached, p.ifindex)
	}
	try := func(m Mode) error {
		flags := link.XDPDriverMode
		if m == Generic {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return fmt.Errorf("attach XDP program to ifindex %d in %s mode: %w", ifindex, m, err)
		}
		p.link, p.ifindex, p.mode = l, ifindex, m
		return nil
	}
	switch mode {
	case Native, Generic:
		return try(mode)
	case Auto:
		nerr := try(Native)
		if nerr == nil {
			return nil
		}
		if errors.Is(nerr, unix.EBUSY) || errors.Is(nerr, unix.EEXIST) {
			// Another program holds the interface; generic mode
			// cannot coexist with it either.
			return nerr
		}
		gerr := try(Generic)
		if gerr == nil {
			return nil
		}
		return errors.Join(nerr, gerr)
	}
	return fmt.Errorf("attach XDP program to ifindex %d: unknown mode %d", ifindex, int(mode))
}

// Attached returns the interface index and mode the program is attached
// with, and whether it is attached at all.
func (p *Program) Attached() (ifindex int, mode Mode, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ifindex, p.mode, p.link != nil
}

// Detach detaches the program from its interface. It never touches another
// program.
func (p *Program) Detach() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.detachLocked()
}

func (p *Program) detachLocked() error {
	if p.link == nil {
		return errors.New("detach XDP program: not attached")
	}
	l, ifindex := p.link, p.ifindex
	p.link, p.ifindex, p.mode = nil, 0, Auto
	if err := l.Close(); err != nil {
		return fmt.Errorf("detach XDP program from ifindex %d: %w", ifindex, err)
	}
	return nil
}

// Register makes queue's RoCEv2 frames go to the AF_XDP socket xskFD, which
// must be bound (to that queue) and have an RX ring. A socket removes itself
// from the map when it is closed.
func (p *Program) Register(queue, xskFD int) error {
	if queue < 0 || queue >= MaxQueues {
		return fmt.Errorf("register AF_XDP socket for queue %d: queue out of range [0,%d)", queue, MaxQueues)
	}
	if p.isClosed() {
		return fmt.Errorf("register AF_XDP socket for queue %d: %w", queue, ErrClosed)
	}
	if err := p.xsks.Put(uint32(queue), uint32(xskFD)); err != nil {
		return fmt.Errorf("register AF_XDP socket for queue %d: %w", queue, err)
	}
	return nil
}

// Unregister sends queue's RoCEv2 frames to the kernel again. Unregistering
// a queue that has no socket is not an error.
func (p *Program) Unregister(queue int) error {
	if queue < 0 || queue >= MaxQueues {
		return fmt.Errorf("unregister queue %d: queue out of range [0,%d)", queue, MaxQueues)
	}
	if p.isClosed() {
		return fmt.Errorf("unregister queue %d: %w", queue, ErrClosed)
	}
	if err := p.xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister queue %d: %w", queue, err)
	}
	return nil
}

// SetDropEvery makes the program drop one RoCEv2 frame in n, counted over all
// queues; 0 turns dropping off. It is a fault injector for tests and demos.
func (p *Program) SetDropEvery(n uint32) error {
	if p.isClosed() {
		return fmt.Errorf("set XDP drop rate: %w", ErrClosed)
	}
	var v [cfgSize]byte
	ne.PutUint32(v[cfgDropEvery:], n)
	if err := p.cfg.Put(uint32(0), v[:]); err != nil {
		return fmt.Errorf("set XDP drop rate: %w", err)
	}
	return nil
}

// Stats are the program's counters, summed over CPUs.
type Stats struct {
	RoCE    uint64 // RoCEv2 frames seen
	Dropped uint64 // RoCEv2 frames dropped by SetDropEvery
}

// Stats reads the program's counters.
func (p *Program) Stats() (Stats, error) {
	if p.isClosed() {
		return Stats{}, fmt.Errorf("read XDP program counters: %w", ErrClosed)
	}
	var per [][]byte
	if err := p.stats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read XDP program counters: %w", err)
	}
	var s Stats
	for _, v := range per {
		if len(v) < statsSize {
			continue
		}
		s.RoCE += ne.Uint64(v[statRoCE:])
		s.Dropped += ne.Uint64(v[statDropped:])
	}
	return s, nil
}

// Run runs the program once on frame with BPF_PROG_TEST_RUN, as if it had
// arrived on queue 0 of no particular interface, and returns its verdict.
// Nothing is attached or transmitted. A frame for a queue with a registered
// socket yields Redirect (the redirect itself is not carried out); one for an
// empty queue yields Pass. The kernel needs at least 14 bytes.
func (p *Program) Run(frame []byte) (Action, error) {
	if p.isClosed() {
		return Aborted, fmt.Errorf("test-run XDP program: %w", ErrClosed)
	}
	ret, err := p.prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		return Aborted, fmt.Errorf("test-run XDP program: %w", err)
	}
	return Action(ret), nil
}

func (p *Program) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close detaches the program from its interface and releases the program and
// its maps. Sockets registered in the map are not closed.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	if p.link != nil {
		errs = append(errs, p.detachLocked())
	}
	if !p.closed {
		p.closed = true
		errs = append(errs, p.prog.Close(), p.xsks.Close(), p.cfg.Close(), p.stats.Close())
	}
	return errors.Join(errs...)
}
