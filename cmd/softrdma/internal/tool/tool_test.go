package tool

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// freePort returns a UDP port free on 127.0.0.1 when asked.
func freePort(t *testing.T) uint {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint(c.LocalAddr().(*net.UDPAddr).Port)
}

func parse(t *testing.T, args ...string) *Flags {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f
}

func TestFlagAliases(t *testing.T) {
	f := parse(t, "--ib-dev", "lo", "-i", "1", "--gid-idx", "2", "--pcap", "x.pcap", "--bind", "127.0.0.1,::1")
	if f.Dev != "lo" || f.IBPort != 1 || f.GIDIdx != 2 || f.Pcap != "x.pcap" || f.Bind != "127.0.0.1,::1" || f.RoCEPort != 4791 {
		t.Errorf("flags %+v", f)
	}
	f = parse(t, "-d", "softrdma_lo", "-g", "0")
	if f.Dev != "softrdma_lo" || f.GIDIdx != 0 {
		t.Errorf("flags %+v", f)
	}
}

func TestOpenBindAndPcap(t *testing.T) {
	port := freePort(t)
	pc := filepath.Join(t.TempDir(), "x.pcap")
	f := parse(t, "--bind", "127.0.0.1", "--roce-port", itoa(port), "--pcap", pc)
	d, err := f.Open(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.GIDIndex != 0 || d.GID.Addr() != netip.MustParseAddr("127.0.0.1") || d.Pcap == nil || d.Name() != "softrdma0" {
		t.Errorf("device %s GID %d %v pcap %v", d.Name(), d.GIDIndex, d.GID, d.Pcap)
	}
	// The same address and port again: taken.
	_, err = f.Open(context.Background(), "", nil)
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("second open: %v, want a port-in-use error", err)
	}
}

func TestOpenPeerLoopback(t *testing.T) {
	port := freePort(t)
	f := parse(t, "--roce-port", itoa(port))
	d, err := f.Open(context.Background(), "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A loopback peer binds only the address routing to it.
	if gids := d.GIDs(); len(gids) != 1 || gids[0].Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("GIDs %v", gids)
	}
}

func TestOpenErrors(t *testing.T) {
	port := itoa(freePort(t))
	for _, c := range []struct {
		args []string
		peer string
		want string
		is   error
	}{
		{[]string{"-i", "2", "--bind", "127.0.0.1"}, "", "port 2", ErrUsage},
		{[]string{"-g", "5", "--bind", "127.0.0.1", "--roce-port", port}, "", "GID index 5", ErrUsage},
		{[]string{"--bind", "127.0.0.1,bogus"}, "", "--bind", ErrUsage},
		{[]string{"--roce-port", "70000", "--bind", "127.0.0.1"}, "", "--roce-port", ErrUsage},
		{[]string{"-d", "no-such-if0"}, "", "no network interface", nil},
		{[]string{"--roce-port", port}, "no-such-host.invalid", "cannot resolve", nil},
	} {
		f := parse(t, c.args...)
		d, err := f.Open(context.Background(), c.peer, nil)
		if err == nil {
			d.Close()
			t.Errorf("%v: opened", c.args)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func itoa(n uint) string { return strconv.FormatUint(uint64(n), 10) }

func TestParseHCA(t *testing.T) {
	for _, c := range []struct {
		in   string
		node string
		port int
		ok   bool
	}{
		{"Hca1", "Hca1", 1, true},
		{"Hca1:2", "Hca1", 2, true},
		{"0x0002c90000000001", "0x0002c90000000001", 1, true},
		{"node:with:colons:3", "node:with:colons", 3, true},
		{"", "", 0, false},
		{":1", "", 0, false},
		{"Hca1:", "", 0, false},
		{"Hca1:x", "", 0, false},
		{"Hca1:0", "", 0, false},
		{"Hca1:255", "", 0, false},
	} {
		node, port, err := ParseHCA(c.in)
		if c.ok != (err == nil) || node != c.node || port != c.port {
			t.Errorf("ParseHCA(%q) = %q, %d, %v", c.in, node, port, err)
		}
		if err != nil && !errors.Is(err, ErrUsage) {
			t.Errorf("ParseHCA(%q): %v does not wrap ErrUsage", c.in, err)
		}
	}
}
