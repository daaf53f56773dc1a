package stack

// A Poller is work the engines do in their own goroutines on every turn
// of their loops, before they look at their QPs: the daemon takes its
// clients' work requests from rings in shared memory this way, so that a
// request reaches the wire without passing from one goroutine to
// another. Every engine calls every poller; a poller serves one caller at
// a time (the others find it busy and go on). Work requests a poller
// posts are sent in the same turn.
type Poller interface {
	// Poll takes what is pending and reports whether it found any.
	Poll() bool
	// Arm is called before the engine sleeps. The poller asks its
	// producers to wake the device (Device.Wake) when they add work,
	// then reports whether work came in the meantime: the engine then
	// does not sleep.
	Arm() bool
	// Disarm is called when the engine wakes: the producers need not
	// ask for wake-ups while it polls.
	Disarm()
}

// AddPoller has every engine call p on every turn of its loop.
func (d *Device) AddPoller(p Poller) {
	for _, e := range d.engines {
		e.batchMu.Lock()
		e.pollers = append(e.pollers, p)
		e.batchMu.Unlock()
		if e.sleeping.Load() {
			e.link.Wake()
		}
	}
}

// RemovePoller takes p off the engines' lists. When it returns, no
// engine is calling p or will again.
func (d *Device) RemovePoller(p Poller) {
	for _, e := range d.engines {
		e.batchMu.Lock()
		l := e.pollers[:0]
		for _, x := range e.pollers {
			if x != p {
				l = append(l, x)
			}
		}
		clear(e.pollers[len(l):])
		e.pollers = l
		e.batchMu.Unlock()
	}
}

// Wake wakes the engines that sleep: a producer a Poller armed has work
// for them.
func (d *Device) Wake() {
	for _, e := range d.engines {
		if e.sleeping.Load() {
			e.link.Wake()
		}
	}
}

// poll runs the pollers (engine goroutine, batchMu held).
func (e *engine) poll() bool {
	work := false
	for _, p := range e.pollers {
		if p.Poll() {
			work = true
		}
	}
	return work
}

// arm arms the pollers before the engine sleeps and reports whether one
// has work.
func (e *engine) arm() bool {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	pending := false
	for _, p := range e.pollers {
		if p.Arm() {
			pending = true
		}
	}
	return pending
}

// disarm disarms the pollers when the engine wakes.
func (e *engine) disarm() {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	for _, p := range e.pollers {
		p.Disarm()
	}
}
