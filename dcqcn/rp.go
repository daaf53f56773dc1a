package dcqcn

import (
	"math"
	"math/bits"
)

// Alpha is kept in Q32 fixed point: alphaOne is 1.0. The firmware encodes
// alpha in 1/1024; Q32 holds every such value exactly and keeps repeated
// decay from losing precision.
const (
	alphaBits = 32
	alphaOne  = uint64(1) << alphaBits
	// g10 is the firmware's 10-bit fixed point (dce_tcp_g,
	// initial_alpha_value).
	g10 = 10
)

// cause is what triggered a rate increase event.
type cause uint8

const (
	causeNone  cause = iota
	causeTimer       // the rpg_time_reset timer
	causeBytes       // the rpg_byte_reset byte counter
)

// inf is an unbounded run of events.
const inf = math.MaxUint64

// rpConfig is Params converted once, at Init, to the units RP computes in.
type rpConfig struct {
	line      uint64 // line rate, bit/s: the rate while not limited
	top       uint64 // min(line, rpg_max_rate): reaching it releases the limiter
	floor     uint64 // min(rpg_min_rate, top)
	first     uint64 // rate_to_set_on_first_cnp in bit/s, 0 for none
	ai, hai   uint64 // rpg_ai_rate, rpg_hai_rate in bit/s
	byteReset uint64
	threshold uint64 // F

	timeReset   Time // increase timer period
	monitor     Time // minimum time between cuts
	alphaPeriod Time // alpha decay period

	retain    uint64 // dce_tcp_g: alpha kept per update, in 1/1024
	alpha0    uint64 // initial alpha, Q32
	cutShift  uint   // rate decrease = Rc·α >> cutShift
	minDecFac uint64 // percent of Rc a cut keeps at least

	clamp, clampAfterTime bool
}

func newRPConfig(p *Params, lineRate uint64) rpConfig {
	c := rpConfig{
		line:           min(lineRate, maxRate),
		first:          mbps(p.RateOnFirstCNP),
		ai:             mbps(p.AIRate),
		hai:            mbps(p.HAIRate),
		byteReset:      uint64(p.ByteReset),
		threshold:      uint64(max(p.Threshold, 1)),
		timeReset:      usec(max(p.TimeReset, 1)),
		monitor:        usec(p.RateReducePeriod),
		alphaPeriod:    usec(max(p.AlphaPeriod, 1)),
		retain:         uint64(min(p.AlphaG, 1<<g10)),
		alpha0:         uint64(min(p.InitialAlpha, 1<<g10)) << (alphaBits - g10),
		cutShift:       alphaBits - g10 + uint(min(max(p.GD, g10), 63-alphaBits+g10)),
		minDecFac:      uint64(min(p.MinDecFac, 100)),
		clamp:          p.ClampTgtRate,
		clampAfterTime: p.ClampTgtRateAfterTimeInc,
	}
	c.top = c.line
	if m := mbps(p.MaxRate); m != 0 && m < c.top {
		c.top = m
	}
	c.floor = min(mbps(p.MinRate), c.top)
	if c.first != 0 {
		c.first = min(max(c.first, c.floor), c.top)
	}
	return c
}

// alpha is the congestion estimate, kept lazily: v (Q32) is its value at
// time at, the last CNP; after that it decays once per alpha period. The
// decay needs no timer: it is computed, from at, when a cut needs alpha.
type alpha struct {
	v  uint64
	at Time
}

// value returns alpha at now: v·(retain/1024)^k for the k whole periods
// since at, rounded down. The power is computed by repeated squaring with
// 63 fractional bits, so it is within 2^-32 of the exact value for any k.
// It depends only on (v, at, now), never on when it was last asked.
func (a alpha) value(now, period Time, retain uint64) uint64 {
	if now <= a.at || a.v == 0 || retain >= 1<<g10 {
		return a.v
	}
	k := uint64((now - a.at) / period)
	v, b := a.v, retain<<(63-g10) // b: retain/1024 with 63 fractional bits
	for k != 0 && v != 0 {
		if k&1 != 0 {
			hi, lo := bits.Mul64(v, b)
			v = hi<<1 | lo>>63
		}
		k >>= 1
		hi, lo := bits.Mul64(b, b)
		b = hi<<1 | lo>>63
	}
	return v
}

// raise returns (G/1024)·v + (1024−G)/1024: the update for a CNP. It
// maps [0, 1] into [0, 1] exactly (1.0 stays 1.0).
func raise(v, retain uint64) uint64 {
	return v*retain>>g10 + (1<<g10-retain)<<(alphaBits-g10)
}

