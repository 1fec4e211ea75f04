//go:build !unix

package main

import "time"

// cpuTime returns zeros where the process's CPU time is not known.
func cpuTime() (user, sys time.Duration) { return 0, 0 }
