package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts a CPU profile into the file named by
// SOFTRDMA_CPUPROFILE, if set (as softrdma does), for the internal
// subcommands; the returned function stops it.
func startProfile() (stop func(), err error) {
	name := os.Getenv("SOFTRDMA_CPUPROFILE")
	if name == "" {
		return func() {}, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("SOFTRDMA_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("SOFTRDMA_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
