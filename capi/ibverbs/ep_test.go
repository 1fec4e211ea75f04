//go:build capi

package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRdmaEndpoints runs Debian's rdma_server/rdma_client and
// rdma_xserver/rdma_xclient (rdmacm-utils) on the library, server on
// 127.0.0.1 and client on 127.0.0.2: rdma_getaddrinfo, rdma_create_ep,
// rdma_get_request, the synchronous mode (rdma_connect, rdma_accept and
// rdma_disconnect waiting for their events), and <rdma/rdma_verbs.h>'s
// inline rdma_reg_msgs, rdma_post_send/recv and rdma_get_send/recv_comp
// on the CQs and completion channels rdma_create_qp makes. Each program
// prints "end 0" only when its message went through.
func TestRdmaEndpoints(t *testing.T) {
	built(t)
	for _, c := range []struct{ srv, cli string }{{"rdma_server", "rdma_client"}, {"rdma_xserver", "rdma_xclient"}} {
		t.Run(c.srv, func(t *testing.T) {
			need(t, c.srv)
			port, cmPort := freePorts(t)
			srvArgs := []string{"-p", fmt.Sprint(cmPort)}
			if c.srv == "rdma_server" {
				srvArgs = append(srvArgs, "-s", "127.0.0.1")
			}
			so, co := cmPair(t, port, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.1", port, c.srv, srvArgs...)
			}, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.2", port, c.cli, "-s", "127.0.0.1", "-p", fmt.Sprint(cmPort))
			})
			mustContain(t, "server", so, c.srv+": end 0")
			mustContain(t, "client", co, c.cli+": end 0")
		})
	}

	// XRC (-c x) is not supported, as on Linux rxe: rdma_create_ep fails
	// with an error, the program exits, nothing crashes.
	t.Run("xrc-unsupported", func(t *testing.T) {
		need(t, "rdma_xclient")
		port, cmPort := freePorts(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := command(ctx, "127.0.0.2", port, "rdma_xclient", "-s", "127.0.0.1", "-p", fmt.Sprint(cmPort), "-c", "x").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Exited() || ctx.Err() != nil || !strings.Contains(string(out), "rdma_create_ep: ") {
			t.Errorf("rdma_xclient -c x: %v (want a clean failure of rdma_create_ep)\n%s", err, out)
		}
	})
}
