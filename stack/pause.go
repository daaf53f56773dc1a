package stack

import (
	"os"
	"strconv"
	"strings"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/pfc"
)

// Flow control: a link partner's PAUSE (802.3x) and PFC (802.1Qbb)
// frames, on links that hand them to software (veth and the pipe; NICs
// act on them in hardware), hold back the engine's transmission. PFC
// pauses one priority; a QP's priority is its path's VLAN PCP or, on an
// untagged path, the one its DSCP maps to (Marking.Priorities: by
// default the class selector, DSCP/8, as a NIC trusting DSCP does). PAUSE holds every priority. A QP on a
// paused priority sends nothing, its ACKs included, until the pause
// ends: its time runs out or a frame with time 0 resumes it.

// priority returns the 802.1p priority of a path's packets: its PCP, or
// on an untagged path the one its DSCP maps to.
func (m *Marking) pathPriority(p *bth.L2L3) uint8 {
	if p.HasVLAN {
		return uint8(p.VLANTCI >> 13)
	}
	return m.priority(p.TrafficClass)
}

// DefaultLinkSpeed is the speed PAUSE and PFC quanta are timed at when
// neither Config.LinkSpeed nor the interface gives one.
const DefaultLinkSpeed = 100_000_000_000

// linkSpeed returns the bit rate pause quanta count at: cfg's, the
// interface's (sysfs, in Mbit/s), or DefaultLinkSpeed.
func linkSpeed(cfg *Config) uint64 {
	if cfg.LinkSpeed > 0 {
		return cfg.LinkSpeed
	}
	if cfg.Interface != "" {
		if b, err := os.ReadFile("/sys/class/net/" + cfg.Interface + "/speed"); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
				return uint64(v) * 1_000_000
			}
		}
	}
	return DefaultLinkSpeed
}

// macControl acts on a MAC Control frame the link delivered; it reports
// false for a frame that is not one.
func (e *engine) macControl(f []byte, now Time) bool {
	fr, err := pfc.Parse(f)
	if !fr.IsMACControl() {
		return false
	}
	if err == nil && fr.Dst() != pfc.ReservedAddr && fr.Dst() != e.dev.mac {
		e.c.rcvNotOurs++
		return true
	}
	e.pause.Receive(now, fr, e.dev.linkBps)
	e.pausing = true
	e.publishPause(now)
	return true
}

// paused reports whether q's traffic is held back now. The caller holds
// q's lock (q.prio changes with its address vector).
func (e *engine) paused(q *QP) bool {
	return e.pausing && e.pause.Paused(e.now, int(q.prio))
}

// settlePause ends the pauses whose time is up; the engine stops
// checking once none is in force.
func (e *engine) settlePause(now Time) {
	if !e.pausing {
		return
	}
	e.pause.Tick(now)
	if _, ok := e.pause.Deadline(); !ok {
		e.pausing = false
		e.publishPause(now)
	}
}

// publishPause makes the pause counters visible to Device.PauseCounters.
func (e *engine) publishPause(now Time) {
	c := e.pause.Counters(now)
	e.pauseMu.Lock()
	e.pauseCtr = c
	e.pauseMu.Unlock()
}

// PauseCounters returns the PAUSE and PFC counters of the device's
// links (ethtool's rx_prioN_pause, rx_prioN_pause_duration, ...), summed
// over its queues, as of the last frame or pause end.
func (d *Device) PauseCounters() pfc.Counters {
	var sum pfc.Counters
	for _, e := range d.engines {
		e.pauseMu.Lock()
		sum.Add(&e.pauseCtr)
		e.pauseMu.Unlock()
	}
	return sum
}
