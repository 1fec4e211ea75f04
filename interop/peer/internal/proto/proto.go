// Package proto is the wire format between the host side of interop/peer and
// the guest agent: one JSON request per TCP connection, answered by one JSON
// reply. For "run", the host may send a second message (or close its write
// side) to stop the command early; the reply then comes once the command's
// process group is gone.
package proto

import "time"

// Port is the TCP port the guest agent listens on.
const Port = 7777

// Operations.
const (
	OpRun    = "run"    // run Cmd under /bin/sh -c
	OpStatus = "status" // report the boot status
)

// Request asks the agent to do one thing.
type Request struct {
	Op string `json:"op"`
	// Cmd is a shell command line (run by /bin/sh -c in a new process group).
	Cmd string `json:"cmd,omitempty"`
	// Timeout bounds the command; zero means no bound. On expiry the whole
	// process group gets SIGTERM, then SIGKILL after KillGrace.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// KillGrace is how long a stopped or timed-out command has between SIGTERM
// and SIGKILL.
const KillGrace = 2 * time.Second

// Result reports how a command ended.
type Result struct {
	// Status is the exit status, or 128+signal when a signal ended it.
	Status int `json:"status"`
	// TimedOut is set when the agent ended the command because of Timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Stopped is set when the host asked for the command to be stopped.
	Stopped bool   `json:"stopped,omitempty"`
	Stdout  []byte `json:"stdout,omitempty"`
	Stderr  []byte `json:"stderr,omitempty"`
	// Elapsed is the command's wall time in the guest.
	Elapsed time.Duration `json:"elapsed"`
	// Err is set when the command could not be started at all.
	Err string `json:"err,omitempty"`
}

// Status is the guest's boot report.
type Status struct {
	Ready bool   `json:"ready"`
	Log   string `json:"log"`
	// GIDs is rxe0 port 1's GID table, in index order (empty entries left out
	// at the end).
	GIDs []string `json:"gids"`
	// Uptime is the guest kernel's uptime when the status was read.
	Uptime string `json:"uptime"`
}
