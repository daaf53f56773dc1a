package dcqcn

import (
	"math"
	"math/bits"
	"time"
)

// Time is a monotonic instant, a duration since an arbitrary epoch. It is
// the same type as qp.Time: the engine's injected clock.
type Time = time.Duration

const (
	maxTime = Time(math.MaxInt64)

	// maxRate caps every rate in bit/s, so that sums and averages of two
	// rates never overflow a uint64.
	maxRate = uint64(1) << 62

	// mbit converts the firmware's Mbit/s to bit/s.
	mbit = 1_000_000
)

// timer is one armed-or-not deadline.
type timer struct {
	armed bool
	due   Time
}

// addTime returns t+d for d >= 0, saturating at maxTime.
func addTime(t, d Time) Time {
	if t > maxTime-d {
		return maxTime
	}
	return t + d
}

// satAdd returns a+b, saturating at the largest uint64.
func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// mulCap returns a·b, or limit when the product exceeds limit.
func mulCap(a, b, limit uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 || lo > limit {
		return limit
	}
	return lo
}

// mbps converts a firmware rate in Mbit/s to bit/s.
func mbps(v uint32) uint64 { return uint64(v) * mbit }

// usec converts a firmware period in µs to a Time.
func usec(v uint32) Time { return Time(v) * time.Microsecond }
