//go:build !race

// Build flag for tests: the race detector is off.

package ib

const raceEnabled = false
