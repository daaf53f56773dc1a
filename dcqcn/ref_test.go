package dcqcn

import (
	"math"
	"math/big"
	"time"
)

// refRP is a reaction point written straight from the equations in the
// package doc: one event at a time, the cut in big integers, no shortcuts.
// It shares only alpha's decay with RP (tested on its own against the
// closed form). RP must match it exactly.
type refRP struct {
	p                       Params
	line, top, floor, first uint64

	limited bool
	rc, rt  uint64
	a       alpha
	nextCut Time
	armed   bool
	due     Time
	t, bc   uint64
	bytes   uint64
	last    cause

	// budget bounds the increase events the model steps through; once
	// it is spent the model stops (Over), its state no longer meaningful.
	budget int
}

// Over reports whether the model ran out of budget.
func (m *refRP) Over() bool { return m.budget <= 0 }

func newRef(p Params, line uint64) *refRP {
	m := &refRP{p: p, line: line, top: line, budget: math.MaxInt}
	if p.MaxRate != 0 && mbps(p.MaxRate) < line {
		m.top = mbps(p.MaxRate)
	}
	m.floor = min(mbps(p.MinRate), m.top)
	if p.RateOnFirstCNP != 0 {
		m.first = min(max(mbps(p.RateOnFirstCNP), m.floor), m.top)
	}
	m.rc, m.rt = line, line
	return m
}

func (m *refRP) period() Time { return Time(m.p.AlphaPeriod) * time.Microsecond }

func (m *refRP) cut(rc, a uint64) uint64 {
	x := new(big.Int).SetUint64(rc)
	x.Mul(x, new(big.Int).SetUint64(a))
	x.Rsh(x, uint(22+m.p.GD)) // α·1024/2^gd with α in 2^-32
	n := rc - x.Uint64()
	y := new(big.Int).SetUint64(rc)
	y.Mul(y, big.NewInt(int64(m.p.MinDecFac)))
	y.Quo(y, big.NewInt(100))
	return max(n, y.Uint64(), m.floor)
}

func (m *refRP) raise(v uint64) uint64 {
	g := uint64(m.p.AlphaG)
	return v*g/1024 + (1024-g)<<22
}

func (m *refRP) release() {
	m.limited, m.armed = false, false
	m.rc, m.rt = m.line, m.line
	m.t, m.bc, m.bytes, m.last = 0, 0, 0, causeNone
}

func (m *refRP) event(c cause) {
	m.budget--
	T, BC := m.t, m.bc
	if m.p.ByteReset == 0 {
		BC = T
	}
	F := uint64(m.p.Threshold)
	switch {
	case max(T, BC) < F:
	case min(T, BC) > F:
		m.rt = min(m.rt+(min(T, BC)-F)*mbps(m.p.HAIRate), m.top)
	default:
		m.rt = min(m.rt+mbps(m.p.AIRate), m.top)
	}
	m.rc = (m.rt + m.rc + 1) / 2
	if c == causeTimer {
		m.t++
	} else {
		m.bc++
	}
	m.last = c
	if m.rc >= m.top {
		m.release()
	}
}

func (m *refRP) advance(now Time) {
	for m.armed && m.due <= now && !m.Over() {
		m.due += Time(m.p.TimeReset) * time.Microsecond
		m.event(causeTimer)
	}
}

func (m *refRP) cnp(now Time) bool {
	m.advance(now)
	a := m.a.value(now, m.period(), uint64(m.p.AlphaG))
	switch {
	case !m.limited:
		m.limited = true
		a = uint64(m.p.InitialAlpha) << 22
		m.rt = m.top
		if m.first != 0 {
			m.rc, m.rt = m.first, m.first
		} else {
			m.rc = min(m.cut(m.line, a), m.rt)
		}
	case now < m.nextCut:
		m.a = alpha{v: m.raise(a), at: now}
		return false
	default:
		clamp := m.p.ClampTgtRate || m.last == causeBytes || m.last == causeTimer && m.p.ClampTgtRateAfterTimeInc
		if clamp {
			m.rt = m.rc
		}
		m.rc = m.cut(m.rc, a)
	}
	m.a = alpha{v: m.raise(a), at: now}
	m.nextCut = now + Time(m.p.RateReducePeriod)*time.Microsecond
	m.armed, m.due = true, now+Time(m.p.TimeReset)*time.Microsecond
	m.t, m.bc, m.bytes, m.last = 0, 0, 0, causeNone
	if m.rc >= m.top {
		m.release()
	}
	return true
}

func (m *refRP) sent(now Time, n int) {
	if !m.limited {
		return
	}
	m.advance(now)
	if !m.limited || m.p.ByteReset == 0 || n <= 0 {
		return
	}
	m.bytes += uint64(n)
	for m.limited && m.bytes >= uint64(m.p.ByteReset) && !m.Over() {
		m.bytes -= uint64(m.p.ByteReset)
		m.event(causeBytes)
	}
}

// same reports whether r is in the state m is in; "" if so, else what
// differs.
func (m *refRP) same(r *RP) string {
	switch {
	case r.limited != m.limited:
		return "limited"
	case r.rc != m.rc:
		return "rc"
	case r.rt != m.rt:
		return "rt"
	case r.timer.armed != m.armed || m.armed && r.timer.due != m.due:
		return "timer"
	case m.limited && (r.stage.t != m.t || r.stage.bc != m.bc || r.stage.bytes != m.bytes || r.stage.last != m.last):
		return "stage"
	case m.limited && r.alpha != m.a:
		return "alpha"
	}
	return ""
}
