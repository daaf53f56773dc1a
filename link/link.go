// Package link is the batch frame I/O interface between uroce's engine
// and a network: one receive and one transmit queue of whole Ethernet
// frames. Package stack runs its engines over a Link; an AF_XDP queue
// (in stack), the in-memory pipe (link/pipe) and the fault injector
// (link/fault), which wraps any Link, implement it.
package link

import "time"

// Link is one receive and one transmit queue of a network interface, or
// one end of an in-memory pipe: batch I/O of whole Ethernet frames.
//
// A Link is driven by one goroutine at a time, the engine that owns it.
// Only Wake and Close may be called from other goroutines.
//
// Receive hands out views of frames in memory the link owns (an AF_XDP
// UMEM, the pipe's ring). The views stay valid, and the memory stays
// the engine's to read and modify, until Release. A frame that spans
// several buffers of the link (a multi-buffer AF_XDP frame) is
// assembled by the link into one contiguous view.
//
// Transmit copies: when it returns, the caller may reuse its buffers.
type Link interface {
	// Receive stores views of up to len(frames) received frames in
	// frames and returns how many it stored. It never blocks. Release
	// must be called before the next Receive.
	Receive(frames [][]byte) int
	// Release gives the frames of the last Receive back to the link.
	Release()
	// Transmit copies out a prefix of frames and returns its length.
	// Fewer than len(frames) means the link is full for now; Poll
	// returns when space frees. Frames longer than the link accepts are
	// taken and dropped (counted by the link).
	Transmit(frames [][]byte) int
	// Poll blocks until a frame may be ready for Receive, transmit space
	// freed after a short Transmit, Wake was called, the link was
	// closed, or timeout passed (timeout < 0: no limit). It may return
	// early for no reason.
	Poll(timeout time.Duration)
	// Wake makes a blocked Poll, or the next one, return at once. It is
	// safe for concurrent use.
	Wake()
	// MTU returns the IP MTU of the link: the largest Ethernet payload.
	// Frames may be up to MTU+18 bytes long (Ethernet header and one
	// 802.1Q tag).
	MTU() int
	// Close releases the link. Pending and later calls return at once.
	Close() error
}

// MaxFrameLen returns the longest frame a link of IP MTU mtu carries:
// the Ethernet header and one 802.1Q tag more than the MTU.
func MaxFrameLen(mtu int) int { return mtu + 18 }

// Time is a monotonic instant: a duration since an arbitrary epoch (the
// same type as qp.Time and stack.Time).
type Time = time.Duration

// Clock tells the time. The engine's transport timers, and the delays of
// links that hold frames (Dueer), run on one.
type Clock interface {
	Now() Time
}

// Dueer is implemented by links that hold frames until a time (the
// fault injector's delay and reorder): Due returns the earliest time a
// held frame is to move on, on the link's clock. The engine and
// stack's Device.NextDeadline take it into account.
type Dueer interface {
	Due() (Time, bool)
}

// Due returns l's Due when l is a Dueer.
func Due(l Link) (Time, bool) {
	if d, ok := l.(Dueer); ok {
		return d.Due()
	}
	return 0, false
}
