package pfc

import (
	"strconv"
	"time"
)

// Time is a monotonic instant, a duration since an arbitrary epoch (the
// same as qp.Time and stack.Time).
type Time = time.Duration

// Pauser is a transmitter's view of the pause its link partner asked
// for: one timer per priority, set by PFC frames, and one link-wide
// timer, set by PAUSE frames, that holds back every priority. It takes
// frames and the time as arguments and starts nothing; the zero value
// is ready, with nothing paused. Times given to its methods must not go
// back: an earlier one is taken as the latest seen. None of its methods
// allocates. A Pauser is not safe for concurrent use.
type Pauser struct {
	prio   [Priorities]timer
	global timer
	last   Time // latest time given
	c      Counters
}

// timer is one pause: in force while armed and before due.
type timer struct {
	armed bool
	due   Time // the pause ends
	from  Time // paused time before from has been counted
	dur   Time // paused time counted
}

// settle counts the paused time up to now and ends a pause that is over;
// it reports whether one ended.
func (t *timer) settle(now Time) bool {
	if !t.armed {
		return false
	}
	if end := min(now, t.due); end > t.from {
		t.dur += end - t.from
		t.from = end
	}
	if now < t.due {
		return false
	}
	t.armed = false
	return true
}

// set pauses for d from now, replacing what was left of the pause in
// force, or with d == 0 ends that pause; it reports whether a pause
// ended.
func (t *timer) set(now, d Time) bool {
	ended := t.settle(now)
	if d == 0 {
		if t.armed {
			t.armed = false
			return true
		}
		return ended
	}
	t.armed, t.due, t.from = true, now+d, now
	return ended
}

// pausedAt reports whether the timer holds back traffic at now.
func (t *timer) pausedAt(now Time) bool { return t.armed && now < t.due }

// Counters are a Pauser's receive statistics, named (in the comments,
// and by Each) after the ethtool counters of mlx5 NICs. The durations
// are the time a priority, or the link, was actually paused, counted as
// it elapses: a pause in force counts up to the time Counters was asked
// at, a pause cut short by a resume (time 0) or by a new, shorter time
// counts only the time it lasted, and overlapping frames are not added
// up (a frame that comes during a pause replaces its end, so the paused
// time is the union of the pauses, not the sum of their times).
type Counters struct {
	MACControl    uint64 // rx_mac_control_phy: MAC Control frames given to Receive, valid or not
	PauseCtrl     uint64 // rx_pause_ctrl_phy: PAUSE and PFC frames acted on (resumes included)
	UnsupportedOp uint64 // rx_unsupported_op_phy: MAC Control frames of another opcode
	Ignored       uint64 // rx_mac_control_ignored: MAC Control frames not acted on: too short, another opcode, no link speed

	GlobalPause           uint64 // rx_global_pause: PAUSE frames with a pause_time other than 0
	GlobalPauseDuration   uint64 // rx_global_pause_duration: µs the link was paused by PAUSE
	GlobalPauseTransition uint64 // rx_global_pause_transition: ends of a PAUSE pause (Xoff to Xon)

	PrioPause           [Priorities]uint64 // rx_prio{N}_pause: PFC frames with enable bit N set and time[N] other than 0
	PrioPauseDuration   [Priorities]uint64 // rx_prio{N}_pause_duration: µs priority N was paused by PFC
	PrioPauseTransition [Priorities]uint64 // rx_prio{N}_pause_transition: ends of a PFC pause of priority N (Xoff to Xon)
}

// Receive acts on frame f (from Parse) that arrived at now on a link of
// linkBps bits per second. A PFC frame sets the timer of each priority
// whose enable bit is set to that priority's time, a PAUSE frame the
// link-wide timer; a time of 0 ends the pause at once, any other
// replaces what was left of it. A frame that is not MAC Control is not
// counted; a MAC Control frame that is not Valid, or that comes with
// linkBps 0, is counted in Ignored and changes nothing.
func (p *Pauser) Receive(now Time, f Frame, linkBps uint64) {
	if !f.IsMACControl() {
		return
	}
	now = p.clock(now)
	p.c.MACControl++
	if !f.Valid() || linkBps == 0 {
		if f.err == ErrUnknownOpcode {
			p.c.UnsupportedOp++
		}
		p.c.Ignored++
		return
	}
	p.c.PauseCtrl++
	if f.Opcode() == OpPause {
		q := f.PauseTime()
		if q != 0 {
			p.c.GlobalPause++
		}
		if p.global.set(now, QuantaDuration(q, linkBps)) {
			p.c.GlobalPauseTransition++
		}
		return
	}
	e := f.Enable()
	for n := range p.prio {
		if e&(1<<n) == 0 {
			continue
		}
		q := f.Time(n)
		if q != 0 {
			p.c.PrioPause[n]++
		}
		if p.prio[n].set(now, QuantaDuration(q, linkBps)) {
			p.c.PrioPauseTransition[n]++
		}
	}
}

