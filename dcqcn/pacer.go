package dcqcn

import "math/bits"

// DefaultBurst is the Pacer's default bucket size in bytes: two full
// frames of the largest RoCE MTU (4096 bytes of payload and at most about
// 120 bytes of headers). An engine that wakes a little late (up to 7 µs
// at 10 Gbit/s) still keeps the rate, and a paced QP adds at most this
// much to a congested queue in one go.
const DefaultBurst = 9 << 10

// Transmission times are kept in ns with fracBits fractional bits, so
// that rounding one packet's time does not bias the long-run rate.
const (
	fracBits = 24
	fracMask = 1<<fracBits - 1
	// nsPerByteQ is 8e9 (ns·bit/s per byte) in that fixed point.
	nsPerByteQ = uint64(8e9) << fracBits
	// maxCost bounds one packet's transmission time (about 4.5 min), so
	// times never overflow.
	maxCost = uint64(1) << 62
	// longAgo is the empty time of a full bucket, far enough from the
	// minimum Time that subtracting the burst cannot overflow.
	longAgo = -Time(1) << 62
)

// Pacer is a token bucket for one QP: bytes flow in at the rate, up to
// the burst. It is kept as the time at which the bucket would be empty
// (GCRA's virtual scheduling), so Allow and Next only multiply; SetRate
// divides once per rate change.
//
// A packet may go when the bucket holds its size, or when the bucket is
// full if the packet is larger than the burst (the bucket then goes into
// debt). Over any interval of length d a Pacer lets through at most
// max(burst, largest packet) + rate·d/8 bytes.
//
// The zero value is not usable; call Init.
type Pacer struct {
	rate  uint64 // bit/s; 0 blocks
	perNS uint64 // transmission time of one byte, ns << fracBits, rounded up
	burst uint64 // bytes
	tau   uint64 // transmission time of the burst, ns << fracBits
	empty Time   // the time (whole ns) at which the bucket is empty
	frac  uint64 // and its fraction of a ns, << fracBits
}

// Init sets the rate (bit/s) and the burst (bytes; <= 0 means
// DefaultBurst), with a full bucket.
func (p *Pacer) Init(rate uint64, burst int) {
	*p = Pacer{burst: DefaultBurst, empty: longAgo}
	if burst > 0 {
		p.burst = uint64(burst)
	}
	p.setRate(rate)
}

// SetRate changes the rate (bit/s), keeping the bucket's state as a time.
// Calling it with an unchanged rate is cheap, so an engine may call it
// before each packet with RP.Rate. A rate of 0 blocks everything.
func (p *Pacer) SetRate(rate uint64) {
	if rate != p.rate {
		p.setRate(rate)
	}
}

func (p *Pacer) setRate(rate uint64) {
	p.rate = rate
	if rate == 0 {
		p.perNS, p.tau = 0, 0
		return
	}
	q := nsPerByteQ / rate
	if q*rate < nsPerByteQ {
		q++ // round up: never faster than the rate
	}
	p.perNS = q
	p.tau = p.cost(p.burst)
}

// Rate returns the rate in bit/s.
func (p *Pacer) Rate() uint64 { return p.rate }

// Burst returns the bucket size in bytes.
func (p *Pacer) Burst() int { return int(p.burst) }

// cost returns the transmission time of n bytes, ns << fracBits.
func (p *Pacer) cost(n uint64) uint64 {
	hi, lo := bits.Mul64(n, p.perNS)
	if hi != 0 || lo > maxCost {
		return maxCost
	}
	return lo
}

// need returns how long after the empty time a packet of n bytes may go:
// its own transmission time, or the burst's if it is larger.
func (p *Pacer) need(n int) uint64 {
	return min(p.cost(uint64(max(n, 0))), p.tau)
}

// at returns empty + q as whole ns and a fraction.
func (p *Pacer) at(q uint64) (Time, uint64) {
	f := p.frac + q&fracMask
	return addTime(p.empty, Time(q>>fracBits)+Time(f>>fracBits)), f & fracMask
}

// Allow reports whether a packet of the given size may be sent at now,
// and if so takes it from the bucket.
func (p *Pacer) Allow(now Time, bytes int) bool {
	if p.rate == 0 {
		return false
	}
	t, f := p.at(p.need(bytes))
	if now < t || now == t && f != 0 {
		return false
	}
	p.take(now, bytes)
	return true
}

// take takes bytes from the bucket at now.
func (p *Pacer) take(now Time, bytes int) {
	// The bucket holds at most the burst: empty ≥ now − tau.
	s, sf := now-Time(p.tau>>fracBits), uint64(0)
	if tf := p.tau & fracMask; tf != 0 {
		s, sf = s-1, 1<<fracBits-tf
	}
	if s > p.empty || s == p.empty && sf > p.frac {
		p.empty, p.frac = s, sf
	}
	p.empty, p.frac = p.at(p.cost(uint64(max(bytes, 0))))
}

// Next returns the earliest time, not before now, at which Allow would
// let a packet of the given size go (if nothing else is sent meanwhile).
// With a rate of 0 it returns the largest Time.
func (p *Pacer) Next(now Time, bytes int) Time {
	if p.rate == 0 {
		return maxTime
	}
	t, f := p.at(p.need(bytes))
	if f != 0 {
		t = addTime(t, 1)
	}
	return max(t, now)
}

// Take takes a packet of the given size that was sent at now, whether or
// not the bucket held it: the bucket goes into debt, and Next(now, 0)
// tells when it is out of it. A sender that only knows a packet's size
// once it is built waits for Next(now, 0) and takes the packet after:
// it keeps the rate, and exceeds the burst by at most one packet.
func (p *Pacer) Take(now Time, bytes int) {
	if p.rate == 0 {
		return
	}
	p.take(now, bytes)
}
