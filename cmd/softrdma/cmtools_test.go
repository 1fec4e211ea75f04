package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
)

// freeUDPPort returns a port free on both loopback addresses the tests use.
func freeUDPPort(t *testing.T) string {
	t.Helper()
	for i := 0; i < 20; i++ {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Skip(err)
		}
		p := c.LocalAddr().(*net.UDPAddr).Port
		c.Close()
		if c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2"), Port: p}); err == nil {
			c2.Close()
			return fmt.Sprint(p)
		}
	}
	t.Skip("no free UDP port on 127.0.0.1 and 127.0.0.2")
	return ""
}

// runPair runs a server and then a client of one tool and returns both outputs.
func runPair(t *testing.T, run func(context.Context, []string, *bytes.Buffer) error, server, client []string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, server, &sout) }()
	time.Sleep(200 * time.Millisecond) // let the server listen
	if err := run(ctx, client, &cout); err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	return sout.String(), cout.String()
}

func TestPingTool(t *testing.T) {
	port := freeUDPPort(t)
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runPing(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-s", "-a", "127.0.0.2", "-v", "-p", "7174", "-S", "2000", "-roce-port", port},
		[]string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "-C", "3", "-vV", "-S", "2000", "-roce-port", port})
	if strings.Count(c, "ping data: rdma-ping-") != 3 || !strings.Contains(c, "ping data: rdma-ping-2: CDEF") {
		t.Fatalf("client output:\n%s", c)
	}
	if strings.Count(s, "server ping data: rdma-ping-") != 3 {
		t.Fatalf("server output:\n%s", s)
	}
}

func TestCmatoseTool(t *testing.T) {
	port := freeUDPPort(t)
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runCmatose(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-b", "127.0.0.2", "-c", "3", "-C", "20", "-roce-port", port},
		[]string{"-s", "127.0.0.2", "-b", "127.0.0.1", "-c", "3", "-C", "20", "-roce-port", port})
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("output:\n%s", out)
		}
	}
	if !strings.Contains(s, "disconnected") {
		t.Fatalf("server output:\n%s", s)
	}
}

func TestUdaddyTool(t *testing.T) {
	port := freeUDPPort(t)
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runUdaddy(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-b", "127.0.0.2", "-c", "2", "-roce-port", port},
		[]string{"-s", "127.0.0.2", "-b", "127.0.0.1", "-c", "2", "-roce-port", port})
	for _, out := range []string{s, c} {
		if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
			t.Fatalf("output:\n%s", out)
		}
	}
}

func TestSplitShortFlags(t *testing.T) {
	got := strings.Join(splitShortFlags([]string{"-vV", "-a", "x", "-vq", "-C", "3"}, "vV"), " ")
	if got != "-v -V -a x -vq -C 3" {
		t.Fatalf("got %q", got)
	}
}

// TestCMToolsSharedFlags runs the rdma_cm tools with the flags every tool
// shares: --bind places the device (the client's without -I or -b), and
// --pcap captures the connection, CM MADs included.
func TestCMToolsSharedFlags(t *testing.T) {
	port := freeUDPPort(t)
	dir := t.TempDir()
	spcap, cpcap := dir+"/server.pcap", dir+"/client.pcap"
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runPing(ctx, args, out) }
	runPair(t, run,
		[]string{"-s", "--bind", "127.0.0.2", "-p", "7175", "-roce-port", port, "--pcap", spcap},
		[]string{"-c", "-a", "127.0.0.2", "-p", "7175", "-C", "2", "--bind", "127.0.0.1", "-roce-port", port, "--pcap", cpcap})
	for _, f := range []string{spcap, cpcap} {
		var out bytes.Buffer
		if err := runDump(context.Background(), []string{"-port", port, f}, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "mad[CM Send REQ ") || !strings.Contains(out.String(), "RDMA_READ_REQUEST") {
			t.Errorf("%s holds no CM request or READ:\n%s", f, out.String())
		}
	}
	// A server address that is not among --bind's is a usage error.
	err := runPing(context.Background(), []string{"-s", "-a", "127.0.0.1", "--bind", "127.0.0.2", "-roce-port", port}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "is not one of the device's") {
		t.Errorf("ping -s -a 127.0.0.1 --bind 127.0.0.2: %v", err)
	}
	// cmatose and udaddy take -d too (rping's -d is debug output).
	for _, name := range []string{"cmatose", "udaddy"} {
		var out bytes.Buffer
		err := commands[name].run(context.Background(), []string{"-d", "no-such-interface0"}, &out)
		if err == nil || !strings.Contains(out.String()+err.Error(), `no network interface "no-such-interface0"`) {
			t.Errorf("%s -d no-such-interface0: %v\n%s", name, err, out.String())
		}
	}
}

