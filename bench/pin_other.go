//go:build !linux

package main

import "os/exec"

// startOn starts cmd; confining it to a CPU is done only on Linux.
func startOn(cmd *exec.Cmd, _ int) error { return cmd.Start() }

// canPin reports whether processes can be confined to CPUs here.
func canPin() bool { return false }
