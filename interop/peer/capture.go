//go:build linux

package peer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Capture is a tcpdump writing every frame on the peer's tap to a pcap file.
type Capture struct {
	Path   string
	cmd    *exec.Cmd
	stderr chan string // tcpdump's stderr after the "listening" line
	done   chan error
}

// CaptureStats is what tcpdump reported when it stopped.
type CaptureStats struct {
	Captured, DroppedByKernel int
}

// captureSnaplen covers every frame of the link (MTU up to 9000): the whole
// packet is needed to check ICRCs. It also sizes the slots of the capture
// ring in immediate mode: with tcpdump's default of 262144 bytes a 128 MiB
// ring holds only 512 frames and bursts of 4 KiB packets overflow it.
const captureSnaplen = 9216

// StartCapture starts tcpdump on the tap (whole frames, immediate delivery,
// a 128 MiB kernel buffer) and returns once it is listening.
func (p *Peer) StartCapture(ctx context.Context, path string) (*Capture, error) {
	cmd := exec.Command("ip", "netns", "exec", p.cfg.Namespace,
		"tcpdump", "-i", p.cfg.Tap, "-n", "-s", strconv.Itoa(captureSnaplen), "-B", "131072", "--immediate-mode", "-w", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	c := &Capture{Path: path, cmd: cmd, stderr: make(chan string, 1), done: make(chan error, 1)}
	readsDone := make(chan struct{})
	// Wait only after stderr is read to its end (Wait closes the pipe).
	if err := onPinnedThread(cmd.Start, func() { <-readsDone; c.done <- cmd.Wait() }); err != nil {
		return nil, fmt.Errorf("peer: tcpdump: %w", err)
	}
	listening := make(chan string, 1)
	go func() {
		r := bufio.NewReader(errPipe)
		var first strings.Builder
		for {
			line, err := r.ReadString('\n')
			first.WriteString(line)
			if strings.Contains(line, "listening on") || err != nil {
				break
			}
		}
		listening <- first.String()
		rest, _ := io.ReadAll(r)
		c.stderr <- string(rest)
		close(readsDone)
	}()
	select {
	case msg := <-listening:
		if !strings.Contains(msg, "listening on") {
			<-c.done
			return nil, fmt.Errorf("peer: tcpdump did not start: %s", strings.TrimSpace(msg))
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("peer: tcpdump not listening after 20s")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
	return c, nil
}

var (
	capturedRE = regexp.MustCompile(`(\d+) packets? captured`)
	droppedRE  = regexp.MustCompile(`(\d+) packets? dropped by kernel`)
)

// Stop ends tcpdump (SIGINT, so it flushes the file) and returns its counts.
func (c *Capture) Stop() (CaptureStats, error) {
	var st CaptureStats
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	var msg string
	select {
	case msg = <-c.stderr:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		msg = <-c.stderr
	}
	<-c.done
	m1, m2 := capturedRE.FindStringSubmatch(msg), droppedRE.FindStringSubmatch(msg)
	if m1 == nil || m2 == nil {
		return st, fmt.Errorf("peer: tcpdump gave no statistics: %s", strings.TrimSpace(msg))
	}
	st.Captured, _ = strconv.Atoi(m1[1])
	st.DroppedByKernel, _ = strconv.Atoi(m2[1])
	return st, nil
}