// stage counts the rate increase events since the last cut.
type stage struct {
	t, bc uint64 // timer events, byte-counter events (T and BC)
	bytes uint64 // bytes sent toward the next byte-counter event
	last  cause  // the cause of the last increase event
}

// RP is the DCQCN reaction point of one QP: it holds the QP's sending rate
// and changes it on CNPs, timer events and bytes sent. The zero value is
// not usable; call Init.
type RP struct {
	cfg     rpConfig
	limited bool   // the rate limiter is allocated: the QP must be paced
	rc, rt  uint64 // current rate Rc and target rate Rt, bit/s
	alpha   alpha
	nextCut Time  // the earliest time of the next cut
	timer   timer // rate increase timer, armed while limited
	stage   stage
	now     Time // the latest time seen
}

// Init starts rp at the line rate (bit/s), not limited. A nil p means
// Defaults(). Parameters are copied; out-of-range values are clamped
// (check them with Params.ValidateFor), and rates are capped at 2^62
// bit/s.
func (r *RP) Init(p *Params, lineRate uint64, now Time) {
	if p == nil {
		d := Defaults()
		p = &d
	}
	*r = RP{cfg: newRPConfig(p, lineRate), now: now}
	r.rc, r.rt = r.cfg.line, r.cfg.line
}

// Rate returns the current rate Rc in bit/s: the line rate while not
// limited.
func (r *RP) Rate() uint64 { return r.rc }

// Target returns the target rate Rt in bit/s: the line rate while not
// limited.
func (r *RP) Target() uint64 { return r.rt }

// Limited reports whether the QP must be paced at Rate. It becomes true
// with the first CNP and false once the rate is back at rpg_max_rate (the
// line rate by default).
func (r *RP) Limited() bool { return r.limited }

// Alpha returns the congestion estimate α in [0, 1] as of the latest time
// given to rp.
func (r *RP) Alpha() float64 {
	return float64(r.alpha.value(r.now, r.cfg.alphaPeriod, r.cfg.retain)) / float64(alphaOne)
}

// Deadline returns the time of the next rate increase timer event, false
// if none is armed (not limited). Alpha's decay needs no wake-up: it is
// computed when a CNP needs it.
func (r *RP) Deadline() (Time, bool) { return r.timer.due, r.timer.armed }

// OnCNP takes a CNP received at now. It returns true if the CNP was
// handled (it started a congestion episode or cut the rate), false if it
// arrived within rate_reduce_monitor_period of the last cut and only
// counted toward alpha. Every CNP raises alpha and restarts its decay.
func (r *RP) OnCNP(now Time) bool {
	r.Advance(now)
	a := r.alpha.value(now, r.cfg.alphaPeriod, r.cfg.retain)
	handled := true
	switch {
	case !r.limited:
		// The first CNP allocates the rate limiter.
		r.limited = true
		a = r.cfg.alpha0
		r.rt = r.cfg.top
		if r.cfg.first != 0 {
			r.rc, r.rt = r.cfg.first, r.cfg.first
		} else {
			r.rc = min(r.reduce(r.cfg.line, a), r.rt)
		}
	case now < r.nextCut:
		handled = false
	default:
		if r.clampTarget() {
			r.rt = r.rc
		}
		r.rc = r.reduce(r.rc, a)
	}
	r.alpha = alpha{v: raise(a, r.cfg.retain), at: now}
	if !handled {
		return false
	}
	r.nextCut = addTime(now, r.cfg.monitor)
	r.timer = timer{armed: true, due: addTime(now, r.cfg.timeReset)}
	r.stage = stage{}
	if r.rc >= r.cfg.top {
		r.release()
	}
	return true
}

// reduce returns the rate after one cut from rc with alpha a:
// max(rc·(1 − a·1024/2^rpg_gd), rc·rpg_min_dec_fac/100, floor). The
// decrease is rounded down, so the cut rate is rounded up.
func (r *RP) reduce(rc, a uint64) uint64 {
	hi, lo := bits.Mul64(rc, a)
	s := r.cfg.cutShift // >= 32: the decrease is at most rc
	dec := hi<<(64-s) | lo>>s
	n := rc - dec
	hi, lo = bits.Mul64(rc, r.cfg.minDecFac)
	if keep, _ := bits.Div64(hi, lo, 100); n < keep {
		n = keep
	}
	return max(n, r.cfg.floor)
}

// clampTarget decides whether a cut (after the first) sets Rt to Rc.
func (r *RP) clampTarget() bool {
	switch {
	case r.cfg.clamp:
		return true
	case r.stage.last == causeBytes:
		return true
	case r.stage.last == causeTimer:
		return r.cfg.clampAfterTime
	}
	return false // no increase since the last cut: keep the older target
}

