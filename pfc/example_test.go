package pfc_test

import (
	"fmt"
	"net"
	"time"

	"github.com/uroce/uroce/pfc"
)

// A transmitter on a 100 Gbit/s link receives a PFC frame pausing
// priority 3, holds that priority back, and wakes when the pause ends.
func ExamplePauser() {
	const link = 100_000_000_000
	src := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 1}
	frame := pfc.AppendPFC(nil, src, 1<<3, [8]uint16{3: 0xffff})

	var p pfc.Pauser
	now := pfc.Time(0)
	if f, err := pfc.Parse(frame); err != pfc.ErrNotMACControl {
		p.Receive(now, f, link)
	}
	fmt.Println("priority 3 paused:", p.Paused(now, 3), "priority 0 paused:", p.Paused(now, 0))
	d, _ := p.Deadline()
	fmt.Println("sleep until:", d)
	p.Tick(d)
	c := p.Counters(d)
	fmt.Println("priority 3 paused:", p.Paused(d, 3), "rx_prio3_pause:", c.PrioPause[3], "rx_prio3_pause_duration:", c.PrioPauseDuration[3], "µs")
	fmt.Println(pfc.QuantaDuration(0xffff, 10_000_000_000).Round(time.Microsecond))
	// Output:
	// priority 3 paused: true priority 0 paused: false
	// sleep until: 335.54µs
	// priority 3 paused: false rx_prio3_pause: 1 rx_prio3_pause_duration: 335 µs
	// 3.355ms
}
