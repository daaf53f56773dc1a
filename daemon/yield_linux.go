package daemon

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// yield gives the CPU up while a poller spins: to the process's other
// goroutines (the engines), then to other processes (sched_yield), the
// clients among them.
func yield() {
	runtime.Gosched()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
