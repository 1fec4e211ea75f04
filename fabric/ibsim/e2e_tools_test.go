package ibsim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2ETools: softrdma's tools as separate processes on a managed fabric,
// as on an InfiniBand cluster. `softrdma fabric` runs a two-level fat tree
// (8 switches, 32 CAs) as its own process; OpenSM (under libumad2sim)
// brings it to SUBNET UP; then `softrdma pingpong` (rc, uc, ud) and
// `softrdma perf write_bw` run between Hca2 (on Leaf1) and Hca32 (on
// Leaf4), each side a process on a CA port of the fabric (--hca), by LID.
// ibtracert gives the route; perfquery on every switch port along it shows
// the data and packet counters moved by at least what the client sent.
// Behind SOFTRDMA_IBSIM_E2E=1 (CI sets it).
func TestE2ETools(t *testing.T) {
	if os.Getenv("SOFTRDMA_IBSIM_E2E") == "" {
		t.Skip("SOFTRDMA_IBSIM_E2E is not set")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		missing(t, "no go command to build softrdma: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "softrdma")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/softrdma/softrdma/cmd/softrdma").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	netfile := writeFatTree(t, 4, 4, 8)
	sock := sockName()
	hcaAddr := startFabricProcess(t, bin, netfile, sock)

	// OpenSM at Hca1 until SUBNET UP.
	cache := t.TempDir()
	osmLog := filepath.Join(cache, "opensm.log")
	start := time.Now()
	out, err := runSim(t, sock, []string{"SIM_HOST=Hca1", "OSM_CACHE_DIR=" + cache, "OSM_TMP_DIR=" + cache}, "opensm", "-o", "-f", osmLog)
	lb, _ := os.ReadFile(osmLog)
	if err != nil || !strings.Contains(string(lb), "SUBNET UP") {
		t.Fatalf("OpenSM did not bring the subnet up (%v):\n%s\n--- log:\n%s", err, out, lb)
	}
	t.Logf("OpenSM: SUBNET UP in %v", time.Since(start).Round(time.Millisecond))

	const client, server = "Hca2", "Hca32"
	ib := func(node string) []string { return []string{"--fabric", hcaAddr, "--hca", node} }
	// The ports as the tools see them: LIDs the SM gave, ACTIVE.
	lid := map[string]int{}
	for _, node := range []string{client, server} {
		out := runTool(t, bin, append([]string{"ibstat"}, ib(node)...)...)
		m := regexp.MustCompile(`(?m)^\t\tBase lid: (\d+)$`).FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, "\t\tState: Active\n") || !strings.Contains(out, "\t\tLink layer: InfiniBand\n") {
			t.Fatalf("softrdma ibstat --hca %s:\n%s", node, out)
		}
		lid[node], _ = strconv.Atoi(m[1])
	}
	out = runTool(t, bin, append([]string{"devinfo"}, ib(client)...)...)
	for _, want := range []string{"state:\t\t\tPORT_ACTIVE (4)", fmt.Sprintf("port_lid:\t\t%d\n", lid[client]), "link_layer:\t\tInfiniBand"} {
		if !strings.Contains(out, want) {
			t.Errorf("softrdma devinfo --hca %s lacks %q:\n%s", client, want, out)
		}
	}

	// The route from the client to the server, as ibtracert follows the
	// LFTs: every switch on it with the ports the packets enter and leave by.
	trace, err := runSim(t, sock, nil, "ibtracert", strconv.Itoa(lid[client]), strconv.Itoa(lid[server]))
	if err != nil {
		t.Fatalf("ibtracert: %v\n%s", err, trace)
	}
	hops := parseTrace(trace)
	if len(hops) != 3 || hops[0].name != "Leaf1" || !strings.HasPrefix(hops[1].name, "Spine") || hops[2].name != "Leaf4" {
		t.Fatalf("ibtracert %d %d: want Leaf1, a spine, Leaf4; got %+v:\n%s", lid[client], lid[server], hops, trace)
	}
	t.Logf("route %s (LID %d) -> %s (LID %d): %+v", client, lid[client], server, lid[server], hops)

	port := freePort(t)
	for _, tc := range []struct {
		name      string
		args      []string
		bytes     int // the client sends at least these
		pkts      int // in at least this many packets
		resultRow *regexp.Regexp
	}{
		// -m 1024: a 4096-byte message is four packets.
		{"pingpong rc", []string{"pingpong", "--type", "rc", "-n", "500", "-s", "4096", "-m", "1024", "-c", "--timeout", "20s"}, 500 * 4096, 500 * 4,
			regexp.MustCompile(`(?m)^\d+ iters in .*$`)},
		{"pingpong uc", []string{"pingpong", "--type", "uc", "-n", "500", "-s", "4096", "-m", "1024", "-c", "--timeout", "20s"}, 500 * 4096, 500 * 4,
			regexp.MustCompile(`(?m)^\d+ iters in .*$`)},
		{"pingpong ud", []string{"pingpong", "--type", "ud", "-n", "500", "-s", "1024", "-c", "--timeout", "20s"}, 500 * 1024, 500,
			regexp.MustCompile(`(?m)^\d+ iters in .*$`)},
		{"perf write_bw", []string{"perf", "write_bw", "-n", "1000", "-s", "65536", "-m", "4096"}, 1000 * 65536, 1000 * 16,
			regexp.MustCompile(`(?m)^ 65536 +1000 +.*$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := routeCounters(t, sock, hops)
			args := append(append([]string(nil), tc.args...), "-p", strconv.Itoa(port))
			port++
			sout, cout := runToolPair(t, bin, append(append([]string(nil), args...), ib(server)...),
				append(append(append([]string(nil), args...), ib(client)...), "127.0.0.1"))
			after := routeCounters(t, sock, hops)
			// Each side names its own LID and the peer's.
			lidRe := func(side string, l int) string {
				if tc.args[0] == "perf" {
					return fmt.Sprintf(`(?m)^ %s address: LID 0x%02x QPN `, side, l)
				}
				return fmt.Sprintf(`(?m)^  %s address: +LID 0x%04x, `, side, l)
			}
			for _, o := range []struct {
				out        string
				mine, peer int
			}{{cout, lid[client], lid[server]}, {sout, lid[server], lid[client]}} {
				if !regexp.MustCompile(lidRe("local", o.mine)).MatchString(o.out) || !regexp.MustCompile(lidRe("remote", o.peer)).MatchString(o.out) {
					t.Errorf("addresses are not LIDs %d (local) and %d (remote):\n%s", o.mine, o.peer, o.out)
				}
			}
			row := tc.resultRow.FindString(cout)
			if row == "" {
				t.Errorf("no result in the client's output:\n%s", cout)
			}
			t.Logf("%s, %s (LID %d) -> %s (LID %d): %s", tc.name, client, lid[client], server, lid[server], strings.TrimSpace(row))
			for i, h := range hops {
				in, out := before[i], after[i]
				for _, c := range []struct {
					field string
					d     uint64
					want  int
				}{
					{fmt.Sprintf("port %d PortRcvData", h.in), out.in.rcvData - in.in.rcvData, tc.bytes / 4},
					{fmt.Sprintf("port %d PortRcvPkts", h.in), out.in.rcvPkts - in.in.rcvPkts, tc.pkts},
					{fmt.Sprintf("port %d PortXmitData", h.out), out.out.xmitData - in.out.xmitData, tc.bytes / 4},
					{fmt.Sprintf("port %d PortXmitPkts", h.out), out.out.xmitPkts - in.out.xmitPkts, tc.pkts},
				} {
					if c.d < uint64(c.want) {
						t.Errorf("%s (LID %d) %s moved by %d, want at least %d (the client sent %d bytes in %d packets)",
							h.name, h.lid, c.field, c.d, c.want, tc.bytes, tc.pkts)
					}
				}
				t.Logf("  %s (LID %d): in port %d PortRcvData +%d words, PortRcvPkts +%d; out port %d PortXmitData +%d words, PortXmitPkts +%d",
					h.name, h.lid, h.in, out.in.rcvData-in.in.rcvData, out.in.rcvPkts-in.in.rcvPkts,
					h.out, out.out.xmitData-in.out.xmitData, out.out.xmitPkts-in.out.xmitPkts)
			}
		})
	}
}

// startFabricProcess runs `softrdma fabric` on netfile with the ibsim
// sockets' base sock and CA ports served on a loopback TCP port, until
// the test ends, and returns that address once both are served.
func startFabricProcess(t *testing.T, bin, netfile, sock string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	logPath := filepath.Join(t.TempDir(), "fabric.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "fabric", "-s", sock, "-hca", addr, netfile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("softrdma fabric's log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if bytes.Contains(b, []byte("fabric: serving ibsim clients")) {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("softrdma fabric did not start:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runTool runs the softrdma binary with args and returns its output.
func runTool(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("softrdma %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runToolPair runs a tool's server process with sargs, then its client
// process with cargs (again while the server does not listen yet), and
// returns both outputs once both exit successfully.
func runToolPair(t *testing.T, bin string, sargs, cargs []string) (sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var sb bytes.Buffer
	srv := exec.CommandContext(ctx, bin, sargs...)
	srv.Stdout, srv.Stderr = &sb, &sb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var cb []byte
	var cerr error
	for range 200 {
		cb, cerr = exec.CommandContext(ctx, bin, cargs...).CombinedOutput()
		if cerr == nil || !bytes.Contains(cb, []byte("connection refused")) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cerr != nil {
		srv.Process.Kill()
	}
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("softrdma %s: %v\n%s\nserver softrdma %s: %v\n%s", strings.Join(cargs, " "), cerr, cb,
			strings.Join(sargs, " "), serr, sb.String())
	}
	return sb.String(), string(cb)
}

// hop is a switch on a route: its LID and the ports packets enter and
// leave by.
type hop struct {
	name    string
	lid     int
	in, out int
}

var reTraceHop = regexp.MustCompile(`(?m)^\[(\d+)\] -> (switch|ca) port \{0x[0-9a-f]+\}\[(\d+)\] lid (\d+)-\d+ "([^"]*)"$`)

// parseTrace returns the switches of an ibtracert path: each line
// "[OUT] -> switch port {GUID}[IN] lid L-L "NAME"" names the next switch
// and the port it is entered by; the next line's OUT is the port it is
// left by.
func parseTrace(out string) []hop {
	var hops []hop
	for _, m := range reTraceHop.FindAllStringSubmatch(out, -1) {
		o, _ := strconv.Atoi(m[1])
		if len(hops) > 0 {
			hops[len(hops)-1].out = o
		}
		if m[2] == "switch" {
			in, _ := strconv.Atoi(m[3])
			l, _ := strconv.Atoi(m[4])
			hops = append(hops, hop{name: m[5], lid: l, in: in})
		}
	}
	return hops
}

// portCounters are the traffic counters perfquery prints of a port.
type portCounters struct {
	xmitData, rcvData, xmitPkts, rcvPkts uint64
}

// hopCounters are a hop's in and out ports' counters.
type hopCounters struct{ in, out portCounters }

// routeCounters reads every hop's in and out ports' counters with
// perfquery.
func routeCounters(t *testing.T, sock string, hops []hop) []hopCounters {
	t.Helper()
	var cs []hopCounters
	for _, h := range hops {
		cs = append(cs, hopCounters{in: perfquery(t, sock, h.lid, h.in), out: perfquery(t, sock, h.lid, h.out)})
	}
	return cs
}

// perfquery returns the traffic counters perfquery prints of lid's port;
// a counter at its 32-bit ceiling (saturated) fails the test, as a
// difference of it would mean nothing.
func perfquery(t *testing.T, sock string, lid, port int) portCounters {
	t.Helper()
	out, err := runSim(t, sock, nil, "perfquery", strconv.Itoa(lid), strconv.Itoa(port))
	if err != nil {
		t.Fatalf("perfquery %d %d: %v\n%s", lid, port, err, out)
	}
	field := func(name string) uint64 {
		m := regexp.MustCompile(`(?m)^` + name + `:\.+(\d+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("perfquery %d %d prints no %s:\n%s", lid, port, name, out)
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		if v == math.MaxUint32 {
			t.Fatalf("perfquery %d %d: %s saturated", lid, port, name)
		}
		return v
	}
	return portCounters{xmitData: field("PortXmitData"), rcvData: field("PortRcvData"),
		xmitPkts: field("PortXmitPkts"), rcvPkts: field("PortRcvPkts")}
}
