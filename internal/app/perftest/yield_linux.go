package perftest

import "golang.org/x/sys/unix"

// yield gives the CPU up to any other runnable thread (sched_yield).
func yield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
