//go:build capi

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

// The tests that run programs build the library as capi/build.sh does
// (and the softrdma command), once, on first use.
var (
	tmpDir    string
	buildOnce sync.Once
	buildErr  error
	libDir    string // holds libibverbs.so.1
	toolBin   string // softrdma, built from cmd/softrdma
)

const (
	debianLib   = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	debianCMLib = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1"
)

func TestMain(m *testing.M) {
	base, _ := leakcheck.Count()
	code := m.Run()
	if n, stacks := leakcheck.Wait(base, leakcheck.Settle); code == 0 && n > base {
		fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines after the tests, %d before\n%s\n", n, base, stacks)
		code = 1
	}
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

// built builds the library and the softrdma command, or fails t.
func built(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		if tmpDir, buildErr = os.MkdirTemp("", "softrdma-capi"); buildErr != nil {
			return
		}
		libDir = filepath.Join(tmpDir, "lib")
		if out, err := exec.Command("../build.sh", libDir).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building the library: %v\n%s", err, out)
			return
		}
		toolBin = filepath.Join(tmpDir, "softrdma")
		if out, err := exec.Command("go", "build", "-o", toolBin, "../../cmd/softrdma").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building softrdma: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func need(t *testing.T, path string) {
	t.Helper()
	var err error
	if filepath.IsAbs(path) {
		_, err = os.Stat(path)
	} else {
		_, err = exec.LookPath(path)
	}
	if err != nil {
		t.Skipf("needs %s (Debian's ibverbs-utils, libibverbs1 and binutils): %v", path, err)
	}
}

// dynsyms returns the versioned dynamic symbols of an ELF file that
// match prefix: name -> version, for definitions (def) or references.
func dynsyms(t *testing.T, file, prefix string, def bool) map[string]string {
	t.Helper()
	out, err := exec.Command("objdump", "-T", file).Output()
	if err != nil {
		t.Fatalf("objdump -T %s: %v", file, err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || len(f[0]) != 16 || !strings.HasPrefix(f[len(f)-1], prefix) || f[len(f)-1] == "Base" {
			continue
		}
		name, ver := f[len(f)-1], f[len(f)-2]
		undef := strings.Contains(sc.Text(), "*UND*")
		if def == undef || def && strings.HasPrefix(ver, "(") {
			continue // a reference, or a definition that is not the default
		}
		m[name] = strings.Trim(ver, "()")
	}
	return m
}

// TestSymbolVersions checks that each function the library exports has
// the version Debian's libibverbs or librdmacm gives its default
// definition (but for the tests' private hooks), and that every
// libibverbs and librdmacm symbol Debian's ibverbs-utils, rdmacm-utils
// and perftest binaries reference, and the libraries they load
// (librdmacm, the mlx5 and efa providers), is exported with the version
// they ask for.
func TestSymbolVersions(t *testing.T) {
	built(t)
	need(t, "objdump")
	need(t, debianLib)
	ours := dynsyms(t, filepath.Join(libDir, "libibverbs.so.1"), "", true)
	need(t, debianCMLib)
	debian := dynsyms(t, debianLib, "", true)
	debianCM := dynsyms(t, debianCMLib, "", true)
	nibv, nrdma := 0, 0
	for name, v := range ours {
		switch {
		case name == v: // the version's own entry
		case v == "SOFTRDMA_PRIVATE":
		case strings.HasPrefix(v, "RDMACM_"):
			if debianCM[name] != v {
				t.Errorf("%s@%s: Debian's librdmacm has %s@%q", name, v, name, debianCM[name])
			}
			nrdma++
		case debian[name] != v:
			t.Errorf("%s@%s: Debian's libibverbs has %s@%q", name, v, name, debian[name])
		case strings.HasPrefix(name, "ibv_"):
			nibv++
		}
	}
	if nibv < 60 {
		t.Errorf("the library exports %d ibv_ functions", nibv)
	}
	if nrdma < 25 {
		t.Errorf("the library exports %d librdmacm functions", nrdma)
	}
	if a, err := filepath.EvalSymlinks(filepath.Join(libDir, "librdmacm.so.1")); err != nil || filepath.Base(a) != "libibverbs.so.1" {
		t.Errorf("librdmacm.so.1 is not the library under a second name: %q, %v", a, err)
	}
	users := []string{"/usr/lib/x86_64-linux-gnu/librdmacm.so.1", "/usr/lib/x86_64-linux-gnu/libmlx5.so.1", "/usr/lib/x86_64-linux-gnu/libefa.so.1"}
	bins := []string{"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong",
		"rping", "ucmatose", "udaddy", "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "mckey"}
	for _, bin := range append(bins, perftests...) {
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Errorf("%s: %v (Debian's ibverbs-utils, rdmacm-utils, perftest)", bin, err)
			continue
		}
		users = append(users, path)
	}
	for _, path := range users {
		n := 0
		for name, v := range dynsyms(t, path, "", false) {
			if !strings.HasPrefix(v, "IBVERBS_") && !strings.HasPrefix(v, "RDMACM_") {
				continue
			}
			n++
			if ours[name] != v {
				t.Errorf("%s references %s@%s; the library has %q", path, name, v, ours[name])
			}
		}
		if n == 0 {
			t.Errorf("%s references no libibverbs symbol", path)
		}
	}
}

// perftests are perftest's eight programs.
var perftests = []string{"ib_write_lat", "ib_write_bw", "ib_send_lat", "ib_send_bw", "ib_read_lat", "ib_read_bw", "ib_atomic_lat", "ib_atomic_bw"}

func gcc(t *testing.T, src string, args ...string) string {
	t.Helper()
	need(t, "gcc")
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	out, err := exec.Command("gcc", append([]string{"-Wall", "-Werror", "-o", bin, src}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, out)
	}
	return bin
}

// runProgram builds testdata/NAME.c against the library and runs it on
// one device (softrdma0 on 127.0.0.1): it must exit 0 having printed
// "NAME: ok" and nothing else (its CHECKs print what failed).
func runProgram(t *testing.T, name string) {
	t.Helper()
	built(t)
	bin := gcc(t, "testdata/"+name+".c", "-L"+libDir, "-l:libibverbs.so.1")
	port, _ := freePorts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := command(ctx, "127.0.0.1", port, bin).CombinedOutput()
	if err != nil || string(out) != name+": ok\n" {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestABILayout compares the size and member offsets of every structure
// the library exposes or reads (layout.h), as the library was compiled,
// with the system's <infiniband/verbs.h> and <rdma/rdma_cma.h>.
func TestABILayout(t *testing.T) {
	built(t)
	bin := gcc(t, "testdata/layout.c", "-ldl")
	out, err := exec.Command(bin, filepath.Join(libDir, "libibverbs.so.1")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`^layout: \d+ sizes and offsets match\n$`).Match(out) {
		t.Fatalf("unexpected output: %s", out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// freePort returns a UDP port free on 127.0.0.1 and 127.0.0.2 and a TCP
// port free on 127.0.0.1.
func freePorts(t *testing.T) (udp, tcp int) {
	t.Helper()
	for range 20 {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		udp = c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.2:%d", udp))
		c.Close()
		if err != nil {
			continue
		}
		c2.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp = l.Addr().(*net.TCPAddr).Port
		l.Close()
		return udp, tcp
	}
	t.Skip("needs 127.0.0.2 on the loopback interface (Linux has it)")
	return 0, 0
}

// run runs a command on the library with SOFTRDMA_DEVICES=devs and the
// UDP port, bounded by ctx.
func command(ctx context.Context, devs string, port int, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir, "SOFTRDMA_DEVICES="+devs, fmt.Sprintf("SOFTRDMA_ROCE_PORT=%d", port))
	return cmd
}

// TestABI runs testdata/abi.c, linked against the library: the data path
// through the header's inline functions, a completion channel's fd under
// poll(2), a bad work request's bad_wr, and the errno of what is not
// supported.
func TestABI(t *testing.T) {
	runProgram(t, "abi")
}

// TestDevices runs Debian's ibv_devices and ibv_devinfo -v on the
// library: the configured devices, named as the tools name them, and
// every attribute softrdma devinfo prints for the same device printed the
// same.
func TestDevices(t *testing.T) {
	built(t)
	need(t, "ibv_devices")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := command(ctx, "127.0.0.1 lo;mine=127.0.0.2", 4791, "ibv_devices").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?s)softrdma0\s+[0-9a-f]{16}\n\s+softrdma_lo\s+[0-9a-f]{16}\n\s+mine\s+[0-9a-f]{16}\n$`).Match(out) {
		t.Errorf("ibv_devices:\n%s", out)
	}

	for _, c := range []struct{ devs, bind string }{{"127.0.0.1", "127.0.0.1"}, {"127.0.0.2,127.0.0.1", "127.0.0.2,127.0.0.1"}} {
		got, err := command(ctx, c.devs, 4791, "ibv_devinfo", "-v").CombinedOutput()
		if err != nil {
			t.Fatalf("ibv_devinfo -v: %v\n%s", err, got)
		}
		want, err := exec.CommandContext(ctx, toolBin, "devinfo", "-v", "--bind", c.bind).CombinedOutput()
		if err != nil {
			t.Fatalf("softrdma devinfo: %v\n%s", err, want)
		}
		// Lines of softrdma devinfo that Debian's rdma-core 44 ibv_devinfo
		// does not print (newer rdma-core does).
		notIn44 := regexp.MustCompile(`^\s*(max_inline_data|udp_port):`)
		lines := map[string]bool{}
		for l := range strings.Lines(string(got)) {
			lines[l] = true
		}
		n := 0
		for l := range strings.Lines(string(want)) {
			if notIn44.MatchString(l) {
				continue
			}
			n++
			if !lines[l] {
				t.Errorf("SOFTRDMA_DEVICES=%s ibv_devinfo -v lacks softrdma devinfo's line %q\nibv_devinfo:\n%s", c.devs, l, got)
			}
		}
		if n < 40 {
			t.Errorf("softrdma devinfo printed %d lines:\n%s", n, want)
		}
	}

	// A bad configuration: no devices, and the reason on stderr.
	out, err = command(ctx, "softrdma_nosuchif0", 4791, "ibv_devices").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nosuchif0") ||
		!strings.Contains(string(out), "Failed to get IB devices list: Invalid argument") {
		t.Errorf("ibv_devices on a bad SOFTRDMA_DEVICES: %v\n%s", err, out)
	}
}

// pingpong runs a pingpong server and client, retrying the client until
// the server listens.
func pingpong(t *testing.T, server, client func(ctx context.Context) *exec.Cmd) (srvOut, cliOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sb bytes.Buffer
	srv := server(ctx)
	srv.Stdout, srv.Stderr = &sb, &sb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var err error
	for range 100 {
		out, err = client(ctx).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "onnect") || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		cancel()
		srv.Wait()
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, sb.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, sb.String())
	}
	return sb.String(), string(out)
}

var itersLine = regexp.MustCompile(`(?m)^(\d+) iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)

func checkIters(t *testing.T, who, out, iters string) {
	t.Helper()
	m := itersLine.FindStringSubmatch(out)
	if m == nil || m[1] != iters {
		t.Errorf("%s did not report %s iterations:\n%s", who, iters, out)
	} else {
		t.Logf("%s: %s", who, m[0])
	}
}

// TestPingpong runs Debian's ibv_{rc,uc,ud,srq}_pingpong on the library
// against themselves, two processes on 127.0.0.1 and 127.0.0.2, with
// their data check (-c) where they have one, ibv_rc_pingpong with the new
// post send API (-N) and timestamps (-t), and ibv_rc_pingpong against
// softrdma pingpong both ways.
func TestPingpong(t *testing.T) {
	built(t)
	const iters = "50"
	for _, c := range []struct {
		name string
		args []string
	}{
		{"rc", []string{"-c"}}, {"rc", []string{"-e", "-c"}}, {"uc", []string{"-c"}}, {"ud", nil}, {"srq", []string{"-c"}},
		{"rc", []string{"-s", "64", "-e"}},
		// The new post send API (ibv_create_qp_ex, ibv_wr_*) and
		// completion timestamps (ibv_create_cq_ex, ibv_start_poll).
		{"rc", []string{"-N", "-c"}}, {"rc", []string{"-N", "-e"}}, {"rc", []string{"-N", "-t"}},
	} {
		bin := "ibv_" + c.name + "_pingpong"
		t.Run(strings.Join(append([]string{c.name}, c.args...), ""), func(t *testing.T) {
			need(t, bin)
			port, tcp := freePorts(t)
			args := append([]string{"-g", "0", "-n", iters, "-p", fmt.Sprint(tcp)}, c.args...)
			so, co := pingpong(t, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.1", port, bin, args...)
			}, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.2", port, bin, append(args, "127.0.0.1")...)
			})
			checkIters(t, "server", so, iters)
			checkIters(t, "client", co, iters)
		})
	}
	for _, cIsLib := range []bool{true, false} {
		t.Run(fmt.Sprintf("rc-vs-softrdma/lib-client=%v", cIsLib), func(t *testing.T) {
			need(t, "ibv_rc_pingpong")
			port, tcp := freePorts(t)
			lib := func(ctx context.Context, addr string, peer ...string) *exec.Cmd {
				return command(ctx, addr, port, "ibv_rc_pingpong", append([]string{"-g", "0", "-n", iters, "-c", "-p", fmt.Sprint(tcp)}, peer...)...)
			}
			tool := func(ctx context.Context, addr string, peer ...string) *exec.Cmd {
				return exec.CommandContext(ctx, toolBin, append([]string{"pingpong", "--bind", addr, "--roce-port", fmt.Sprint(port),
					"-g", "0", "-n", iters, "-c", "-p", fmt.Sprint(tcp)}, peer...)...)
			}
			srv, cli := tool, lib
			if !cIsLib {
				srv, cli = lib, tool
			}
			so, co := pingpong(t, func(ctx context.Context) *exec.Cmd { return srv(ctx, "127.0.0.1") },
				func(ctx context.Context) *exec.Cmd { return cli(ctx, "127.0.0.2", "127.0.0.1") })
			checkIters(t, "server", so, iters)
			checkIters(t, "client", co, iters)
		})
	}
}

// TestPerftest runs Debian's perftest programs on the library, server and
// client on 127.0.0.1 and 127.0.0.2, with their TCP exchange (without -R:
// rdma_cm is not covered yet), and checks that both exit 0 and report a
// result line (the client only, for the read and atomic latency tests).
func TestPerftest(t *testing.T) {
	built(t)
	result := regexp.MustCompile(`(?m)^\s+(2|8|65536)\s+100\s+[0-9.]+\s+[0-9.]+`)
	for _, bin := range perftests {
		t.Run(bin, func(t *testing.T) {
			need(t, bin)
			port, tcp := freePorts(t)
			args := []string{"-d", "softrdma0", "-x", "0", "-n", "100", "-p", fmt.Sprint(tcp)}
			so, co := pingpong(t, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.1", port, bin, args...)
			}, func(ctx context.Context) *exec.Cmd {
				return command(ctx, "127.0.0.2", port, bin, append(args, "127.0.0.1")...)
			})
			for who, out := range map[string]string{"server": so, "client": co} {
				if who == "server" && (bin == "ib_read_lat" || bin == "ib_atomic_lat") {
					continue // the passive side of a read or atomic latency test measures nothing
				}
				m := result.FindString(out)
				if m == "" {
					t.Errorf("%s printed no result:\n%s", who, out)
				} else if who == "client" {
					t.Logf("%s", strings.Join(strings.Fields(m), " "))
				}
			}
		})
	}
}

// TestAsyncEvents runs testdata/async.c: a CQ overrun, an SRQ below its
// limit and a QP on an SRQ moved to the error state each deliver their
// event (and the overrun QP its fatal error), naming the program's
// object, through async_fd under poll(2).
func TestAsyncEvents(t *testing.T) {
	runProgram(t, "async")
}

// TestExtendedVerbs runs testdata/ex.c: ibv_query_device_ex,
// ibv_create_cq_ex with completion timestamps polled through
// ibv_start_poll/ibv_next_poll/ibv_end_poll and the ibv_wc_read_*
// functions, ibv_create_qp_ex with send ops posting SEND (inline data
// list), RDMA WRITE with immediate (SGE list), RDMA READ and both atomics
// through the ibv_wr_* API, checking the data moved; wr_abort; and the
// errno of what is not supported.
func TestExtendedVerbs(t *testing.T) {
	runProgram(t, "ex")
}
