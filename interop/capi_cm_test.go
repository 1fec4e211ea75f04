//go:build interop && linux

package interop

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
)

// capiCMMatrix runs Debian's rdmacm-utils on the host over capi's
// librdmacm.so.1 (the library under its second name) against the same
// tools in the guest on Linux rxe's rdma_cm: rping in both roles (10 pings,
// both sides' text checked), ucmatose and udaddy with the host as client
// (perftest's -R: capiPerftestMatrix). lib is capiMatrix's build.
func (s *suite) capiCMMatrix(t *testing.T, lib string) {
	env := []string{"LD_LIBRARY_PATH=" + lib, "SOFTRDMA_DEVICES=" + s.p.Tap()}
	look := func(bin string) (string, error) {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("%s on the host (rdmacm-utils, perftest): %v", bin, err)
		}
		return p, nil
	}
	const count, size = 10, 64
	host, guest := peer.HostIPv4.String(), peer.GuestIPv4.String()
	for _, role := range []string{"client", "server"} {
		s.run(t, "capi/rping/lib-"+role, 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			path, err := look("rping")
			if err != nil {
				return err
			}
			common := fmt.Sprintf("-C %d -S %d -v", count, size)
			var server, client side
			if role == "server" {
				server = side{Exec: append([]string{path, "-s", "-a", host}, strings.Fields(common)...), Env: env, Ready: s.libServerReady}
				client = side{Guest: fmt.Sprintf("rping -c -a %s %s -V", host, common)}
			} else {
				server = side{Guest: fmt.Sprintf("rping -s -a %s %s", guest, common), Ready: s.guestCMListening(rpingPort)}
				client = side{Exec: append([]string{path, "-c", "-a", guest, "-V"}, strings.Fields(common)...), Env: env}
			}
			so, co, err := s.pair(t, ctx, server, client)
			if err != nil {
				return err
			}
			if err := rpingLines(co.stdout, "ping data: ", count, size); err != nil {
				return fmt.Errorf("%s: %v\nstdout:\n%s", co.cmd, err, co.stdout)
			}
			if err := rpingLines(so.stdout, "server ping data: ", count, size); err != nil {
				return fmt.Errorf("%s: %v\nstdout:\n%s", so.cmd, err, so.stdout)
			}
			t.Logf("%d pings of %d bytes checked on both sides", count, size)
			return nil
		})
	}
	for _, c := range []struct {
		bin  string
		port int
	}{{"ucmatose", cmatosePort}, {"udaddy", udaddyPort}} {
		s.run(t, "capi/"+c.bin+"/lib-client", 2*time.Minute, func(t *testing.T, ctx context.Context) error {
			path, err := look(c.bin)
			if err != nil {
				return err
			}
			server := side{Guest: fmt.Sprintf("%s -b %s -c 2 -C 10", c.bin, guest), Ready: s.guestCMListening(c.port)}
			client := side{Exec: []string{path, "-b", host, "-s", guest, "-c", "2", "-C", "10"}, Env: env}
			so, co, err := s.pair(t, ctx, server, client)
			if err != nil {
				return err
			}
			for _, o := range []*outcome{so, co} {
				if !strings.Contains(o.stdout, "return status 0") {
					return fmt.Errorf("%s did not end with status 0\nstdout:\n%s\nstderr:\n%s", o.cmd, o.stdout, o.stderr)
				}
			}
			return nil
		})
	}
}
