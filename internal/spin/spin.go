// Package spin gives the CPU up in loops that poll for work: an engine
// waiting for frames, a client waiting for a completion or for a byte a
// peer writes.
//
// runtime.Gosched is the wrong tool there when the process has an idle
// P (GOMAXPROCS above the goroutines that run): every Gosched wakes an
// idle thread to look for the yielded goroutine, and the two threads then
// take turns. Measured on a 2-CPU machine, a loop of Gosched and
// sched_yield made 190,000 context switches a second where sched_yield
// alone made 3,000, and the 64 B WRITE latency through the daemon
// (perftest's typical) was 54 µs instead of 15-19. So Relax gives the CPU to other threads
// (sched_yield: other processes, the daemon's clients and engines among
// them), and to the process's own goroutines only every GoschedEvery
// turns, or on every turn when GOMAXPROCS is 1 (no P is idle then, and
// the goroutines share the one).
//
// sched_yield is made as a raw system call: it does not sleep, and the
// runtime's accounting of a system call in progress (which lets sysmon
// hand the P to another thread while the yield lasts) only moved the
// polling goroutine from thread to thread.
package spin

import "runtime"

// GoschedEvery is how often Relax lets the process's other goroutines
// run when GOMAXPROCS is above 1.
const GoschedEvery = 256

var oneP = runtime.GOMAXPROCS(0) == 1

// Relax is called on turn n of a polling loop that found nothing.
func Relax(n int) {
	if oneP || n%GoschedEvery == 0 {
		runtime.Gosched()
		return
	}
	osYield()
}
