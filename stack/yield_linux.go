package stack

import "golang.org/x/sys/unix"

// osYield gives the CPU up to any other runnable thread (sched_yield),
// of this process or another.
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
