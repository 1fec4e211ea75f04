package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/pcap"
)

func TestDevinfoBind(t *testing.T) {
	var out bytes.Buffer
	if err := runDevinfo(context.Background(), []string{"--bind", "127.0.0.1,::1", "-v"}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"hca_id:\tsoftrdma0\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tmax_qp:\t\t\t\t65536\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tgid_tbl_len:\t\t2\n",
		"\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n",
		"\t\t\tGID[  1]:\t\t::1, RoCE v2\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`node_guid:\t\t\t[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}\n`).MatchString(s) {
		t.Errorf("no node_guid line:\n%s", s)
	}
}

func TestDevinfoErrors(t *testing.T) {
	for _, args := range [][]string{{"-d", "no-such-if0"}, {"-i", "2", "--bind", "127.0.0.1"}, {"--bind", "nonsense"}, {"extra"}} {
		var out bytes.Buffer
		if err := runDevinfo(context.Background(), args, &out); err == nil {
			t.Errorf("devinfo %q succeeded", args)
		}
	}
}

func TestDevinfoList(t *testing.T) {
	var out bytes.Buffer
	if err := runDevinfo(context.Background(), []string{"-l", "-d", "lo"}, &out); err != nil {
		t.Skipf("no lo interface: %v", err)
	}
	if out.String() != "1 HCA found:\n\tsoftrdma_lo\n" {
		t.Errorf("devinfo -l -d lo = %q", out.String())
	}
}

func TestDumpCaptures(t *testing.T) {
	paths, _ := filepath.Glob("../../wire/testdata/captures/*.pcap")
	if len(paths) == 0 {
		t.Fatal("no captures")
	}
	summary := regexp.MustCompile(`^(\d+) frames: (\d+) RoCEv2 \(0 with a bad ICRC\), 0 malformed, (\d+) other$`)
	for _, p := range paths {
		var out bytes.Buffer
		if err := runDump(context.Background(), []string{p}, &out); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		m := summary.FindStringSubmatch(lines[len(lines)-1])
		if m == nil {
			t.Fatalf("%s: summary %q", p, lines[len(lines)-1])
		}
		if m[2] != itoa(len(lines)-1) || m[2] == "0" {
			t.Errorf("%s: %d packet lines, summary says %s", p, len(lines)-1, m[2])
		}
	}
	// The same capture read on the wrong port points to the right one.
	var out bytes.Buffer
	if err := runDump(context.Background(), []string{"-port", "4790", paths[0]}, &out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\d+ frames to UDP port 4791 are RoCEv2 \(their ICRCs check\): run with -port 4791 to decode them$`).Match(out.Bytes()) {
		t.Errorf("dump -port 4790 gives no hint:\n%s", out.String())
	}
	// A capture with no RoCEv2 at all says so.
	noRoCE := filepath.Join(t.TempDir(), "dns.pcap")
	pw, err := pcap.Create(noRoCE)
	if err != nil {
		t.Fatal(err)
	}
	pw.WritePacket(netip.MustParseAddrPort("192.0.2.1:5353"), netip.MustParseAddrPort("192.0.2.2:53"), []byte("not a BTH, not a BTH, not a BTH"))
	pw.Close()
	out.Reset()
	if err := runDump(context.Background(), []string{noRoCE}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 frames: 0 RoCEv2 (0 with a bad ICRC), 0 malformed, 1 other\nnothing was RoCEv2 on UDP port 4791; ") {
		t.Errorf("dump of a capture without RoCE:\n%s", out.String())
	}
	out.Reset()
	if err := runDump(context.Background(), []string{"/nonexistent.pcap"}, &out); err == nil {
		t.Error("dump of a missing file succeeded")
	}
	if err := runDump(context.Background(), []string{"dump.go"}, &out); err == nil || !strings.Contains(err.Error(), "neither pcap nor pcapng") {
		t.Errorf("dump of a Go file: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The command end to end: flags as the C tools take them (the host may come
// before the flags), devices from --bind, the TCP exchange, -c.
func TestPingpongCommand(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sout bytes.Buffer
	errc := make(chan error)
	go func() {
		errc <- runPingpong(ctx, []string{"--type", "uc", "--bind", "127.0.0.1", "--roce-port", roce, "-p", tcp, "-n", "20", "-r", "10", "-s", "3000", "-c", "--timeout", "10s"}, &sout)
	}()
	var cout bytes.Buffer
	var cerr error
	for try := 0; try < 50; try++ { // until the server listens
		cout.Reset()
		cerr = runPingpong(ctx, []string{"127.0.0.1", "--type", "uc", "--bind", "127.0.0.2", "--roce-port", roce, "--port", tcp, "--iters", "20", "--rx-depth", "10", "--size", "3000", "--chk", "--timeout", "10s"}, &cout)
		if cerr == nil || !strings.Contains(cerr.Error(), "connection refused") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	serr := <-errc
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout.String(), serr, sout.String())
	}
	for _, out := range []string{sout.String(), cout.String()} {
		if !strings.Contains(out, "120000 bytes in ") || !strings.Contains(out, "20 iters in ") {
			t.Errorf("output:\n%s", out)
		}
	}
	if !strings.Contains(cout.String(), "GID ::ffff:127.0.0.2\n") || !strings.Contains(sout.String(), "GID ::ffff:127.0.0.1\n") {
		t.Errorf("GIDs:\n%s\n%s", sout.String(), cout.String())
	}
	for _, args := range [][]string{{"--type", "xx"}, {"a", "b"}, {"-t"}, {"--type", "ud", "-o"}} {
		if err := runPingpong(ctx, args, &cout); err == nil {
			t.Errorf("pingpong %q succeeded", args)
		}
	}
}
