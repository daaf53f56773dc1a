package stack

import (
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/link"
	"github.com/uroce/uroce/qp"
)

// Time is a monotonic instant: a duration since an arbitrary epoch.
type Time = qp.Time

// Clock tells the engine the time. Timers of the transport (ACK timeout,
// RNR wait) are kept against it. It is link.Clock: the device's clock
// also times the links that hold frames (link.Dueer, link/fault).
type Clock = link.Clock

// monoClock is the default clock: monotonic time since its creation.
type monoClock struct{ start time.Time }

// NewMonotonicClock returns a clock reading the monotonic time since the
// call.
func NewMonotonicClock() Clock { return &monoClock{start: time.Now()} }

func (c *monoClock) Now() Time { return time.Since(c.start) }

// FakeClock is a clock that moves only when told to, for simulations on
// fake time. It is safe for concurrent use.
type FakeClock struct{ t atomic.Int64 }

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start Time) *FakeClock {
	c := &FakeClock{}
	c.t.Store(int64(start))
	return c
}

// Now returns the clock's time.
func (c *FakeClock) Now() Time { return Time(c.t.Load()) }

// Advance moves the clock forward by d (d < 0 is ignored).
func (c *FakeClock) Advance(d time.Duration) {
	if d > 0 {
		c.t.Add(int64(d))
	}
}

// Set moves the clock to t if t is later than the current time.
func (c *FakeClock) Set(t Time) {
	for {
		cur := c.t.Load()
		if int64(t) <= cur || c.t.CompareAndSwap(cur, int64(t)) {
			return
		}
	}
}
