package main

// The tools on InfiniBand ports: an in-process fabric (net.2sw2path4hca)
// served by fabric/remote, a test SM on Hca3, and the tools' commands on
// Hca1 (behind Switch1) and Hca2 (behind Switch2), addressed by LID.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// ibNet is a served fabric with its SM.
type ibNet struct {
	f    *fabric.Fabric
	addr string
	sm   *testSM
	sn   *sm.Subnet
}

// serveIB serves net.2sw2path4hca's CA ports on a loopback TCP port.
func serveIB(t *testing.T) *ibNet {
	t.Helper()
	b, err := os.ReadFile("../../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(bytes.NewReader(b), "net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := remote.NewServer(f, remote.Config{Network: "tcp", Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		f.Close()
	})
	return &ibNet{f: f, addr: srv.Addr().String()}
}

// lid returns the LID the SM gave node's port 1.
func (n *ibNet) lid(node string) uint16 {
	return n.sn.PortByGUID(n.f.NodeByName(node).PortGUID(1)).LID()
}

// switchLID returns the LID of a switch.
func (n *ibNet) switchLID(name string) uint16 {
	return n.sn.NodeByGUID(n.f.NodeByName(name).GUID()).Ports[0].LID()
}

// counters reads a switch port's PortCounters through its PMA.
func (n *ibNet) counters(t *testing.T, sw string, port byte) mad.PortCounters {
	t.Helper()
	data := make([]byte, 64)
	data[1] = port
	r := n.sm.perf(n.switchLID(sw), mad.PerfAttrPortCounters, data)
	if r.Status != 0 {
		t.Fatalf("PortCounters of %s port %d: no answer", sw, port)
	}
	pc, err := mad.ParsePortCounters(r.MAD[mad.PerfDataOffset:])
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// interSwitch sums Switch1's counters on its two links to Switch2 (ports 3
// and 5): what crossed between the switches either way.
func (n *ibNet) interSwitch(t *testing.T) (xmitWords, rcvWords, xmitPkts, rcvPkts uint64) {
	t.Helper()
	for _, p := range []byte{3, 5} {
		c := n.counters(t, "Switch1", p)
		xmitWords += uint64(c.PortXmitData)
		rcvWords += uint64(c.PortRcvData)
		xmitPkts += uint64(c.PortXmitPkts)
		rcvPkts += uint64(c.PortRcvPkts)
	}
	return
}

// freeTCPPort returns a loopback TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// runIBPair runs a tool's server with sargs and, once it listens, its client
// with cargs (which name 127.0.0.1), and returns both outputs.
func runIBPair(t *testing.T, run func(context.Context, []string, io.Writer) error, sargs, cargs []string) (sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sb bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, sargs, &sb) }()
	var cb bytes.Buffer
	var cerr error
	for range 500 { // until the server listens (10 s: slow under -race on a loaded machine)
		cb.Reset()
		cerr = run(ctx, cargs, &cb)
		// Refused: the TCP exchange's port is not open yet; with -R, the
		// CM's REJ for a service nobody listens on (reason 8).
		if cerr == nil || !strings.Contains(cerr.Error(), "connection refused") && !strings.Contains(cerr.Error(), "no server listens on that port") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cerr != nil {
		cancel()
	}
	serr := <-errc
	if cerr != nil || serr != nil {
		t.Fatalf("client %q: %v\n%s\nserver %q: %v\n%s", cargs, cerr, cb.String(), sargs, serr, sb.String())
	}
	return sb.String(), cb.String()
}

// TestToolsIB: the tools open devices on CA ports of a fabric served by
// fabric/remote (--fabric, --hca), refuse a port no SM has brought up,
// describe the port as the SM set it (devinfo, ibstat), and run pingpong
// (rc, uc, ud, srq, with -c checking every message) and perf (write_bw,
// read_lat) between Hca1 and Hca2, on different switches, by LID: the
// exchanged addresses are the ports' LIDs with no GID, and Switch1's PMA
// counts at least the data sent on its links to Switch2.
func TestToolsIB(t *testing.T) {
	n := serveIB(t)
	ib := func(node string) []string { return []string{"--fabric", n.addr, "--hca", node} }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fabric data plane: %+v", n.f.DataStats())
		}
	})

	// No SM yet: the ports are not ACTIVE.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := runPingpong(ctx, append(ib("Hca1"), "127.0.0.1"), &out); !errors.Is(err, tool.ErrPortNotActive) {
		t.Fatalf("pingpong on a port no SM brought up: %v", err)
	}
	if err := runPingpong(ctx, append(ib("Hca1"), "--bind", "127.0.0.1"), &out); !errors.Is(err, tool.ErrUsage) {
		t.Errorf("--hca with --bind: %v", err)
	}
	if err := runPingpong(ctx, []string{"--fabric", n.addr, "--hca", "NoSuchNode"}, &out); !errors.Is(err, fabric.ErrNoNode) {
		t.Errorf("--hca NoSuchNode: %v", err)
	}
	if err := runPerf(ctx, append([]string{"write_bw", "-R"}, ib("Hca1")...), &out); err == nil {
		t.Error("perf -R on an InfiniBand port succeeded")
	}

	n.sm = newSM(t, n.f, "Hca3", 1)
	n.sn = n.sm.sweep()
	lid1, lid2 := n.lid("Hca1"), n.lid("Hca2")

	t.Run("devinfo", func(t *testing.T) {
		var out bytes.Buffer
		if err := runDevinfo(ctx, append(ib("Hca1"), "-v"), &out); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		for _, want := range []string{
			"hca_id:\tsoftrdma_Hca1\n",
			"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
			fmt.Sprintf("\t\t\tsm_lid:\t\t\t%d\n", n.lid("Hca3")),
			fmt.Sprintf("\t\t\tport_lid:\t\t%d\n", lid1),
			"\t\t\tlink_layer:\t\tInfiniBand\n",
			"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("devinfo lacks %q:\n%s", want, s)
			}
		}
		out.Reset()
		if err := runIBStat(ctx, ib("Hca2:1"), &out); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CA 'softrdma_Hca2'\n", "\t\tState: Active\n", fmt.Sprintf("\t\tBase lid: %d\n", lid2),
			"\t\tLink layer: InfiniBand\n", fmt.Sprintf("\t\tPort GUID: 0x%016x\n", n.f.NodeByName("Hca2").PortGUID(1))} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("ibstat lacks %q:\n%s", want, out.String())
			}
		}
	})

	for _, typ := range []string{"rc", "uc", "ud", "srq"} {
		t.Run("pingpong "+typ, func(t *testing.T) {
			size := 4096
			if typ == "ud" {
				size = 2048 // one packet (the port's MTU)
			}
			iters := 200
			if raceEnabled {
				iters = 50
			}
			x0, r0, _, _ := n.interSwitch(t)
			tcp := freeTCPPort(t)
			common := []string{"--type", typ, "-p", tcp, "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-c", "-l", "1", "--timeout", "10s"}
			sout, cout := runIBPair(t, runPingpong, append(append(ib("Hca2"), common...), "-m", "2048"),
				append(append(ib("Hca1"), common...), "-m", "2048", "127.0.0.1"))
			for _, c := range []struct {
				out        string
				mine, peer uint16
			}{{sout, lid2, lid1}, {cout, lid1, lid2}} {
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^  local address:  LID 0x%04x, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::$`, c.mine)).MatchString(c.out) ||
					!regexp.MustCompile(fmt.Sprintf(`(?m)^  remote address: LID 0x%04x, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::$`, c.peer)).MatchString(c.out) {
					t.Errorf("addresses are not the ports' LIDs (%#x local, %#x remote) without GIDs:\n%s", c.mine, c.peer, c.out)
				}
				if want := fmt.Sprintf("%d bytes in ", 2*iters*size); !strings.Contains(c.out, want) {
					t.Errorf("no %q in:\n%s", want, c.out)
				}
			}
			// Each side sends iters messages: both directions cross.
			x1, r1, _, _ := n.interSwitch(t)
			if min(x1-x0, r1-r0)*4 < uint64(iters*size) {
				t.Errorf("Switch1's links to Switch2 moved %d bytes out, %d in; %d sent each way", (x1-x0)*4, (r1-r0)*4, iters*size)
			}
			t.Logf("client: %s", lastLine(cout))
		})
	}

	// A message small enough to go inline if the QP allowed it: as the C
	// tools, inline only up to the QP's max_inline_data (here 0).
	t.Run("pingpong rc 64 bytes", func(t *testing.T) {
		common := []string{"-p", freeTCPPort(t), "-n", "50", "-s", "64", "-c", "--timeout", "10s"}
		_, cout := runIBPair(t, runPingpong, append(ib("Hca2"), common...), append(append(ib("Hca1"), common...), "127.0.0.1"))
		if !strings.Contains(cout, "6400 bytes in ") {
			t.Errorf("client:\n%s", cout)
		}
	})

	// -g 0: the GID exchanged and a GRH on every packet (UD's -c checks
	// the GRH's source is the peer's GID).
	for _, typ := range []string{"rc", "ud"} {
		t.Run("pingpong GRH "+typ, func(t *testing.T) {
			gid := func(node string) string {
				var g [16]byte
				g[0], g[1] = 0xfe, 0x80
				pg := n.f.NodeByName(node).PortGUID(1)
				for i := range 8 {
					g[8+i] = byte(pg >> (56 - 8*i))
				}
				return netip.AddrFrom16(g).String()
			}
			common := []string{"--type", typ, "-p", freeTCPPort(t), "-n", "50", "-c", "-g", "0", "--timeout", "10s"}
			sout, cout := runIBPair(t, runPingpong, append(ib("Hca2"), common...), append(append(ib("Hca1"), common...), "127.0.0.1"))
			for _, c := range []struct{ out, mine, peer string }{{sout, gid("Hca2"), gid("Hca1")}, {cout, gid("Hca1"), gid("Hca2")}} {
				if !strings.Contains(c.out, "GID "+c.mine+"\n") || !strings.Contains(c.out, "GID "+c.peer+"\n") {
					t.Errorf("GIDs %s (local) and %s (remote) not exchanged:\n%s", c.mine, c.peer, c.out)
				}
			}
		})
	}
	t.Run("pingpong GRH on one side", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tcp := freeTCPPort(t)
		errc := make(chan error, 1)
		go func() {
			errc <- runPingpong(ctx, append(ib("Hca2"), "-p", tcp, "-n", "5", "--timeout", "5s"), io.Discard)
		}()
		var cerr error
		for range 200 {
			cerr = runPingpong(ctx, append(ib("Hca1"), "-p", tcp, "-n", "5", "-g", "0", "--timeout", "5s", "127.0.0.1"), io.Discard)
			if cerr == nil || !strings.Contains(cerr.Error(), "connection refused") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		serr := <-errc
		if !errors.Is(serr, tool.ErrUsage) || !strings.Contains(serr.Error(), "run this side with -g too") {
			t.Errorf("server without -g, client with: server %v, client %v", serr, cerr)
		}
	})

	for _, test := range []string{"write_bw", "read_lat"} {
		t.Run("perf "+test, func(t *testing.T) {
			const size = 16384
			iters := 200
			if test == "read_lat" {
				iters = 100 // one at a time
			}
			x0, r0, _, _ := n.interSwitch(t)
			tcp := freeTCPPort(t)
			common := []string{test, "-p", tcp, "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-S", "2"}
			sout, cout := runIBPair(t, runPerf, append(common, ib("Hca2")...), append(append(common, ib("Hca1")...), "127.0.0.1"))
			for _, c := range []struct {
				out        string
				mine, peer uint16
			}{{sout, lid2, lid1}, {cout, lid1, lid2}} {
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^ local address: LID 0x%02x QPN `, c.mine)).MatchString(c.out) ||
					!regexp.MustCompile(fmt.Sprintf(`(?m)^ remote address: LID 0x%02x QPN `, c.peer)).MatchString(c.out) ||
					strings.Contains(c.out, "GID") || !strings.Contains(c.out, " Link type       : IB\n") {
					t.Errorf("not LID addressing (%#x local, %#x remote) on IB:\n%s", c.mine, c.peer, c.out)
				}
			}
			res := regexp.MustCompile(fmt.Sprintf(`(?m)^ %d +%d +`, size, iters))
			if !res.MatchString(cout) {
				t.Errorf("no result line for %d bytes x %d:\n%s", size, iters, cout)
			}
			// write_bw: the client's WRITEs go Switch1 -> Switch2; read_lat:
			// the READ responses come back Switch2 -> Switch1.
			x1, r1, _, _ := n.interSwitch(t)
			moved := (x1 - x0) * 4
			if test == "read_lat" {
				moved = (r1 - r0) * 4
			}
			if moved < uint64(iters*size) {
				t.Errorf("Switch1's links to Switch2 moved %d bytes (out %d, in %d), want %d at least", moved, (x1-x0)*4, (r1-r0)*4, iters*size)
			}
			t.Logf("client:\n%s", cout)
		})
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
