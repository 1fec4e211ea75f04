//go:build interop && linux

package interop

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
)

// capiExMatrix runs, over capi's librdmacm.so.1, Debian's rdmacm-utils
// that use librdmacm's endpoint calls and multicast against the same
// tools in the guest on Linux rxe: rdma_server/rdma_client (rdma_create_ep,
// rdma_get_request, the synchronous mode, <rdma/rdma_verbs.h>'s inline
// post and completion calls) in both roles, and mckey (rdma_join_multicast_ex
// on RoCEv2, IPv4) as sender and as receiver. lib is capiMatrix's build.
func (s *suite) capiExMatrix(t *testing.T, lib string) {
	env := []string{"LD_LIBRARY_PATH=" + lib, "SOFTRDMA_DEVICES=" + s.p.Tap()}
	host, guest := peer.HostIPv4.String(), peer.GuestIPv4.String()
	const epPort = 7481
	for _, role := range []string{"client", "server"} {
		s.run(t, "capi/rdma_server/lib-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			bin := "rdma_" + role
			path, err := exec.LookPath(bin)
			if err != nil {
				return fmt.Errorf("%s on the host (rdmacm-utils): %v", bin, err)
			}
			port := strconv.Itoa(epPort)
			var server, client side
			if role == "server" {
				server = side{Exec: []string{path, "-s", host, "-p", port}, Env: env, Ready: s.libServerReady}
				client = side{Guest: fmt.Sprintf("rdma_client -s %s -p %s", host, port)}
			} else {
				server = side{Guest: fmt.Sprintf("rdma_server -p %s", port), Ready: s.guestCMListening(epPort)}
				client = side{Exec: []string{path, "-s", guest, "-p", port}, Env: env}
			}
			so, co, err := s.pair(t, ctx, server, client)
			if err != nil {
				return err
			}
			for _, c := range []struct {
				o    *outcome
				want string
			}{{so, "rdma_server: end 0"}, {co, "rdma_client: end 0"}} {
				if !strings.Contains(c.o.stdout, c.want) {
					return fmt.Errorf("%s: no %q\nstdout:\n%s\nstderr:\n%s", c.o.cmd, c.want, c.o.stdout, c.o.stderr)
				}
			}
			return nil
		})
	}

	// mckey's receiver sends no RoCE packet (its joins are IGMP).
	s.markReceiveOnly("capi/mckey/lib-receiver")
	for _, role := range []string{"sender", "receiver"} {
		s.run(t, "capi/mckey/lib-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			path, err := exec.LookPath("mckey")
			if err != nil {
				return fmt.Errorf("mckey on the host (rdmacm-utils): %v", err)
			}
			if r, err := s.p.Run(ctx, "ip route replace 224.0.0.0/4 dev eth0"); err != nil || r.Status != 0 {
				return fmt.Errorf("guest multicast route: %v %s", err, r.Stderr)
			}
			g, count := mckeyGroup.String(), strconv.Itoa(mckeyCount)
			var server, client side
			if role == "receiver" {
				server = side{Exec: []string{path, "-m", g, "-b", host, "-c", strconv.Itoa(mckeyRecvQPs), "-C", count},
					Env: env, Ready: s.libServerReady}
				client = side{Guest: fmt.Sprintf("mckey -m %s -s -b %s -C %s", g, guest, count)}
			} else {
				server = side{Guest: fmt.Sprintf("mckey -m %s -b %s -c %d -C %s", g, guest, mckeyRecvQPs, count),
					Ready: s.guestJoined(mckeyGroup)}
				client = side{Exec: []string{path, "-m", g, "-s", "-b", host, "-C", count}, Env: env}
			}
			so, co, err := s.pair(t, ctx, server, client)
			if err != nil {
				return err
			}
			joined := "mckey: joined dgid: ::ffff:" + g + " mlid 0x0 sl 0\n"
			for _, c := range []struct {
				o     *outcome
				joins int
			}{{so, mckeyRecvQPs}, {co, 1}} {
				if !strings.Contains(c.o.stdout, "data transfers complete\n") || !strings.Contains(c.o.stdout, "return status 0\n") ||
					strings.Count(c.o.stdout, joined) != c.joins {
					return fmt.Errorf("%s: want %d joins, its transfers complete and status 0\nstdout:\n%s\nstderr:\n%s",
						c.o.cmd, c.joins, c.o.stdout, c.o.stderr)
				}
			}
			return nil
		}, mckeyWire(role))
	}
}
