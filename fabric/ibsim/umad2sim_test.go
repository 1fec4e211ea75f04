package ibsim

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

const umad2simLib = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

// runSim runs an unmodified infiniband-diags command under libumad2sim
// (ibsim-run) against the server on sock, and returns its output. It skips
// the test when the Debian packages are missing.
func runSim(t *testing.T, sock string, env []string, args ...string) (string, error) {
	t.Helper()
	for _, bin := range []string{"ibsim-run", args[0]} {
		if _, err := exec.LookPath(bin); err != nil {
			missing(t, "%s is not installed (Debian: apt-get install ibsim-utils libumad2sim0 infiniband-diags opensm); CI installs it", bin)
		}
	}
	if _, err := os.Stat(umad2simLib); err != nil {
		missing(t, "no %s (Debian: apt-get install libumad2sim0): %v", umad2simLib, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ibsim-run", args...)
	cmd.Env = append(append(os.Environ(), "IBSIM_SOCKNAME="+sock), env...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUmad2simSmpquery runs smpquery under libumad2sim against the server
// over softrdma's fabric,
// over unix sockets and over UDP: libumad2sim's session (CONNECT, the GET_
// queries, its data socket) and a directed-route SMP work as they do
// against ibsim.
func TestUmad2simSmpquery(t *testing.T) {
	leakcheck.Check(t)
	b := newFabric(t, smallTopology)
	sock := sockName()
	startServer(t, b, Config{SockName: sock})
	us := startUDPServer(t, b)
	_, port, _ := net.SplitHostPort(us.Addr().String())
	udp := []string{"IBSIM_SERVER_NAME=127.0.0.1", "IBSIM_SERVER_PORT=" + port}
	for _, tc := range []struct {
		host, typ, guid string
		env             []string
	}{
		{"", "Switch", "0x0000000000200000", nil},
		{"HcaB", "Channel Adapter", "0x0000000000100002", nil},
		{"HcaA", "Channel Adapter", "0x0000000000100000", udp},
	} {
		env := tc.env
		if tc.host != "" {
			env = append(env, "SIM_HOST="+tc.host)
		}
		out, err := runSim(t, sock, env, "smpquery", "-D", "nodeinfo", "0")
		if err != nil {
			t.Fatalf("smpquery at %q: %v\n%s", tc.host, err, out)
		}
		for _, want := range []string{`(?m)^NodeType:\.+` + tc.typ + `$`, `(?m)^Guid:\.+` + tc.guid + `$`} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("smpquery at %q printed no %s:\n%s", tc.host, want, out)
			}
		}
	}
}

// missing skips a test whose tools are not installed, or fails it when
// SOFTRDMA_IBSIM_E2E asks for the end-to-end run (CI installs the tools).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("SOFTRDMA_IBSIM_E2E") != "" {
		t.Fatalf("SOFTRDMA_IBSIM_E2E is set but "+format, args...)
	}
	t.Skipf(format, args...)
}
