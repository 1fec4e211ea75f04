//go:build !linux

package perftest

import "time"

// osYield lets other threads run; without sched_yield, a short sleep.
func osYield() { time.Sleep(20 * time.Microsecond) }
