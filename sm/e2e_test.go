package sm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/internal/leakcheck"
)

// The end-to-end tests run softrdma's SM against Linux ibsim (as an ibsim
// client, the way OpenSM runs under ibsim-run), then read the subnet with
// infiniband-diags under ibsim-run, and compare it with what OpenSM makes
// of the same topology. They need SOFTRDMA_IBSIM_E2E set and the Debian
// packages ibsim-utils, libumad2sim0, infiniband-diags and opensm.

const netExamples = "/usr/share/doc/ibsim-utils/net-examples"

var e2eSeq atomic.Uint32

func needE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("SOFTRDMA_IBSIM_E2E") == "" {
		t.Skip("SOFTRDMA_IBSIM_E2E is not set (Linux ibsim, OpenSM and infiniband-diags; CI sets it)")
	}
	for _, bin := range []string{"ibsim", "ibsim-run", "opensm", "ibnetdiscover", "ibroute", "ibtracert", "sminfo", "iblinkinfo"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("SOFTRDMA_IBSIM_E2E is set but %s is missing (Debian: ibsim-utils libumad2sim0 infiniband-diags opensm)", bin)
		}
	}
}

// startLinuxIbsim runs ibsim on netfile with a socket base of its own until
// the test ends, and returns the base.
func startLinuxIbsim(t *testing.T, netfile string) string {
	t.Helper()
	sock := fmt.Sprintf("softrdma-sm-%d-%d", os.Getpid(), e2eSeq.Add(1))
	dir := t.TempDir()
	cmd := exec.Command("ibsim", "-s", "-n", "-f", filepath.Join(dir, "ibsim.log"), netfile)
	cmd.Env = append(os.Environ(), "IBSIM_SOCKNAME="+sock)
	// ibsim reads commands from stdin: keep it open until the test ends.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := ibsim.Dial(ctx, ibsim.ClientConfig{SockName: sock, ID: uint32(os.Getpid())*16 + 3000 + e2eSeq.Add(1)})
		cancel()
		if err == nil {
			c.Close()
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("ibsim does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sim runs a program under ibsim-run against the ibsim on sock.
func sim(t *testing.T, sock string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ibsim-run", args...)
	cmd.Env = append(append(os.Environ(), "IBSIM_SOCKNAME="+sock), env...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// diagView is what the diags say of a managed subnet.
type diagView struct {
	nodes   []string          // "Switch guid" / "Ca guid", sorted
	links   []string          // "guid[p] guid[p]", sorted
	lids    map[string]int    // switch node GUID or CA port GUID -> LID
	caLIDs  []int             // sorted
	swLIDs  map[string]int    // switch node GUID -> LID
	outputs map[string]string // command -> output
}

var (
	reDiscNode = regexp.MustCompile(`^(Switch|Ca)\s+\d+\s+"[SH]-([0-9a-f]{16})"\s+#\s+"[^"]*"(?:.*\blid (\d+))?`)
	reDiscPort = regexp.MustCompile(`^\[(\d+)\](?:\(([0-9a-f]+)\))?\s+"[SH]-([0-9a-f]{16})"\[(\d+)\](?:\(([0-9a-f]+)\))?\s+#(?:\s+lid (\d+) lmc \d+)?`)
	reLFT      = regexp.MustCompile(`(?m)^0x([0-9a-f]{4}) (\d{3}) :`)
	reUp       = regexp.MustCompile(`Active/\s+LinkUp`)
)

// readSubnet runs ibnetdiscover, iblinkinfo, ibroute on every switch and
// ibtracert between the first and last CA LIDs, and checks what must hold:
// unique unicast LIDs, both ends of every link Active, every LID routed by
// every switch, the trace ending at the CA asked for.
func readSubnet(t *testing.T, name, sock string) *diagView {
	t.Helper()
	v := &diagView{lids: map[string]int{}, swLIDs: map[string]int{}, outputs: map[string]string{}}
	run := func(args ...string) string {
		out := sim(t, sock, nil, args...)
		v.outputs[strings.Join(args, " ")] = out
		return out
	}
	var node, kind string
	for _, l := range strings.Split(run("ibnetdiscover"), "\n") {
		if m := reDiscNode.FindStringSubmatch(l); m != nil {
			node, kind = m[2], m[1]
			v.nodes = append(v.nodes, kind+" "+node)
			if kind == "Switch" {
				lid, _ := strconv.Atoi(m[3])
				v.lids[node], v.swLIDs[node] = lid, lid
			}
			continue
		}
		m := reDiscPort.FindStringSubmatch(l)
		if m == nil || node == "" {
			continue
		}
		a, b := fmt.Sprintf("%s[%s]", node, m[1]), fmt.Sprintf("%s[%s]", m[3], m[4])
		if a > b {
			a, b = b, a
		}
		v.links = append(v.links, a+" "+b)
		if kind == "Ca" {
			lid, _ := strconv.Atoi(m[6])
			v.lids[m[2]] = lid
			v.caLIDs = append(v.caLIDs, lid)
		}
	}
	slices.Sort(v.nodes)
	slices.Sort(v.links)
	v.links = slices.Compact(v.links)
	slices.Sort(v.caLIDs)
	if len(v.caLIDs) < 2 || len(v.swLIDs) == 0 {
		t.Fatalf("%s: ibnetdiscover found %d CA ports and %d switches:\n%s", name, len(v.caLIDs), len(v.swLIDs), v.outputs["ibnetdiscover"])
	}
	seen := map[int]string{}
	for g, lid := range v.lids {
		if lid < 1 || lid >= 0xc000 {
			t.Errorf("%s: %s has LID %d", name, g, lid)
		}
		if o, dup := seen[lid]; dup {
			t.Errorf("%s: LID %d of %s and %s", name, lid, o, g)
		}
		seen[lid] = g
	}
	if li := run("iblinkinfo"); len(reUp.FindAllString(li, -1)) != 2*len(v.links) {
		t.Errorf("%s: iblinkinfo shows %d ports Active, want %d:\n%s", name, len(reUp.FindAllString(li, -1)), 2*len(v.links), li)
	}
	for sw, lid := range v.swLIDs {
		out := run("ibroute", strconv.Itoa(lid))
		routed := map[int]bool{}
		for _, m := range reLFT.FindAllStringSubmatch(out, -1) {
			l, _ := strconv.ParseInt(m[1], 16, 32)
			routed[int(l)] = true
		}
		for l := range seen {
			if !routed[l] {
				t.Errorf("%s: switch %s (LID %d) has no route to LID %d:\n%s", name, sw, lid, l, out)
			}
		}
	}
	first, last := strconv.Itoa(v.caLIDs[0]), strconv.Itoa(v.caLIDs[len(v.caLIDs)-1])
	if out := run("ibtracert", first, last); !regexp.MustCompile(`(?m)^To ca .* lid ` + last + `-`).MatchString(out) {
		t.Errorf("%s: ibtracert %s %s:\n%s", name, first, last, out)
	}
	return v
}

func writeTemp(t *testing.T, name, text string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// manageWithSM runs softrdma's SM at Hca1 of the ibsim server on sock
// until its first sweep, reads the subnet with the diags and sminfo, sweeps
// once more (which must set nothing) and stops the SM.
func manageWithSM(t *testing.T, name, sock string) *diagView {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr, err := IbsimTransport(ctx, ibsim.ClientConfig{SockName: sock, Node: "Hca1", ID: uint32(os.Getpid())*16 + 2000 + e2eSeq.Add(1)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(tr, Config{Logger: quiet, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, 30*time.Second, "the first sweep", func() bool { return m.Subnet() != nil })
	st := m.Stats()
	t.Logf("%s: first sweep %v, %d SMPs (%d retries)", name, st.LastSweep.Round(time.Microsecond), st.Sent, st.Retries)
	v := readSubnet(t, name, sock)
	sn := m.Subnet()
	out := sim(t, sock, nil, "sminfo")
	if want := fmt.Sprintf("sm lid %d sm guid %#x", sn.SMLID, sn.PortByLID(sn.SMLID).GUID); !strings.Contains(out, want) || !strings.Contains(out, "SMINFO_MASTER") {
		t.Errorf("%s: sminfo: %s, want %s and MASTER", name, out, want)
	}
	if err := m.Sweep(ctx); err != nil || m.Stats().LastSets != 0 {
		t.Errorf("%s: second sweep: %v, %d sets", name, err, m.Stats().LastSets)
	}
	return v
}

// startSoftrdmaFabric serves softrdma's fabric built from netfile with
// ibsim's protocol until the test ends, and returns the socket base.
func startSoftrdmaFabric(t *testing.T, netfile string) string {
	t.Helper()
	f := openTopo(t, readTopo(t, netfile))
	sock := fmt.Sprintf("softrdma-sm-fab-%d-%d", os.Getpid(), e2eSeq.Add(1))
	srv, err := ibsim.NewServer(ibsim.FabricBackend(f.Fabric), ibsim.Config{SockName: sock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	return sock
}

// lftEntries returns the LID -> output port entries ibroute printed.
func lftEntries(out string) map[int]int {
	e := map[int]int{}
	for _, m := range reLFT.FindAllStringSubmatch(out, -1) {
		l, _ := strconv.ParseInt(m[1], 16, 32)
		p, _ := strconv.Atoi(m[2])
		e[int(l)] = p
	}
	return e
}

// normalize drops the lines of a diag's output that differ between runs
// (libumad2sim's greeting with the pid).
func normalize(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "ibwarn: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestE2EIbsim: softrdma's SM manages Linux ibsim's fabric on ibsim's
// examples and the 40-node fat tree (and a 612-node one with
// SOFTRDMA_SM_BIG set); the diags read a consistent subnet
// (every port Active, every LID routed, sminfo finds the SM MASTER at its
// LID), with the same nodes and links as after OpenSM on the same topology.
func TestE2EIbsim(t *testing.T) {
	needE2E(t)
	leakcheck.Check(t)
	cases := []struct{ name, file string }{
		{"net", filepath.Join(netExamples, "net")},
		{"net.2sw2path4hca", filepath.Join(netExamples, "net.2sw2path4hca")},
		{"fattree", writeTemp(t, "fattree", fatTree(4, 4, 8))},
	}
	if os.Getenv("SOFTRDMA_SM_BIG") != "" {
		cases = append(cases, struct{ name, file string }{"fattree612", writeTemp(t, "fattree612", fatTree(12, 24, 24))})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := startLinuxIbsim(t, tc.file)
			got := manageWithSM(t, "softrdma SM on Linux ibsim", sock)

			// The same SM on softrdma's fabric, served as ibsim serves its
			// own: the same subnet, found in the same order, so the same
			// LIDs.
			fsock := startSoftrdmaFabric(t, tc.file)
			onFabric := manageWithSM(t, "softrdma SM on softrdma's fabric", fsock)
			if !slices.Equal(got.nodes, onFabric.nodes) || !slices.Equal(got.links, onFabric.links) || !maps.Equal(got.lids, onFabric.lids) {
				t.Errorf("Linux ibsim: nodes %v links %v LIDs %v\nsoftrdma's fabric: nodes %v links %v LIDs %v",
					got.nodes, got.links, got.lids, onFabric.nodes, onFabric.links, onFabric.lids)
			}
			// The same forwarding tables (the LID -> port entries ibroute
			// prints; under load a diag may fail to name a destination),
			// and the same trace.
			for cmd, out := range got.outputs {
				switch {
				case strings.HasPrefix(cmd, "ibroute"):
					if a, b := lftEntries(out), lftEntries(onFabric.outputs[cmd]); !maps.Equal(a, b) {
						t.Errorf("%s on Linux ibsim: %v\non softrdma's fabric: %v", cmd, a, b)
					}
				case strings.HasPrefix(cmd, "ibtracert"):
					if o := onFabric.outputs[cmd]; normalize(o) != normalize(out) {
						t.Errorf("%s on Linux ibsim:\n%s\non softrdma's fabric:\n%s", cmd, out, o)
					}
				}
			}

			// OpenSM on a fresh ibsim with the same topology.
			osock := startLinuxIbsim(t, tc.file)
			cache := t.TempDir()
			logf := filepath.Join(cache, "opensm.log")
			start := time.Now()
			sim(t, osock, []string{"SIM_HOST=Hca1", "OSM_CACHE_DIR=" + cache, "OSM_TMP_DIR=" + cache}, "opensm", "-o", "-f", logf)
			took := time.Since(start)
			lb, _ := os.ReadFile(logf)
			if !strings.Contains(string(lb), "SUBNET UP") {
				t.Fatalf("OpenSM: no SUBNET UP:\n%s", lb)
			}
			t.Logf("OpenSM -o on Linux ibsim: %v from DISCOVERING to SUBNET UP in its log; %v from its start to its exit",
				osmSweep(string(lb)), took.Round(time.Millisecond))
			want := readSubnet(t, "OpenSM", osock)
			if !slices.Equal(got.nodes, want.nodes) || !slices.Equal(got.links, want.links) {
				t.Errorf("softrdma's SM: nodes %v links %v\nOpenSM: nodes %v links %v", got.nodes, got.links, want.nodes, want.links)
			}
			same := 0
			for g, lid := range got.lids {
				if want.lids[g] == lid {
					same++
				}
			}
			t.Logf("%d of %d LIDs equal to OpenSM's", same, len(got.lids))
		})
	}
}

var reOsmTime = regexp.MustCompile(`(?m)^\w+ +\d+ (\d\d):(\d\d):(\d\d) (\d{6}) .*-> (Entering DISCOVERING state|SUBNET UP)$`)

// osmSweep returns the time from "Entering DISCOVERING state" to "SUBNET
// UP" in an OpenSM log (its lines carry the time to the microsecond).
func osmSweep(log string) time.Duration {
	var at []time.Duration
	for _, m := range reOsmTime.FindAllStringSubmatch(log, -1) {
		var x [4]int
		for i := range x {
			x[i], _ = strconv.Atoi(m[i+1])
		}
		at = append(at, time.Duration(x[0])*time.Hour+time.Duration(x[1])*time.Minute+
			time.Duration(x[2])*time.Second+time.Duration(x[3])*time.Microsecond)
	}
	if len(at) < 2 {
		return -1
	}
	return at[len(at)-1] - at[0]
}
