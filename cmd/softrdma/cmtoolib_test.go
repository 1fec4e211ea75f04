package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire"
)

// serveIBWithSA serves net.2sw2path4hca's CA ports (serveIB) with
// softrdma's SM and SA at Hca3 (startSMSA over sm.FabricTransport), as
// `softrdma fabric` runs them: the fabric carries the HCAs' SA queries to
// the SA and its answers back on the data plane.
func serveIBWithSA(t *testing.T) *ibNet {
	t.Helper()
	n := serveIB(t)
	quiet := slog.New(slog.DiscardHandler)
	tr, err := sm.FabricTransport(n.f, n.f.NodeByName("Hca3"), 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := startSMSA(tr, sm.Config{Logger: quiet}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// gidOf is the address of node's port 1 for the rdma_cm tools: its GID
// (the default subnet prefix and the port GUID) as an IPv6 address.
func gidOf(n *ibNet, node string) string {
	var g wire.GID
	g[0], g[1] = 0xfe, 0x80
	guid := n.f.NodeByName(node).PortGUID(1)
	for i := range 8 {
		g[15-i] = byte(guid >> (8 * i))
	}
	return netip.AddrFrom16(g).String()
}

// TestCMToolsIB runs ping and cmatose between Hca1 (Switch1) and Hca2
// (Switch2) of a served fabric: the tools address the server by its GID,
// rdma_cm resolves the route through the SA, and the connections carry
// their data by LID across the switches.
func TestCMToolsIB(t *testing.T) {
	n := serveIBWithSA(t)
	ib := func(node string) []string { return []string{"--fabric", n.addr, "--hca", node} }
	g2 := gidOf(n, "Hca2")
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runPing(ctx, args, out) }
	s, c := runPair(t, run,
		append(ib("Hca2"), "-s", "-a", g2, "-v", "-p", "7174", "-S", "2000"),
		append(ib("Hca1"), "-c", "-a", g2, "-p", "7174", "-C", "3", "-vV", "-S", "2000"))
	if strings.Count(c, "ping data: rdma-ping-") != 3 || strings.Count(s, "server ping data: rdma-ping-") != 3 {
		t.Fatalf("ping:\nclient:\n%s\nserver:\n%s", c, s)
	}
	if st := n.f.DataStats(); st.Forwarded == 0 || st.Delivered == 0 || st.ToClients == 0 || st.FromClients == 0 {
		t.Fatalf("no packet crossed the switches, or none to the SA and back: %+v", st)
	}
	runC := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c = runPair(t, runC,
		append(ib("Hca2"), "-b", g2, "-c", "3", "-C", "20"),
		append(ib("Hca1"), "-s", g2, "-c", "3", "-C", "20"))
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("cmatose output:\n%s", out)
		}
	}
	// UD through SIDR: the peer's address handle by LID.
	runU := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runUdaddy(ctx, args, out) }
	s, c = runPair(t, runU,
		append(ib("Hca2"), "-b", g2, "-c", "2"),
		append(ib("Hca1"), "-s", g2, "-c", "2"))
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("udaddy output:\n%s", out)
		}
	}
	// perf -R: the exchange and the test QPs connected by rdma_cm.
	tcp := freeTCPPort(t)
	sout, cout := runIBPair(t, runPerf, append([]string{"write_bw", "-R", "-p", tcp, "-s", "65536", "-n", "50"}, ib("Hca2")...),
		append([]string{"write_bw", "-R", "-p", tcp, "-s", "65536", "-n", "50"}, append(ib("Hca1"), g2)...))
	for _, out := range []string{sout, cout} {
		if !strings.Contains(out, "Data ex. method : rdma_cm") || !strings.Contains(out, "Link type       : IB") {
			t.Fatalf("perf -R output:\n%s", out)
		}
	}
	t.Logf("perf -R client:\n%s", cout)
	if !strings.Contains(cout, " 65536      50 ") {
		t.Fatalf("perf -R client output:\n%s", cout)
	}
}

