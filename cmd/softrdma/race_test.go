//go:build race

package main

// raceEnabled: the race detector is on; TestToolsIB sends fewer messages,
// the QPs' ACK timeout (the C tools' 67 ms, seven retries) being short
// for a race-instrumented process on a loaded 2-core machine.
const raceEnabled = true
