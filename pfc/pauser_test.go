package pfc

import (
	"strings"
	"testing"
	"time"
)

// At 512 Mbit/s one quantum is exactly 1 µs, which keeps the arithmetic
// of these tests readable.
const (
	usLink = 512_000_000
	us     = time.Microsecond
)

func pfcFrame(t *testing.T, enable uint8, quanta [8]uint16) Frame {
	t.Helper()
	f, err := Parse(AppendPFC(nil, testSrc, enable, quanta))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func pauseFrame(t *testing.T, q uint16) Frame {
	t.Helper()
	f, err := Parse(AppendPause(nil, testSrc, q))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// pausedSet returns the priorities paused at now as a bit mask.
func pausedSet(p *Pauser, now Time) uint8 {
	var m uint8
	for n := range Priorities {
		if p.Paused(now, n) {
			m |= 1 << n
		}
	}
	return m
}

func TestPauserPFC(t *testing.T) {
	var p Pauser
	if pausedSet(&p, 0) != 0 {
		t.Fatal("zero Pauser pauses")
	}
	if _, ok := p.Deadline(); ok {
		t.Fatal("zero Pauser has a deadline")
	}

	// Pause priority 3 for 100 µs; priority 5's enable bit is clear, its
	// time is ignored.
	p.Receive(10*us, pfcFrame(t, 0x08, [8]uint16{3: 100, 5: 500}), usLink)
	if m := pausedSet(&p, 10*us); m != 0x08 {
		t.Errorf("paused %#x, want 0x08", m)
	}
	if !p.Paused(109*us, 3) || p.Paused(110*us, 3) || p.Until(3) != 110*us || p.Until(5) != 0 {
		t.Errorf("priority 3 until %v", p.Until(3))
	}
	if d, ok := p.Deadline(); !ok || d != 110*us {
		t.Errorf("deadline %v %v", d, ok)
	}

	// Extend: a frame at 60 µs replaces the remaining 50 µs by 100 µs.
	p.Receive(60*us, pfcFrame(t, 0x08, [8]uint16{3: 100}), usLink)
	if !p.Paused(159*us, 3) || p.Paused(160*us, 3) || p.Until(3) != 160*us {
		t.Errorf("extended until %v", p.Until(3))
	}
	// Midway, only the elapsed part is counted.
	c := p.Counters(100 * us)
	if c.PrioPause[3] != 2 || c.PrioPauseDuration[3] != 90 || c.PrioPauseTransition[3] != 0 {
		t.Errorf("midway: pause %d duration %d transitions %d", c.PrioPause[3], c.PrioPauseDuration[3], c.PrioPauseTransition[3])
	}
	// Shorten: a new frame with a shorter time also replaces the end.
	p.Receive(110*us, pfcFrame(t, 0x08, [8]uint16{3: 10}), usLink)
	if p.Until(3) != 120*us {
		t.Errorf("shortened until %v", p.Until(3))
	}
	p.Tick(200 * us)
	if _, ok := p.Deadline(); ok || p.Paused(200*us, 3) {
		t.Error("pause not over after Tick")
	}
	c = p.Counters(300 * us)
	// Paused from 10 to 120 µs: 110 µs, not the 210 µs the frames asked.
	if c.PrioPause[3] != 3 || c.PrioPauseDuration[3] != 110 || c.PrioPauseTransition[3] != 1 || c.PauseCtrl != 3 || c.MACControl != 3 {
		t.Errorf("after: %+v", c)
	}

	// Resume at once with time 0: priority 5 paused at 400 µs for 1000 µs,
	// resumed at 450 µs.
	p.Receive(400*us, pfcFrame(t, 0x20, [8]uint16{5: 1000}), usLink)
	p.Receive(450*us, pfcFrame(t, 0x28, [8]uint16{3: 0, 5: 0}), usLink)
	if p.Paused(450*us, 5) || p.Until(5) != 0 {
		t.Errorf("not resumed: until %v", p.Until(5))
	}
	if _, ok := p.Deadline(); ok {
		t.Error("deadline after resume")
	}
	c = p.Counters(2000 * us)
	if c.PrioPause[5] != 1 || c.PrioPauseDuration[5] != 50 || c.PrioPauseTransition[5] != 1 {
		t.Errorf("priority 5: %d %d %d", c.PrioPause[5], c.PrioPauseDuration[5], c.PrioPauseTransition[5])
	}
	// A resume of a priority that was not paused is no transition.
	if c.PrioPauseTransition[3] != 1 || c.PrioPause[3] != 3 {
		t.Errorf("priority 3 after a resume: %d %d", c.PrioPause[3], c.PrioPauseTransition[3])
	}

	// Several priorities in one frame, each its own time.
	p.Receive(3000*us, pfcFrame(t, 0x83, [8]uint16{0: 10, 1: 20, 7: 30}), usLink)
	if m := pausedSet(&p, 3000*us); m != 0x83 {
		t.Errorf("paused %#x", m)
	}
	if m := pausedSet(&p, 3015*us); m != 0x82 {
		t.Errorf("at 15 µs paused %#x", m)
	}
	if d, _ := p.Deadline(); d != 3010*us {
		t.Errorf("deadline %v", d)
	}
	p.Tick(3010 * us)
	if d, _ := p.Deadline(); d != 3020*us {
		t.Errorf("next deadline %v", d)
	}
	c = p.Counters(4000 * us)
	if c.PrioPauseDuration[0] != 10 || c.PrioPauseDuration[1] != 20 || c.PrioPauseDuration[7] != 30 || c.GlobalPause != 0 || c.GlobalPauseDuration != 0 {
		t.Errorf("durations %v global %d", c.PrioPauseDuration, c.GlobalPauseDuration)
	}
}

// TestPauserPause: PAUSE holds back every priority on its own timer;
// PFC frames do not lift it, nor does its resume lift a PFC pause.
func TestPauserPause(t *testing.T) {
	var p Pauser
	p.Receive(0, pauseFrame(t, 100), usLink)
	if m := pausedSet(&p, 0); m != 0xff || !p.Paused(99*us, -1) || !p.Paused(99*us, 8) || p.Paused(100*us, 0) {
		t.Errorf("PAUSE: paused %#x", m)
	}
	for n := range Priorities {
		if p.Until(n) != 100*us {
			t.Errorf("priority %d until %v", n, p.Until(n))
		}
	}
	p.Receive(10*us, pfcFrame(t, 0x08, [8]uint16{3: 200}), usLink)
	p.Receive(20*us, pfcFrame(t, 0x10, [8]uint16{4: 0}), usLink)
	if !p.Paused(20*us, 4) || p.Until(3) != 210*us || p.Until(4) != 100*us {
		t.Errorf("PFC lifted the PAUSE: until %v %v", p.Until(3), p.Until(4))
	}
	// PAUSE 0 resumes the link; priority 3 stays paused by PFC.
	p.Receive(50*us, pauseFrame(t, 0), usLink)
	if m := pausedSet(&p, 50*us); m != 0x08 {
		t.Errorf("after PAUSE 0: paused %#x", m)
	}
	if p.Paused(50*us, 8) || p.Until(0) != 0 {
		t.Error("out-of-range priority still paused")
	}
	// A new PAUSE replaces the end of the one in force.
	p.Receive(300*us, pauseFrame(t, 100), usLink)
	p.Receive(350*us, pauseFrame(t, 10), usLink)
	if p.Until(0) != 360*us {
		t.Errorf("until %v", p.Until(0))
	}
	c := p.Counters(1000 * us)
	if c.GlobalPause != 3 || c.GlobalPauseDuration != 50+60 || c.GlobalPauseTransition != 2 || c.PauseCtrl != 6 {
		t.Errorf("global: %d %d %d, pause ctrl %d", c.GlobalPause, c.GlobalPauseDuration, c.GlobalPauseTransition, c.PauseCtrl)
	}
	// The PAUSE does not count in the priorities' counters.
	if c.PrioPause[0] != 0 || c.PrioPauseDuration[0] != 0 || c.PrioPause[3] != 1 || c.PrioPauseDuration[3] != 200 || c.PrioPauseTransition[4] != 0 {
		t.Errorf("priorities: %v %v", c.PrioPause, c.PrioPauseDuration)
	}
}

// TestPauserLinkSpeed: the longest pause at 100 Gbit/s.
func TestPauserLinkSpeed(t *testing.T) {
	var p Pauser
	p.Receive(time.Second, pfcFrame(t, 0x01, [8]uint16{0: 0xffff}), 100_000_000_000)
	if p.Until(0) != time.Second+335540 {
		t.Errorf("until %v", p.Until(0)-time.Second)
	}
	if c := p.Counters(2 * time.Second); c.PrioPauseDuration[0] != 335 {
		t.Errorf("duration %d µs", c.PrioPauseDuration[0])
	}
}

// TestPauserIgnored: frames that are not MAC Control are not counted;
// MAC Control frames that cannot be acted on change nothing.
func TestPauserIgnored(t *testing.T) {
	var p Pauser
	short, _ := Parse(AppendPFC(nil, testSrc, 0xff, [8]uint16{1, 1, 1, 1, 1, 1, 1, 1})[:34])
	gate := AppendPause(nil, testSrc, 100)
	gate[15] = 2
	unknown, _ := Parse(gate)
	notMC, _ := Parse(make([]byte, 60))
	p.Receive(0, Frame{}, usLink)
	p.Receive(0, notMC, usLink)
	p.Receive(0, short, usLink)
	p.Receive(0, unknown, usLink)
	p.Receive(0, pauseFrame(t, 100), 0) // no link speed
	if pausedSet(&p, 0) != 0 {
		t.Error("ignored frame paused")
	}
	c := p.Counters(0)
	if c.MACControl != 3 || c.Ignored != 3 || c.UnsupportedOp != 1 || c.PauseCtrl != 0 || c.GlobalPause != 0 {
		t.Errorf("%+v", c)
	}
}

// TestPauserClock: a time before the latest one is taken as the latest.
func TestPauserClock(t *testing.T) {
	var p Pauser
	p.Receive(100*us, pfcFrame(t, 0x01, [8]uint16{0: 10}), usLink)
	p.Receive(50*us, pfcFrame(t, 0x01, [8]uint16{0: 10}), usLink) // taken as 100 µs
	if p.Until(0) != 110*us {
		t.Errorf("until %v", p.Until(0))
	}
	if c := p.Counters(90 * us); c.PrioPauseDuration[0] != 0 {
		t.Errorf("duration %d", c.PrioPauseDuration[0])
	}
	if c := p.Counters(200 * us); c.PrioPauseDuration[0] != 10 || c.PrioPauseTransition[0] != 1 {
		t.Errorf("duration %d transitions %d", c.PrioPauseDuration[0], c.PrioPauseTransition[0])
	}
}

// TestPauserExpiredThenNew: a pause that ran out without a Tick counts
// its end before a new one starts.
func TestPauserExpiredThenNew(t *testing.T) {
	var p Pauser
	p.Receive(0, pfcFrame(t, 0x04, [8]uint16{2: 10}), usLink)
	p.Receive(50*us, pfcFrame(t, 0x04, [8]uint16{2: 10}), usLink)
	c := p.Counters(55 * us)
	if c.PrioPauseDuration[2] != 15 || c.PrioPauseTransition[2] != 1 || !p.Paused(55*us, 2) {
		t.Errorf("duration %d transitions %d", c.PrioPauseDuration[2], c.PrioPauseTransition[2])
	}
}

func TestPauserAllocs(t *testing.T) {
	var p Pauser
	frames := []Frame{pfcFrame(t, 0xff, [8]uint16{1, 2, 3, 4, 5, 6, 7, 8}), pauseFrame(t, 5), pfcFrame(t, 0x0f, [8]uint16{})}
	short, _ := Parse(AppendPause(nil, testSrc, 1)[:20])
	frames = append(frames, short)
	now := Time(0)
	paused := 0
	if n := testing.AllocsPerRun(200, func() {
		for _, f := range frames {
			now += 3 * us
			p.Receive(now, f, usLink)
			for prio := range Priorities {
				if p.Paused(now, prio) {
					paused++
				}
			}
		}
		if d, ok := p.Deadline(); ok {
			p.Tick(d)
		}
		_ = p.Until(3)
		_ = p.Counters(now)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
	if paused == 0 {
		t.Error("nothing paused")
	}
}

func TestCountersEach(t *testing.T) {
	c := Counters{MACControl: 1, PauseCtrl: 2, UnsupportedOp: 3, Ignored: 4, GlobalPause: 5, GlobalPauseDuration: 6, GlobalPauseTransition: 7}
	for n := range Priorities {
		c.PrioPause[n] = uint64(100 + n)
		c.PrioPauseDuration[n] = uint64(200 + n)
		c.PrioPauseTransition[n] = uint64(300 + n)
	}
	got := map[string]uint64{}
	var order []string
	c.Each(func(name string, v uint64) {
		got[name] = v
		order = append(order, name)
	})
	want := map[string]uint64{"rx_mac_control_phy": 1, "rx_pause_ctrl_phy": 2, "rx_unsupported_op_phy": 3, "rx_mac_control_ignored": 4,
		"rx_global_pause": 5, "rx_global_pause_duration": 6, "rx_global_pause_transition": 7,
		"rx_prio0_pause": 100, "rx_prio3_pause_duration": 203, "rx_prio7_pause_transition": 307, "rx_prio5_pause": 105}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if len(order) != 7+3*Priorities || len(got) != len(order) {
		t.Errorf("%d counters, %d names: %s", len(order), len(got), strings.Join(order, " "))
	}
}