// TestPingPersistent runs rping -P: the server serves two clients at once
// and a third after them, on one listener, and keeps running until it is
// interrupted.
func TestPingPersistent(t *testing.T) {
	port := freeUDPPort(t)
	if c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.3")}); err != nil {
		t.Skip(err)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	var sout lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- runPing(sctx, []string{"-s", "-P", "-a", "127.0.0.2", "-v", "-p", "7176", "-roce-port", port}, &sout)
	}()
	time.Sleep(200 * time.Millisecond)
	client := func(src string, n int) error {
		var out bytes.Buffer
		err := runPing(ctx, []string{"-c", "-a", "127.0.0.2", "-I", src, "-p", "7176", "-C", fmt.Sprint(n), "-vV", "-roce-port", port}, &out)
		if err == nil && strings.Count(out.String(), "ping data: rdma-ping-") != n {
			err = fmt.Errorf("%d pings expected:\n%s", n, out.String())
		}
		return err
	}
	both := make(chan error, 2)
	go func() { both <- client("127.0.0.1", 20) }()
	go func() { both <- client("127.0.0.3", 20) }()
	for range 2 {
		if err := <-both; err != nil {
			t.Fatalf("concurrent client: %v", err)
		}
	}
	if err := client("127.0.0.1", 3); err != nil {
		t.Fatalf("third client: %v", err)
	}
	select {
	case err := <-errc:
		t.Fatalf("the persistent server ended after its clients: %v\n%s", err, sout.String())
	case <-time.After(100 * time.Millisecond):
	}
	stop()
	if err := <-errc; err != context.Canceled {
		t.Errorf("interrupted server: %v, want context.Canceled", err)
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-"); n != 43 {
		t.Errorf("server printed %d pings, want 43:\n%s", n, sout.String())
	}
	// -P is for the server.
	if err := runPing(ctx, []string{"-c", "-P", "-a", "127.0.0.2"}, &bytes.Buffer{}); err == nil {
		t.Error("client with -P accepted")
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMckeyTool runs mckey's receiver with two QPs joined to the group
// and its sender over UDP on 127.0.0.1-2: each receiving QP gets all the
// sender's messages, and the sender's capture shows them going to the
// group.
func TestMckeyTool(t *testing.T) {
	port := freeUDPPort(t)
	pcap := t.TempDir() + "/sender.pcap"
	run := func(ctx context.Context, args []string, out *bytes.Buffer) error { return runMckey(ctx, args, out) }
	s, c := runPair(t, run,
		[]string{"-m", "239.255.11.12", "-b", "127.0.0.2", "-c", "2", "-C", "5", "-S", "64", "-delay", "300ms", "-timeout", "20s", "-roce-port", port},
		[]string{"-m", "239.255.11.12", "-s", "-b", "127.0.0.1", "-C", "5", "-S", "64", "-delay", "500ms", "-roce-port", port, "--pcap", pcap})
	for _, want := range []string{"mckey: starting server\n", "mckey: joining\n", "receiving data transfers\n",
		"data transfers complete\n", "test complete\n", "return status 0\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("receiver output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "mckey: joined dgid: ::ffff:239.255.11.12 mlid 0x0 sl 0\n") != 2 {
		t.Errorf("receiver output:\n%s", s)
	}
	for _, want := range []string{"mckey: starting client\n", "initiating data transfers\n", "data transfers complete\n", "return status 0\n"} {
		if !strings.Contains(c, want) {
			t.Errorf("sender output lacks %q:\n%s", want, c)
		}
	}
	var out bytes.Buffer
	if err := runDump(context.Background(), []string{"-port", port, pcap}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "239.255.11.12"); n < 5 {
		t.Errorf("the sender's capture shows %d packets to the group, want 5:\n%s", n, out.String())
	}

	// Usage errors: no group, a unicast group, -M without -b.
	for _, args := range [][]string{{}, {"-M", "ff0e::1"}, {"-p", "0x106"}} {
		err := runMckey(context.Background(), args, &bytes.Buffer{})
		if err == nil || !errors.Is(err, tool.ErrUsage) {
			t.Errorf("mckey %v: %v, want a usage error", args, err)
		}
	}
	var o bytes.Buffer
	if err := runMckey(context.Background(), []string{"-m", "127.0.0.5", "-b", "127.0.0.1", "-roce-port", port}, &o); err == nil ||
		!strings.Contains(o.String(), "not a multicast address") {
		t.Errorf("mckey -m 127.0.0.5: %v\n%s", err, o.String())
	}
}