// startFabricSA runs `softrdma fabric` (its SM and SA at Hca1) on
// net.2sw2path4hca with the CA ports served at a unix socket, until the
// test ends; it waits for the HCAs named to be ACTIVE and returns the
// socket's address and Hca2's GID as rdma_cm's tools take it.
func startFabricSA(t *testing.T, nodes ...string) (addr, g2 string) {
	t.Helper()
	topo := "../../fabric/testdata/net.2sw2path4hca"
	dir := t.TempDir()
	sock := fmt.Sprintf("softrdma-cmd-sa-test-%d", os.Getpid())
	addr = "unix:" + filepath.Join(dir, "hca.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFabric(ctx, []string{"-s", sock, "-hca", addr, topo}, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("softrdma fabric: %v", err)
		}
	})
	d := remote.Dialer{Logger: slog.New(slog.DiscardHandler)}
	for _, node := range nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			p, err := d.Dial(dctx, addr, node, 1)
			dcancel()
			active := err == nil && p.Attr().State == ib.StateActive
			if err == nil {
				p.Close()
			}
			if active {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ACTIVE under softrdma fabric's SM: %v", node, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The GID of Hca2: the default prefix and its port GUID from the
	// topology.
	b, err := os.ReadFile(topo)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := fabric.ParseTopology(bytes.NewReader(b), "net")
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(tp, &fabric.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return addr, gidOf(&ibNet{f: f}, "Hca2")
}

// TestFabricCommandSA: `softrdma fabric` runs the SM and its SA at its
// first CA port (Hca1) and serves the CA ports; ping between Hca3
// (Switch1) and Hca2 (Switch2), in this process but through fabric/remote
// as other processes would, resolves its route through that SA, and so
// does ping from Hca1, the SM's own port; cmatose and perf write_bw -R
// run between Hca3 and Hca2 the same way.
func TestFabricCommandSA(t *testing.T) {
	addr, g2 := startFabricSA(t, "Hca2", "Hca3")
	ibf := func(node string) []string { return []string{"--fabric", addr, "--hca", node} }
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runPing(ctx, args, out) }
	s, c := runPair(t, run,
		append(ibf("Hca2"), "-s", "-a", g2, "-v", "-p", "7175", "-S", "100"),
		append(ibf("Hca3"), "-c", "-a", g2, "-p", "7175", "-C", "2", "-vV", "-S", "100"))
	if strings.Count(c, "ping data: rdma-ping-") != 2 || strings.Count(s, "server ping data: rdma-ping-") != 2 {
		t.Fatalf("ping:\nclient:\n%s\nserver:\n%s", c, s)
	}
	// Hca1 is the SM's port, served to a device too: its SA queries go to
	// its own LID, where the SA (not the device's GSI) answers.
	s, c = runPair(t, run,
		append(ibf("Hca2"), "-s", "-a", g2, "-v", "-p", "7176", "-S", "100"),
		append(ibf("Hca1"), "-c", "-a", g2, "-p", "7176", "-C", "2", "-vV", "-S", "100"))
	if strings.Count(c, "ping data: rdma-ping-") != 2 || strings.Count(s, "server ping data: rdma-ping-") != 2 {
		t.Fatalf("ping from the SM's port:\nclient:\n%s\nserver:\n%s", c, s)
	}
	runC := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c = runPair(t, runC,
		append(ibf("Hca2"), "-b", g2, "-c", "2", "-C", "10"),
		append(ibf("Hca3"), "-s", g2, "-c", "2", "-C", "10"))
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("cmatose output:\n%s", out)
		}
	}
	tcp := freeTCPPort(t)
	sout, cout := runIBPair(t, runPerf, append([]string{"write_bw", "-R", "-p", tcp, "-s", "65536", "-n", "20"}, ibf("Hca2")...),
		append([]string{"write_bw", "-R", "-p", tcp, "-s", "65536", "-n", "20"}, append(ibf("Hca3"), g2)...))
	if !strings.Contains(sout, "Data ex. method : rdma_cm") || !strings.Contains(cout, " 65536      20 ") {
		t.Fatalf("perf -R:\nserver:\n%s\nclient:\n%s", sout, cout)
	}
}

// TestMckeyIB: mckey on `softrdma fabric`: receivers on Hca2 and Hca4
// (Switch2, two QPs on Hca4) and a sender on Hca3 (Switch1) join an IPv6
// group with SA MCMemberRecord joins; the SM programs the switches' MFTs
// and every receiving QP gets the sender's messages; each join reports the
// group's MGID (rdma_cm's mapping) and the MLID the SA chose.
func TestMckeyIB(t *testing.T) {
	addr, _ := startFabricSA(t, "Hca2", "Hca3", "Hca4")
	ibf := func(node string) []string { return []string{"--fabric", addr, "--hca", node} }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		out *lockedBuffer
		err error
	}
	var outs []*lockedBuffer
	results := make(chan result, 2)
	for _, r := range []struct {
		node  string
		conns string
	}{{"Hca2", "1"}, {"Hca4", "2"}} {
		out := &lockedBuffer{}
		outs = append(outs, out)
		args := append(ibf(r.node), "-m", "ff0e::1234", "-c", r.conns, "-C", "5", "-S", "100", "-delay", "0s", "-timeout", "20s")
		go func() { results <- result{out, runMckey(ctx, args, out)} }()
	}
	for _, out := range outs { // both joined before the sender sends
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "receiving data transfers") {
			if time.Now().After(deadline) {
				t.Fatalf("receiver not joined:\n%s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var sout bytes.Buffer
	if err := runMckey(ctx, append(ibf("Hca3"), "-m", "ff0e::1234", "-s", "-C", "5", "-S", "100", "-delay", "300ms"), &sout); err != nil {
		t.Fatalf("sender: %v\n%s", err, sout.String())
	}
	for range outs {
		r := <-results
		if r.err != nil {
			t.Fatalf("receiver: %v\n%s", r.err, r.out.String())
		}
	}
	joined := regexp.MustCompile(`mckey: joined dgid: ff12:6001:ffff::1234 mlid 0xc0[0-9a-f]{2} sl 0\n`)
	for i, out := range append(outs, &lockedBuffer{}) {
		o := out.String()
		want := []string{"data transfers complete\n", "return status 0\n"}
		n := []int{1, 2}[min(i, 1)]
		if i == 2 {
			o, n = sout.String(), 1
		}
		if got := len(joined.FindAllString(o, -1)); got != n {
			t.Errorf("output %d: %d joins, want %d:\n%s", i, got, n, o)
		}
		for _, w := range want {
			if !strings.Contains(o, w) {
				t.Errorf("output %d lacks %q:\n%s", i, w, o)
			}
		}
	}
}
