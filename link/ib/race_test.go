//go:build race

// Build flag for tests: the race detector is on, so allocation counts are
// meaningless (sync.Pool drops items on purpose).

package ib

const raceEnabled = true
