package spin

import "golang.org/x/sys/unix"

// osYield gives the CPU to any other runnable thread (sched_yield).
func osYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
