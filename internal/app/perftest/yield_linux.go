package perftest

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// yield gives the CPU up to the process's other goroutines, then to any
// other runnable thread (sched_yield).
func yield() {
	runtime.Gosched()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
