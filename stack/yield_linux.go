package stack

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// osYield gives the CPU up to the process's other goroutines, then to any
// other runnable thread (sched_yield), of this process or another.
func osYield() {
	runtime.Gosched()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
