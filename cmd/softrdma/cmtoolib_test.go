package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire"
)

// serveIBWithSA serves net.2sw2path4hca's CA ports (serveIB) with
// softrdma's SM at Hca3 and its SA answering on Hca3's data-plane port
// (startFabricSA), as `softrdma fabric` runs them.
func serveIBWithSA(t *testing.T) *ibNet {
	t.Helper()
	n := serveIB(t)
	quiet := slog.New(slog.DiscardHandler)
	node := n.f.NodeByName("Hca3")
	tr, err := sm.FabricTransport(n.f, node, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sm.New(tr, sm.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	stop, err := startFabricSA(n.f, node, 1, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
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
	if st := n.f.DataStats(); st.Forwarded == 0 || st.Delivered == 0 {
		t.Fatalf("no packet crossed the switches: %+v", st)
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
	var out bytes.Buffer
	if err := runMckey(context.Background(), append(ib("Hca1"), "-m", "ff0e::1234"), &out); !errors.Is(err, tool.ErrUsage) {
		t.Fatalf("mckey on an InfiniBand port: %v, want a usage error", err)
	}
}
