//go:build capi

package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMckey runs Debian's mckey (rdmacm-utils) on the library:
// rdma_join_multicast_ex on RoCE, the MULTICAST_JOIN event's address
// handle, QP number, Q_Key and context, UD sends to the group. The
// receiver (two QPs joined to 239.255.11.12, on 127.0.0.2) counts every
// message on each QP before it says "data transfers complete"; the sender
// is on 127.0.0.1. Each role runs against the library's mckey and against
// softrdma mckey.
func TestMckey(t *testing.T) {
	built(t)
	need(t, "mckey")
	need(t, "stdbuf")
	const group, count = "239.255.11.12", "5"
	type prog func(ctx context.Context, port int, sender bool) *exec.Cmd
	lib := func(ctx context.Context, port int, sender bool) *exec.Cmd {
		if sender {
			return command(ctx, "127.0.0.1", port, "mckey", "-m", group, "-b", "127.0.0.1", "-s", "-C", count, "-S", "64")
		}
		// Line-buffered (stdbuf), so that the test sees the joins.
		return command(ctx, "127.0.0.2", port, "stdbuf", "-oL", "mckey", "-m", group, "-b", "127.0.0.2", "-c", "2", "-C", count, "-S", "64")
	}
	tool := func(ctx context.Context, port int, sender bool) *exec.Cmd {
		a := []string{"mckey", "-m", group, "-C", count, "-S", "64", "-roce-port", fmt.Sprint(port)}
		if sender {
			a = append(a, "-b", "127.0.0.1", "-s", "-delay", "300ms")
		} else {
			a = append(a, "-b", "127.0.0.2", "-c", "2", "-timeout", "20s")
		}
		return exec.CommandContext(ctx, toolBin, a...)
	}
	for _, c := range []struct {
		name     string
		recv, tx prog
	}{{"lib", lib, lib}, {"lib-receiver-vs-softrdma", lib, tool}, {"lib-sender-vs-softrdma", tool, lib}} {
		t.Run(c.name, func(t *testing.T) {
			port, _ := freePorts(t)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			var rb lockedBuf
			recv := c.recv(ctx, port, false)
			recv.Stdout, recv.Stderr = &rb, &rb
			if err := recv.Start(); err != nil {
				t.Fatal(err)
			}
			// The sender starts once both receiving QPs joined: what it
			// sends before is not for them.
			for range 400 {
				if strings.Count(rb.String(), "joined dgid") == 2 || ctx.Err() != nil {
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
			out, err := c.tx(ctx, port, true).CombinedOutput()
			if err != nil {
				cancel()
				recv.Wait()
				t.Fatalf("sender: %v\n%s\nreceiver:\n%s", err, out, rb.String())
			}
			if err := recv.Wait(); err != nil {
				t.Fatalf("receiver: %v\n%s\nsender:\n%s", err, rb.String(), out)
			}
			rs := rb.String()
			if n := strings.Count(rs, "mckey: joined dgid: ::ffff:"+group+" mlid 0x0 sl 0"); n != 2 {
				t.Errorf("the receiver joined %d times, want 2:\n%s", n, rs)
			}
			mustContain(t, "receiver", rs, "receiving data transfers", "data transfers complete", "return status 0")
			mustContain(t, "sender", string(out), "initiating data transfers", "data transfers complete", "return status 0")
		})
	}
}

// lockedBuf is a buffer a running command writes while the test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
