package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// freePorts returns a UDP port free on 127.0.0.1 and a free TCP port.
func freePorts(t *testing.T) (string, string) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	roce := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
	udp.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return roce, tcp
}

// TestPerfCommand runs softrdma perf as server and client over loopback
// UDP, with perftest's flags placed before and after the server address.
func TestPerfCommand(t *testing.T) {
	for _, tc := range []struct {
		test  string
		flags []string
		row   string
	}{
		{"write_bw", []string{"-s", "4K", "-n", "50", "--report_gbits", "-F"}, " 4096       50 "},
		{"send_lat", []string{"-s", "64", "-n", "30", "-I", "64"}, " 64      30 "},
		{"atomic_bw", []string{"-A", "CMP_AND_SWAP", "-n", "20", "-q", "2", "-t", "8"}, " 8          40 "},
		{"write_bw", []string{"-R", "-s", "4K", "-n", "20"}, " 4096       20 "},
		{"send_lat", []string{"--rdma_cm", "-n", "20"}, " 2       20 "},
		{"read_bw", []string{"-s", "8K", "-n", "30", "--stats"}, " 8192       30 "},
		{"write_lat", []string{"-s", "64", "-n", "200", "--busy-poll=false"}, " 64      200 "},
		{"send_bw", []string{"-s", "1K", "-n", "200", "--busy-poll=false", "--gso=false"}, " 1024       200 "},
		{"send_lat", []string{"-s", "64", "-n", "200", "-e"}, " 64      200 "},
		{"read_bw", []string{"-s", "8K", "-n", "100", "--events"}, " 8192       100 "},
		{"send_bw", []string{"-s", "4K", "-n", "300", "-e"}, " 4096       300 "},
		{"write_bw", []string{"-s", "64K", "-n", "100", "-q", "2", "-e"}, " 65536      200 "},
	} {
		t.Run(tc.test, func(t *testing.T) {
			roce, tcp := freePorts(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var sout bytes.Buffer
			errc := make(chan error)
			go func() {
				args := append([]string{tc.test, "--bind", "127.0.0.1", "--roce-port", roce, "-p", tcp}, tc.flags...)
				errc <- runPerf(ctx, args, &sout)
			}()
			var cout bytes.Buffer
			var cerr error
			for try := 0; try < 50; try++ { // until the server listens
				cout.Reset()
				args := append([]string{tc.test, "--bind", "127.0.0.2", "127.0.0.1", "--roce-port", roce, "--port", tcp, "-x", "0"}, tc.flags...)
				cerr = runPerf(ctx, args, &cout)
				if cerr == nil || !strings.Contains(cerr.Error(), "connection refused") && !strings.Contains(cerr.Error(), "no server listens") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			serr := <-errc
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout.String(), serr, sout.String())
			}
			for _, out := range []string{sout.String(), cout.String()} {
				if !strings.Contains(out, tc.row) || !strings.Contains(out, " GID index       : 0\n") {
					t.Errorf("want a row starting %q in\n%s", tc.row, out)
				}
				if slices.Contains(tc.flags, "--stats") {
					// 30 READs of 8 KiB at the port's MTU (loopback: 4096) are
					// 60 responses at least; the sides differ in which they send.
					m := regexp.MustCompile(`(?m)^ link: sent (\d+) packets in (\d+) calls .*, received (\d+) in (\d+) calls .*\n CPU: [0-9.]+ s \(user`).FindStringSubmatch(out)
					if m == nil {
						t.Errorf("no link and CPU report in\n%s", out)
						continue
					}
					tx, _ := strconv.Atoi(m[1])
					rx, _ := strconv.Atoi(m[3])
					if tx+rx < 90 || tx < 30 || rx < 30 {
						t.Errorf("implausible counts %q in\n%s", m[0], out)
					}
				}
			}
		})
	}
}

func TestPerfUsageErrors(t *testing.T) {
	ctx := context.Background()
	roce, _ := freePorts(t)
	for _, args := range [][]string{
		{}, {"nosuch_bw"}, {"write_bw", "a", "b"}, {"write_bw", "-s", "0"}, {"write_bw", "-s", "12X"},
		{"write_bw", "-n", "2"}, {"write_lat", "-q", "2"}, {"write_bw", "-A", "FETCH_AND_ADD"},
		{"atomic_bw", "-A", "SWAP"}, {"atomic_bw", "-s", "16"}, {"atomic_lat", "-a"}, {"write_bw", "-m", "1000"},
		{"read_bw", "-I", "64"}, {"write_bw", "-a", "-D", "2"}, {"write_bw", "-u", "40"}, {"write_bw", "-i", "2"},
		{"write_bw", "--bind", "127.0.0.1", "--roce-port", roce, "-x", "3"},
	} {
		if err := runPerf(ctx, args, new(bytes.Buffer)); err == nil {
			t.Errorf("perf %q succeeded", args)
		}
	}
}

// TestPerfExitCode checks that the command exits non-zero, with a message,
// when the server's TCP port is taken and when no server answers.
func TestPerfExitCode(t *testing.T) {
	if os.Getenv("SOFTRDMA_PERF_MAIN") == "1" {
		os.Args = append([]string{"softrdma"}, strings.Split(os.Getenv("SOFTRDMA_PERF_ARGS"), " ")...)
		main()
		os.Exit(0)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	rocePort, closed := freePorts(t)
	// A device with rdma_cm but no listener, for -R: its CM rejects.
	cmRoce, _ := freePorts(t)
	port, _ := strconv.Atoi(cmRoce)
	dev, err := roce.Open([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, &roce.Options{Port: uint16(port),
		Options: verbs.Options{RemotePort: uint16(port), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rcm, err := rdmacm.New([]*verbs.Device{dev}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rcm.Close()
	for _, tc := range []struct{ args, want string }{
		{"perf write_bw -R --bind 127.0.0.2 --roce-port " + cmRoce + " 127.0.0.1", "rejected: no server listens on that port (reason 8)"},
		{"perf write_bw --bind 127.0.0.1 --roce-port " + rocePort + " -p " + taken, "couldn't listen to port " + taken},
		{"perf read_lat --bind 127.0.0.2 --roce-port " + rocePort + " -p " + closed + " 127.0.0.1", "couldn't connect to 127.0.0.1:" + closed},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPerfExitCode$")
		cmd.Env = append(os.Environ(), "SOFTRDMA_PERF_MAIN=1", "SOFTRDMA_PERF_ARGS="+tc.args)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%s: exit %v, want non-zero\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: output does not say %q:\n%s", tc.args, tc.want, out)
		}
	}
}

// TestPerfNewFlagsUsage: perftest's refusals of -c, -l and --output are
// usage errors (exit status 2) before any device is opened.
func TestPerfNewFlagsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "read_bw", "-c", "UC"},
		{"perf", "write_bw", "-c", "UD"},
		{"perf", "send_bw", "-c", "XRC"},
		{"perf", "write_lat", "-l", "2"},
		{"perf", "write_bw", "-l", "3", "-n", "100"},
		{"perf", "write_bw", "--output=latency"},
		{"perf", "send_lat", "--output=bandwidth"},
		{"perf", "send_lat", "--output=bw"},
	} {
		var out, errb strings.Builder
		if st := run(args, &out, &errb); st != 2 {
			t.Errorf("softrdma %q: status %d, stderr %q; want 2", args, st, errb.String())
		}
	}
}
