package stack

import (
	"math"
	"sync/atomic"
)

// uses counts the objects that depend on a verbs object (the MRs, QPs,
// SRQs and AHs of a PD, the QPs of a CQ or an SRQ) and ends it only when
// there are none: taking a use and ending the object exclude each
// other, so no object is ever created on one that is being destroyed.
type uses struct{ n atomic.Int64 }

// ended is the count of an ended object: below any count of uses.
const ended = math.MinInt64 / 2

// take adds a use, or reports false when the object has ended.
func (u *uses) take() bool {
	for {
		n := u.n.Load()
		if n < 0 {
			return false
		}
		if u.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// drop gives back a use that take granted.
func (u *uses) drop() { u.n.Add(-1) }

// end ends the object when nothing uses it. It returns ErrBusy while
// something does and ErrDestroyed when the object ended before.
func (u *uses) end() error {
	if u.n.CompareAndSwap(0, ended) {
		return nil
	}
	if u.n.Load() < 0 {
		return ErrDestroyed
	}
	return ErrBusy
}

// over reports whether the object has ended.
func (u *uses) over() bool { return u.n.Load() < 0 }

// count returns the uses.
func (u *uses) count() int64 { return max(u.n.Load(), 0) }