// Paused reports whether priority prio may not send at now: a PFC pause
// of that priority or a PAUSE is in force. A prio outside 0-7 is held
// back by PAUSE only.
func (p *Pauser) Paused(now Time, prio int) bool {
	if p.global.pausedAt(now) {
		return true
	}
	return uint(prio) < Priorities && p.prio[prio].pausedAt(now)
}

// Until returns the instant the pause of priority prio ends (the later
// of its PFC pause and a PAUSE), 0 when none is in force. Paused(now,
// prio) is now < Until(prio) for times from the last given on.
func (p *Pauser) Until(prio int) Time {
	var u Time
	if p.global.armed {
		u = p.global.due
	}
	if uint(prio) < Priorities && p.prio[prio].armed {
		u = max(u, p.prio[prio].due)
	}
	return u
}

// Deadline returns the earliest instant a pause ends, false when none
// is in force: the time to call Tick.
func (p *Pauser) Deadline() (Time, bool) {
	d, ok := p.global.due, p.global.armed
	for i := range p.prio {
		if t := &p.prio[i]; t.armed && (!ok || t.due < d) {
			d, ok = t.due, true
		}
	}
	return d, ok
}

// Tick ends the pauses that are over at now and counts the paused time
// up to now.
func (p *Pauser) Tick(now Time) {
	now = p.clock(now)
	if p.global.settle(now) {
		p.c.GlobalPauseTransition++
	}
	for n := range p.prio {
		if p.prio[n].settle(now) {
			p.c.PrioPauseTransition[n]++
		}
	}
}

// Counters returns the counters as of now (see Tick).
func (p *Pauser) Counters(now Time) Counters {
	p.Tick(now)
	c := p.c
	c.GlobalPauseDuration = micros(p.global.dur)
	for n := range p.prio {
		c.PrioPauseDuration[n] = micros(p.prio[n].dur)
	}
	return c
}

func (p *Pauser) clock(now Time) Time {
	p.last = max(p.last, now)
	return p.last
}

func micros(d Time) uint64 { return uint64(d / time.Microsecond) }

// counterNamesInit are the names of the counters that are not per priority.
var counterNamesInit = [...]string{"rx_mac_control_phy", "rx_pause_ctrl_phy", "rx_unsupported_op_phy",
	"rx_mac_control_ignored", "rx_global_pause", "rx_global_pause_duration", "rx_global_pause_transition"}

// counterNames are the ethtool names of the counters, in the order Each
// gives them.
var counterNames = func() []string {
	names := append([]string(nil), counterNamesInit[:]...)
	for n := range Priorities {
		p := "rx_prio" + strconv.Itoa(n) + "_pause"
		names = append(names, p, p+"_duration", p+"_transition")
	}
	return names
}()

// fields returns the counters in the order of counterNames.
func (c *Counters) fields() [len(counterNamesInit) + 3*Priorities]*uint64 {
	var f [len(counterNamesInit) + 3*Priorities]*uint64
	copy(f[:], []*uint64{&c.MACControl, &c.PauseCtrl, &c.UnsupportedOp, &c.Ignored,
		&c.GlobalPause, &c.GlobalPauseDuration, &c.GlobalPauseTransition})
	i := len(counterNamesInit)
	for n := range Priorities {
		f[i], f[i+1], f[i+2] = &c.PrioPause[n], &c.PrioPauseDuration[n], &c.PrioPauseTransition[n]
		i += 3
	}
	return f
}

// Each calls f with the name (as ethtool gives it for mlx5: rx_pause_ctrl_phy,
// rx_prio3_pause_duration, ...) and value of every counter.
func (c *Counters) Each(f func(name string, v uint64)) {
	for i, p := range c.fields() {
		f(counterNames[i], *p)
	}
}

// Set sets the counter Each calls name, and reports whether there is one.
func (c *Counters) Set(name string, v uint64) bool {
	for i, p := range c.fields() {
		if counterNames[i] == name {
			*p = v
			return true
		}
	}
	return false
}

// Add adds o's counts to c (the counters of several links).
func (c *Counters) Add(o *Counters) {
	c.MACControl += o.MACControl
	c.PauseCtrl += o.PauseCtrl
	c.UnsupportedOp += o.UnsupportedOp
	c.Ignored += o.Ignored
	c.GlobalPause += o.GlobalPause
	c.GlobalPauseDuration += o.GlobalPauseDuration
	c.GlobalPauseTransition += o.GlobalPauseTransition
	for n := range Priorities {
		c.PrioPause[n] += o.PrioPause[n]
		c.PrioPauseDuration[n] += o.PrioPauseDuration[n]
		c.PrioPauseTransition[n] += o.PrioPauseTransition[n]
	}
}
