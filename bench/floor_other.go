//go:build !linux

package main

import (
	"errors"
	"io"
)

// runFloor: the floor's system calls (UDP_SEGMENT, UDP_GRO) are Linux's.
func runFloor([]string, io.Writer) error {
	return errors.New("udpfloor: Linux only")
}
