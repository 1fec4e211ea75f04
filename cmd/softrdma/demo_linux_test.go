package main

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDemoOneLoopbackAddress runs the demo where only 127.0.0.1 is
// configured (as on macOS, whose lo0 has 127.0.0.1/8 routed but only
// 127.0.0.1 bindable): device B falls back to 127.0.0.1 and the next port.
// It makes a network namespace whose lo has 127.0.0.1/32 only, so it needs
// CAP_SYS_ADMIN and ip(8), and is skipped without them.
func TestDemoOneLoopbackAddress(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	// The subtest's goroutine locks its thread, which enters the namespace
	// and is never unlocked: the thread ends with the goroutine. The
	// devices' sockets are made on this thread, so they live in the
	// namespace whatever thread later uses them.
	t.Run("netns", func(t *testing.T) {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Skipf("unshare(CLONE_NEWNET): %v", err)
		}
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"addr", "del", "127.0.0.1/8", "dev", "lo"},
			{"addr", "add", "127.0.0.1/32", "dev", "lo"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		out := runDemoArgs(t)
		for _, want := range []string{"device B uses 127.0.0.1 port 4792 instead",
			"device A: softrdma0, GID[0] ::ffff:127.0.0.1, port 4791", "device B: softrdma1, GID[0] ::ffff:127.0.0.1, port 4792"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}
