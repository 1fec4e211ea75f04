//go:build !race

// Build flag for tests: the race detector is off.

package fault

const raceEnabled = false
