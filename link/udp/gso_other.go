//go:build !linux

package udp

import "syscall"

const gsoMaxSegments = 64

func probeGSO(syscall.Conn) bool { return false }

var gsoSpace = 0

func putGSO(b []byte, _ int) []byte { return b[:0] }

func gsoRefused(error) bool { return false }

var tosSpace = 0

// putTOS sends nothing: elsewhere than Linux packets leave with the
// socket's traffic class.
func putTOS(b []byte, _ uint8, _ bool) []byte { return b[:0] }
