package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestDemoOneLoopbackAddress runs the demo where only 127.0.0.1 is
// configured (as on macOS, whose lo0 has 127.0.0.1/8 routed but only
// 127.0.0.1 bindable): device B falls back to 127.0.0.1 and the next port.
// The test binary runs itself again in a network namespace of its own
// (CLONE_NEWNET, which needs CAP_SYS_ADMIN: skipped without it) whose lo
// has 127.0.0.1/32 only; the whole process is in it, so every socket is,
// whichever thread opens it.
func TestDemoOneLoopbackAddress(t *testing.T) {
	if os.Getenv("SOFTRDMA_DEMO_NETNS") == "1" {
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
		return
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDemoOneLoopbackAddress$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SOFTRDMA_DEMO_NETNS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("a network namespace needs CAP_SYS_ADMIN: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDemoOneLoopbackAddress") {
		t.Fatalf("the demo in a network namespace: %v\n%s", err, out)
	}
}
