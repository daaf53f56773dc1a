package stack

import (
	"context"
	"fmt"
	"sync"
)

// CQ is a completion queue (ibv_cq). Engines add completions; any number
// of goroutines may Poll or Wait.
//
// A CQ holds at most its capacity of completions. A completion arriving
// at a full CQ is lost: the CQ is then overrun, as an RNIC reports with
// IBV_EVENT_CQ_ERR. Err returns ErrCQOverrun from then on, Wait returns
// it, and Overruns and the device's cq_overrun counter count the lost
// completions. Size CQs for all the work that can be outstanding.
type CQ struct {
	dev  *Device
	uses uses   // QPs using the CQ
	sink CQSink // where completions go instead of the ring, or nil

	mu       sync.Mutex
	ring     []WC
	head, n  int
	overruns uint64
	waiters  int
	dead     bool
	closed   bool // the device was closed
	notify   chan struct{}
}

// CreateCQ creates a completion queue with room for n completions
// (ibv_create_cq).
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if d.closed.Load() {
		return nil, fmt.Errorf("create cq: %w", ErrClosed)
	}
	if n < 1 || n > d.attr.MaxCQE {
		return nil, fmt.Errorf("create cq: %d entries, want 1 to %d: %w", n, d.attr.MaxCQE, ErrInvalidArg)
	}
	c := &CQ{dev: d, ring: make([]WC, n), notify: make(chan struct{}, 1)}
	d.cqMu.Lock()
	if d.cqs == nil {
		d.cqs = make(map[*CQ]struct{})
	}
	d.cqs[c] = struct{}{}
	d.cqMu.Unlock()
	return c, nil
}

// CQSink takes a CQ's completions in place of the CQ's own ring: the
// daemon's CQ rings in memory shared with its clients.
type CQSink interface {
	// Push stores one completion, or reports false when there is no
	// room (the CQ is then overrun). Engines call it with a QP's lock
	// held: it must not block, allocate or make a system call.
	Push(wc *WC) bool
	// Publish makes the completions stored so far visible, and does
	// what their arrival calls for (a completion event). Each engine
	// calls it at the end of a batch in which it pushed, holding no QP
	// lock (Destroy and Deregister, which wait for the batch, then know
	// that no Publish is under way); a verbs call that completes work
	// requests (a QP moved to ERR) calls it before returning.
	Publish()
}

// CreateCQWithSink creates a completion queue whose completions go to
// sink (ibv_create_cq for a CQ whose ring lives elsewhere). Poll and Wait
// on it find nothing; Destroy and the QP rules are those of any CQ.
func (d *Device) CreateCQWithSink(n int, sink CQSink) (*CQ, error) {
	if sink == nil {
		return nil, fmt.Errorf("create cq: no sink: %w", ErrInvalidArg)
	}
	if n < 1 || n > d.attr.MaxCQE {
		return nil, fmt.Errorf("create cq: %d entries, want 1 to %d: %w", n, d.attr.MaxCQE, ErrInvalidArg)
	}
	c, err := d.CreateCQ(1)
	if err != nil {
		return nil, err
	}
	c.sink = sink
	return c, nil
}

// Cap returns the CQ's capacity.
func (c *CQ) Cap() int { return len(c.ring) }

// Len returns the number of completions waiting to be polled.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Poll moves up to len(wcs) completions into wcs, oldest first, and
// returns their number (ibv_poll_cq). It never blocks.
func (c *CQ) Poll(wcs []WC) int {
	c.mu.Lock()
	k := min(len(wcs), c.n)
	for i := 0; i < k; i++ {
		wcs[i] = c.ring[c.head]
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
	}
	c.n -= k
	c.mu.Unlock()
	return k
}

// Wait blocks until the CQ holds a completion, the CQ is overrun or
// destroyed, its device is closed, or ctx is done. It returns nil when
// completions are ready, ErrCQOverrun (wrapped) once the CQ has overrun,
// ErrDestroyed, ErrClosed, or the context's error.
func (c *CQ) Wait(ctx context.Context) error {
	c.mu.Lock()
	for {
		switch {
		case c.overruns != 0:
			c.mu.Unlock()
			return fmt.Errorf("wait cq: %d completions lost: %w", c.overruns, ErrCQOverrun)
		case c.n > 0:
			// Pass the wake-up on to the next waiter.
			if c.waiters > 0 {
				c.signal()
			}
			c.mu.Unlock()
			return nil
		case c.dead:
			c.mu.Unlock()
			return fmt.Errorf("wait cq: %w", ErrDestroyed)
		case c.closed:
			c.mu.Unlock()
			return fmt.Errorf("wait cq: %w", ErrClosed)
		}
		c.waiters++
		c.mu.Unlock()
		var err error
		select {
		case <-c.notify:
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		c.waiters--
		if err != nil {
			if c.waiters > 0 && c.n > 0 {
				c.signal()
			}
			c.mu.Unlock()
			return fmt.Errorf("wait cq: %w", err)
		}
	}
}

func (c *CQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Resize gives the CQ room for n completions (ibv_resize_cq), keeping
// those waiting to be polled. It fails with ErrInvalidArg when n is out
// of the device's range or below the completions waiting, and for a CQ
// whose completions go to a sink (the sink's owner resizes its ring).
func (c *CQ) Resize(n int) error {
	if n < 1 || n > c.dev.attr.MaxCQE {
		return fmt.Errorf("resize cq: %d entries, want 1 to %d: %w", n, c.dev.attr.MaxCQE, ErrInvalidArg)
	}
	if c.sink != nil {
		return fmt.Errorf("resize cq: its completions go to a sink: %w", ErrInvalidArg)
	}
	ring := make([]WC, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return fmt.Errorf("resize cq: %w", ErrDestroyed)
	}
	if c.n > n {
		return fmt.Errorf("resize cq: %d completions waiting, more than %d entries: %w", c.n, n, ErrInvalidArg)
	}
	for i := 0; i < c.n; i++ {
		ring[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = ring, 0
	return nil
}

// Err returns ErrCQOverrun (wrapped) once the CQ has lost a completion.
func (c *CQ) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.overruns != 0 {
		return fmt.Errorf("cq: %d completions lost: %w", c.overruns, ErrCQOverrun)
	}
	return nil
}

// Overruns returns the number of completions lost to a full CQ.
func (c *CQ) Overruns() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overruns
}

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy while
// QPs use it. Blocked Waits return ErrDestroyed.
func (c *CQ) Destroy() error {
	if err := c.uses.end(); err != nil {
		return fmt.Errorf("destroy cq: %w", err)
	}
	c.mu.Lock()
	c.dead = true
	if c.waiters > 0 {
		c.signal()
	}
	c.mu.Unlock()
	c.dev.cqMu.Lock()
	delete(c.dev.cqs, c)
	c.dev.cqMu.Unlock()
	return nil
}

// close wakes the CQ's waiters for good: its device is closed.
func (c *CQ) close() {
	c.mu.Lock()
	c.closed = true
	c.signal()
	c.mu.Unlock()
}

// push adds a completion; it is called by engines with the QP locked.
func (c *CQ) push(wc *WC) {
	if c.sink != nil {
		if !c.sink.Push(wc) {
			c.mu.Lock()
			c.overruns++
			c.mu.Unlock()
			c.dev.cqOverrun.Add(1)
		}
		return
	}
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.overruns++
		c.mu.Unlock()
		c.dev.cqOverrun.Add(1)
		c.signal()
		return
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = *wc
	c.n++
	if c.waiters > 0 {
		c.signal()
	}
	c.mu.Unlock()
}
