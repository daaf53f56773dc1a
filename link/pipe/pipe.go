// Package pipe is an in-memory link: two ends joined by a pair of
// single-producer single-consumer rings of frames. It carries frames
// between two stacks in one process, for tests, benchmarks, simulations
// and replays. Wrap an end with fault.Wrap (package link/fault) to lose,
// duplicate, reorder, corrupt or delay frames.
package pipe

import (
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/link"
)

// Config configures a pipe.
type Config struct {
	// MTU is the IP MTU of both ends (default 9000).
	MTU int
	// Slots is the number of frames in flight per direction, rounded up
	// to a power of two (default 256). A full direction pushes back:
	// Transmit takes fewer frames. Each slot holds a frame of MTU+18
	// bytes, allocated by New.
	Slots int
}

// Stats counts what one end of a pipe did.
type Stats struct {
	TxFrames   uint64 // frames taken by Transmit and queued
	RxFrames   uint64 // frames handed out by Receive
	TxOversize uint64 // frames taken by Transmit and dropped for their size
}

// End is one end of an in-memory link between two stacks (New).
type End struct {
	rx, tx   *ring
	peer     *End
	mtu      int
	sig      chan struct{} // rx data, tx space, Wake, Close
	sleeping atomic.Bool   // in Poll
	blocked  atomic.Bool   // the last Transmit was short
	closed   atomic.Bool
	recvN    int // frames handed out by the last Receive
	timer    *time.Timer

	txFrames, rxFrames, txOversize atomic.Uint64
}

// ring is a single-producer single-consumer ring of frames.
type ring struct {
	slots []slot
	mask  uint64
	_     [64]byte
	head  atomic.Uint64 // next slot to fill (producer)
	_     [56]byte
	tail  atomic.Uint64 // next slot to read, advanced on Release (consumer)
	_     [56]byte
}

type slot struct {
	buf []byte
}

func newRing(n, frameLen int) *ring {
	size := 1
	for size < n {
		size <<= 1
	}
	r := &ring{slots: make([]slot, size), mask: uint64(size - 1)}
	mem := make([]byte, size*frameLen)
	for i := range r.slots {
		r.slots[i].buf = mem[i*frameLen : i*frameLen : (i+1)*frameLen]
	}
	return r
}

// New returns the two ends of an in-memory link. A frame transmitted
// on one end is received on the other, unchanged and in order; Transmit
// copies it into the pipe and Receive hands out views of the pipe's
// buffers, as an AF_XDP socket does with its UMEM.
func New(cfg Config) (a, b *End) {
	if cfg.MTU <= 0 {
		cfg.MTU = 9000
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 256
	}
	fl := link.MaxFrameLen(cfg.MTU)
	ab, ba := newRing(cfg.Slots, fl), newRing(cfg.Slots, fl)
	a = &End{rx: ba, tx: ab, mtu: cfg.MTU, sig: make(chan struct{}, 1)}
	b = &End{rx: ab, tx: ba, mtu: cfg.MTU, sig: make(chan struct{}, 1)}
	a.peer, b.peer = b, a
	return a, b
}

var _ link.Link = (*End)(nil)

func (p *End) signal() {
	select {
	case p.sig <- struct{}{}:
	default:
	}
}

// Receive implements link.Link.
func (p *End) Receive(frames [][]byte) int {
	if p.closed.Load() {
		return 0
	}
	r := p.rx
	tail := r.tail.Load()
	avail := r.head.Load() - tail
	n := len(frames)
	if uint64(n) > avail {
		n = int(avail)
	}
	for i := 0; i < n; i++ {
		frames[i] = r.slots[(tail+uint64(i))&r.mask].buf
	}
	p.recvN = n
	p.rxFrames.Add(uint64(n))
	return n
}

// Release implements link.Link.
func (p *End) Release() {
	if p.recvN == 0 {
		return
	}
	p.rx.tail.Add(uint64(p.recvN))
	p.recvN = 0
	if p.peer.blocked.Load() {
		p.peer.blocked.Store(false)
		p.peer.signal()
	}
}

// Transmit implements link.Link.
func (p *End) Transmit(frames [][]byte) int {
	if p.closed.Load() || p.peer.closed.Load() {
		return len(frames)
	}
	r := p.tx
	head := r.head.Load()
	space := uint64(len(r.slots)) - (head - r.tail.Load())
	n := len(frames)
	if uint64(n) > space {
		n = int(space)
	}
	max := link.MaxFrameLen(p.mtu)
	queued := uint64(0)
	for i := 0; i < n; i++ {
		f := frames[i]
		if len(f) > max {
			p.txOversize.Add(1)
			continue
		}
		s := &r.slots[(head+queued)&r.mask]
		s.buf = append(s.buf[:0], f...)
		queued++
	}
	if queued > 0 {
		r.head.Store(head + queued)
		p.txFrames.Add(queued)
		if p.peer.sleeping.Load() {
			p.peer.signal()
		}
	}
	if n < len(frames) {
		p.blocked.Store(true)
		// The peer may have released slots between our look at the
		// tail and the flag: then nobody would wake us.
		if uint64(len(r.slots))-(r.head.Load()-r.tail.Load()) > 0 {
			p.blocked.Store(false)
			p.signal()
		}
	}
	return n
}

// Poll implements link.Link.
func (p *End) Poll(timeout time.Duration) {
	if timeout == 0 || p.closed.Load() {
		return
	}
	p.sleeping.Store(true)
	defer p.sleeping.Store(false)
	if p.rx.head.Load() != p.rx.tail.Load()+uint64(p.recvN) {
		return
	}
	if timeout < 0 {
		<-p.sig
		return
	}
	if p.timer == nil {
		p.timer = time.NewTimer(timeout)
	} else {
		p.timer.Reset(timeout)
	}
	select {
	case <-p.sig:
		p.timer.Stop()
	case <-p.timer.C:
	}
}

// Wake implements link.Link.
func (p *End) Wake() { p.signal() }

// MTU implements link.Link.
func (p *End) MTU() int { return p.mtu }

// Close closes this end of the pipe. Frames sent to a closed end are
// dropped.
func (p *End) Close() error {
	p.closed.Store(true)
	p.signal()
	return nil
}

// Stats returns the counters of this end.
func (p *End) Stats() Stats {
	return Stats{TxFrames: p.txFrames.Load(), RxFrames: p.rxFrames.Load(), TxOversize: p.txOversize.Load()}
}
