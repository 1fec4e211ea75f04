//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/interop/peer/internal/proto"
)

// workDir is where commands start (the guest's root home).
var workDir = "/root"

func serve() error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", proto.Port))
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go handle(c)
	}
}

func handle(c net.Conn) {
	defer c.Close()
	dec := json.NewDecoder(c)
	enc := json.NewEncoder(c)
	var req proto.Request
	if err := dec.Decode(&req); err != nil {
		return
	}
	switch req.Op {
	case proto.OpStatus:
		var st proto.Status
		if b, err := os.ReadFile(statusFile); err == nil {
			_ = json.Unmarshal(b, &st)
		} else {
			st.Log = "boot setup has not finished: " + err.Error()
		}
		st.GIDs = readGIDs()
		st.Uptime = uptime()
		_ = enc.Encode(st)
	case proto.OpRun:
		// Anything more from the host (a message or EOF) means "stop".
		stop := make(chan struct{})
		go func() {
			var m json.RawMessage
			_ = dec.Decode(&m)
			close(stop)
		}()
		_ = enc.Encode(run(req, stop))
	default:
		_ = enc.Encode(proto.Result{Status: -1, Err: fmt.Sprintf("unknown op %q", req.Op)})
	}
}

// run runs req.Cmd in its own process group with its output in files (so
// background children holding the output open cannot block it), ends the
// group on timeout or stop, and kills whatever is left of the group after
// the shell exits.
func run(req proto.Request, stop <-chan struct{}) proto.Result {
	var res proto.Result
	dir, err := os.MkdirTemp("", "agent-")
	if err != nil {
		return proto.Result{Status: -1, Err: err.Error()}
	}
	defer os.RemoveAll(dir)
	out, err1 := os.Create(dir + "/out")
	errf, err2 := os.Create(dir + "/err")
	if err := errors.Join(err1, err2); err != nil {
		return proto.Result{Status: -1, Err: err.Error()}
	}
	defer out.Close()
	defer errf.Close()
	cmd := exec.Command("/bin/sh", "-c", req.Cmd)
	cmd.Dir = workDir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin", "HOME=/root", "TERM=dumb"}
	cmd.Stdout, cmd.Stderr = out, errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return proto.Result{Status: -1, Err: err.Error()}
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-done:
	case <-timeout:
		res.TimedOut = true
		endGroup(pgid, done)
	case <-stop:
		res.Stopped = true
		endGroup(pgid, done)
	}
	res.Elapsed = time.Since(start)
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // leftovers of the group
	res.Status = exitStatus(cmd)
	res.Stdout, _ = os.ReadFile(dir + "/out")
	res.Stderr, _ = os.ReadFile(dir + "/err")
	if res.TimedOut {
		res.Stderr = append(res.Stderr, fmt.Sprintf("agent: timed out after %v\n", req.Timeout)...)
	}
	return res
}

// endGroup sends SIGTERM to the process group, then SIGKILL after the grace
// period, and waits for the shell.
func endGroup(pgid int, done <-chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(proto.KillGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
}

func exitStatus(cmd *exec.Cmd) int {
	if cmd.ProcessState == nil {
		return -1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}
