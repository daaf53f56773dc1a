package client

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// yield gives the CPU up while the client waits on shared memory: to the
// process's other goroutines, then to other processes (sched_yield), the
// daemon's threads among them.
func yield() {
	runtime.Gosched()
	unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