// Advance runs the rate increase timer events due by now. Calling it more
// or less often changes nothing: events fall on the timer's grid and alpha
// is computed from the last CNP's time.
func (r *RP) Advance(now Time) {
	if now > r.now {
		r.now = now
	}
	if !r.timer.armed || now < r.timer.due {
		return
	}
	n := uint64((now-r.timer.due)/r.cfg.timeReset) + 1
	r.increase(causeTimer, n)
	if r.timer.armed {
		r.timer.due = addTime(r.timer.due, Time(n)*r.cfg.timeReset)
	}
}

// OnSent counts bytes sent at now toward the byte counter: every
// rpg_byte_reset bytes is an increase event. Not limited, it does nothing.
func (r *RP) OnSent(now Time, bytes int) {
	if !r.limited {
		return
	}
	r.Advance(now)
	if !r.limited || r.cfg.byteReset == 0 || bytes <= 0 {
		return
	}
	r.stage.bytes += uint64(bytes) // < 2^63 + 2^32
	if r.stage.bytes < r.cfg.byteReset {
		return
	}
	n := r.stage.bytes / r.cfg.byteReset
	r.stage.bytes -= n * r.cfg.byteReset
	r.increase(causeBytes, n)
}

// increase runs n increase events of one cause. Runs of events that add
// the same amount to Rt once Rt − Rc has settled are added in one step:
// the result equals n single steps exactly.
func (r *RP) increase(c cause, n uint64) {
	for n > 0 && r.limited {
		inc, span := r.next(c)
		if d := r.rt - r.rc; n > 1 && span > 1 && (d+inc)/2 == d {
			// Each step adds inc to both rates; stop before Rt would be
			// clamped at top.
			k := min(n, span)
			if inc > 0 {
				k = min(k, (r.cfg.top-r.rt)/inc)
			}
			if k > 0 {
				r.rt += k * inc
				r.rc += k * inc
				r.count(c, k)
				n -= k
				if r.rc >= r.cfg.top {
					r.release()
				}
				continue
			}
		}
		r.step(c, inc)
		n--
	}
}

// step is one increase event: Rt ← min(Rt + inc, top), then Rc ← ⌈(Rt +
// Rc)/2⌉. Rounding up lets Rc reach Rt exactly.
func (r *RP) step(c cause, inc uint64) {
	if inc >= r.cfg.top-r.rt {
		r.rt = r.cfg.top
	} else {
		r.rt += inc
	}
	r.rc += (r.rt - r.rc + 1) / 2
	r.count(c, 1)
	if r.rc >= r.cfg.top {
		r.release()
	}
}

func (r *RP) count(c cause, k uint64) {
	if c == causeTimer {
		r.stage.t = satAdd(r.stage.t, k)
	} else {
		r.stage.bc = satAdd(r.stage.bc, k)
	}
	r.stage.last = c
}

// next returns how much the next event of cause c adds to Rt, and for how
// many consecutive events of that cause (span) the amount stays the same.
// The stage comes from the events counted before this one: with x the
// counter of c and y the other,
//
//	max(x, y) < F:  fast recovery, Rt unchanged
//	min(x, y) > F:  hyper increase, Rt += (min(x, y) − F)·R_HAI
//	otherwise:      additive increase, Rt += R_AI
//
// Without a byte counter the timer stage stands for both (y = x).
func (r *RP) next(c cause) (inc, span uint64) {
	x, y := r.stage.t, r.stage.bc
	if c == causeBytes {
		x, y = y, x
	}
	alone := r.cfg.byteReset == 0
	if alone {
		y = x
	}
	f := r.cfg.threshold
	switch {
	case max(x, y) < f:
		return 0, f - x
	case min(x, y) > f:
		if r.cfg.hai == 0 {
			return 0, inf
		}
		inc = mulCap(min(x, y)-f, r.cfg.hai, r.cfg.top)
		if !alone && x >= y {
			return inc, inf // min(x, y) = y does not move
		}
		return inc, 1
	default:
		if !alone && y <= f {
			return r.cfg.ai, inf // min(x, y) = y stays <= F
		}
		return r.cfg.ai, f + 1 - x // additive while x <= F
	}
}

// release frees the rate limiter: the QP sends at line rate again.
func (r *RP) release() {
	r.limited = false
	r.rc, r.rt = r.cfg.line, r.cfg.line
	r.timer = timer{}
	r.stage = stage{}
}
