package main

import (
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startOn starts cmd confined to CPU cpu (all CPUs if cpu < 0), as taskset
// would: the child inherits the CPU mask of the thread that forks it, so
// the fork runs on a locked thread whose mask is narrowed for the moment.
// A Go child sizes GOMAXPROCS from that mask at start.
func startOn(cmd *exec.Cmd, cpu int) error {
	if cpu < 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err := cmd.Start()
	if unix.SchedSetaffinity(0, &old) == nil {
		// Only a thread whose mask is whole again goes back to the
		// scheduler; otherwise this goroutine keeps it.
		runtime.UnlockOSThread()
	}
	return err
}

// canPin reports whether processes can be confined to CPUs here.
func canPin() bool { return true }
