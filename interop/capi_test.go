//go:build interop && linux

package interop

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/interop/peer"
)

// libServerReady is the Ready of a host server over capi's library: the
// library binds its device before it listens or joins, so a moment's grace
// follows the port's binding.
func (s *suite) libServerReady(ctx context.Context) bool {
	if !s.hostRoCEBound(ctx) {
		return false
	}
	time.Sleep(300 * time.Millisecond)
	return true
}

// capiMatrix runs Debian's C tools on the host over capi's
// libibverbs.so.1 (the device softrdma_TAP, named by SOFTRDMA_DEVICES)
// against the same tools in the guest on rxe0: the four pingpongs in both
// roles over IPv4 (GID index 1 on both sides), and perftest's eight
// programs (capiPerftestMatrix).
func (s *suite) capiMatrix(t *testing.T) {
	lib := filepath.Join(s.out, "capi-lib")
	ok := t.Run("capi/build", func(t *testing.T) {
		if out, err := exec.Command("../capi/build.sh", lib).CombinedOutput(); err != nil {
			t.Fatalf("capi/build.sh (needs gcc and libibverbs-dev): %v\n%s", err, out)
		}
	})
	if !ok {
		return
	}
	env := []string{"LD_LIBRARY_PATH=" + lib, "SOFTRDMA_DEVICES=" + s.p.Tap()}
	dev := "softrdma_" + s.p.Tap()
	for _, typ := range []string{"rc", "uc", "ud", "srq"} {
		size := 4096
		if typ == "ud" {
			size = 512
		}
		for _, role := range []string{"client", "server"} {
			s.run(t, fmt.Sprintf("capi/pingpong/%s/lib-%s", typ, role), 2*time.Minute, func(t *testing.T, ctx context.Context) error {
				bin := "ibv_" + typ + "_pingpong"
				path, err := exec.LookPath(bin)
				if err != nil {
					return fmt.Errorf("%s on the host (ibverbs-utils): %v", bin, err)
				}
				common := []string{"-g", "1", "-s", strconv.Itoa(size), "-n", "20", "-c"}
				host := side{Exec: append([]string{path, "-d", dev}, common...), Env: env}
				guest := fmt.Sprintf("%s -d rxe0 %s", bin, strings.Join(common, " "))
				var server, client side
				if role == "server" {
					server, client = host, side{Guest: guest + " " + peer.HostIPv4.String()}
				} else {
					host.Exec = append(host.Exec, peer.GuestIPv4.String())
					server, client = side{Guest: guest}, host
				}
				so, co, err := s.pair(t, ctx, server, client)
				if err != nil {
					return err
				}
				for _, o := range []*outcome{so, co} {
					if err := pingpongReport(o.stdout, size, 20); err != nil {
						return fmt.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", o.cmd, err, o.stdout, o.stderr)
					}
				}
				t.Logf("client: %s", strings.Join(strings.Fields(lastLines(co.stdout, 2)), " "))
				return nil
			})
		}
	}
	s.capiPerftestMatrix(t, lib) // capi_perf_test.go
	s.capiCMMatrix(t, lib)       // capi_cm_test.go
	s.capiExMatrix(t, lib)       // capi_ex_test.go
}
