// Package leakcheck fails tests whose goroutines outlive them: a package's
// TestMain runs its tests through Main, and a test that must leave nothing
// running once its cleanups are done calls Check.
//
// Goroutines that the runtime or the testing package keep for the life of
// the process (os/signal's loop, which fuzzing starts) are not counted.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Settle is how long Main and Check wait for goroutines to exit after the
// code that started them has returned (Close calls wait for their own
// goroutines, but timers and handlers may still be finishing).
const Settle = 5 * time.Second

// Main runs the package's tests and exits with their status, failing the
// package if more goroutines run after them than before.
func Main(m *testing.M) {
	base, _ := Count()
	code := m.Run()
	if code == 0 {
		if n, stacks := Wait(base, Settle); n > base {
			fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines after the tests, %d before\n%s\n", n, base, stacks)
			code = 1
		}
	}
	os.Exit(code)
}

// Check fails t if goroutines started during it are still running once its
// cleanups registered after Check have run.
func Check(t testing.TB) {
	t.Helper()
	base, _ := Count()
	t.Cleanup(func() {
		if n, stacks := Wait(base, Settle); n > base {
			t.Errorf("goroutine leak: %d goroutines, %d before\n%s", n, base, stacks)
		}
	})
}

// Wait polls until at most want goroutines run or d passes. It returns the
// last count and, if that is above want, every goroutine's stack.
func Wait(want int, d time.Duration) (int, string) {
	deadline := time.Now().Add(d)
	for {
		n, stacks := Count()
		if n <= want {
			return n, ""
		}
		if time.Now().After(deadline) {
			return n, stacks
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Count returns the number of goroutines and their stacks, leaving out the
// ones kept for the life of the process.
func Count() (int, string) {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var keep []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "os/signal.signal_recv") {
			keep = append(keep, g)
		}
	}
	return len(keep), strings.Join(keep, "\n\n")
}
