package perftest

import "syscall"

// osYield gives the CPU to other runnable threads, of this process or
// others (sched_yield), and returns at once when there are none.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
