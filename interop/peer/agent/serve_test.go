//go:build linux

package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer/internal/proto"
)

func TestRun(t *testing.T) {
	workDir = t.TempDir()
	never := make(chan struct{})
	r := run(proto.Request{Op: proto.OpRun, Cmd: "pwd; echo err >&2; exit 7"}, never)
	if r.Status != 7 || strings.TrimSpace(string(r.Stdout)) != workDir || string(r.Stderr) != "err\n" || r.TimedOut || r.Stopped {
		t.Errorf("got %+v", r)
	}
	r = run(proto.Request{Op: proto.OpRun, Cmd: "kill -KILL $$"}, never)
	if r.Status != 128+9 {
		t.Errorf("killed by SIGKILL: status %d, want 137", r.Status)
	}
	r = run(proto.Request{Op: proto.OpRun, Cmd: "exec /nonexistent/program"}, never)
	if r.Status == 0 {
		t.Errorf("missing program: status 0")
	}
}

// A timeout ends the command and everything it started in its group; a
// background child holding stdout open does not block the result.
func TestRunTimeoutKillsGroup(t *testing.T) {
	workDir = t.TempDir()
	mark := filepath.Join(workDir, "survivor")
	start := time.Now()
	r := run(proto.Request{Op: proto.OpRun, Timeout: 300 * time.Millisecond,
		Cmd: "(trap '' TERM; sleep 3; touch " + mark + ") & sleep 30"}, make(chan struct{}))
	if !r.TimedOut || r.Status == 0 {
		t.Errorf("got status %d timed out %v", r.Status, r.TimedOut)
	}
	if d := time.Since(start); d > proto.KillGrace+3*time.Second {
		t.Errorf("took %v", d)
	}
	time.Sleep(3500 * time.Millisecond)
	if _, err := os.Stat(mark); err == nil {
		t.Error("a background process of the timed-out group survived")
	}
}

func TestRunStop(t *testing.T) {
	workDir = t.TempDir()
	stop := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(stop) })
	r := run(proto.Request{Op: proto.OpRun, Cmd: "echo started; sleep 30"}, stop)
	if !r.Stopped || r.TimedOut || string(r.Stdout) != "started\n" || r.Status != 128+15 {
		t.Errorf("got %+v", r)
	}
}

func TestGIDString(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:198.18.0.2": "0000:0000:0000:0000:0000:ffff:c612:0002",
		"fd00:198:18::2":    "fd00:0198:0018:0000:0000:0000:0000:0002",
	} {
		if got := gidString(netip.MustParseAddr(in)); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
