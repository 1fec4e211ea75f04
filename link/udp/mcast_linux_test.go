package udp

import (
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/linktest"
	"golang.org/x/sys/unix"
)

// triple opens links on addrs (three) sharing one ephemeral port.
func triple(t *testing.T, addrs [3]netip.Addr) (a, b, c link.Link) {
	t.Helper()
	for range 5 {
		l0 := open(t, Config{Addrs: addrs[:1]})
		var ls []link.Link
		for _, ad := range addrs[1:] {
			l, err := Open(Config{Addrs: []netip.Addr{ad}, Port: l0.Port()})
			if err != nil {
				break
			}
			t.Cleanup(func() { l.Close() })
			ls = append(ls, l)
		}
		if len(ls) == 2 {
			return l0, ls[0], ls[1]
		}
		for _, l := range ls {
			l.Close()
		}
		l0.Close()
	}
	t.Fatalf("no ephemeral port free on %v", addrs)
	return nil, nil, nil
}

// TestMulticastIPv4 runs the multicast suite over the host's loopback
// interface: groups joined on lo by address, sent with IP_MULTICAST_IF.
func TestMulticastIPv4(t *testing.T) {
	lo3 := netip.MustParseAddr("127.0.0.3")
	linktest.RunMulticast(t, netip.MustParseAddr("239.255.42.1"), func(t *testing.T) (a, b, c link.Link) {
		return triple(t, [3]netip.Addr{lo1, lo2, lo3})
	})
}

// TestMulticastNetns runs the multicast suite, IPv4 and IPv6, on a dummy
// interface of a network namespace of its own (IPv6 multicast needs an
// interface with addresses of its own; lo has only ::1). It needs
// CAP_SYS_ADMIN (unshare) and ip(8), and is skipped without them.
func TestMulticastNetns(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	runtime.LockOSThread() // never unlocked: the thread ends with the test
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Skipf("unshare(CLONE_NEWNET): %v", err)
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if out, err := exec.Command("ip", "link", "add", "m0", "type", "dummy").CombinedOutput(); err != nil {
		if out2, err2 := exec.Command("ip", "link", "add", "m0", "type", "veth", "peer", "name", "m1").CombinedOutput(); err2 != nil {
			t.Skipf("no dummy or veth interface: %v: %s; %v: %s", err, out, err2, out2)
		}
		ip("link", "set", "m1", "up")
	}
	ip("link", "set", "m0", "multicast", "on", "up")
	v4 := [3]netip.Addr{}
	v6 := [3]netip.Addr{}
	for i := range 3 {
		v4[i] = netip.MustParseAddr(fmt.Sprintf("10.79.0.%d", i+1))
		v6[i] = netip.MustParseAddr(fmt.Sprintf("fd79::%d", i+1))
		ip("addr", "add", v4[i].String()+"/24", "dev", "m0")
		ip("addr", "add", v6[i].String()+"/64", "dev", "m0", "nodad")
	}
	ns := currentNetns()
	if ns == nil {
		t.Skip("cannot open the namespace")
	}
	t.Cleanup(ns.close)
	// The subtests run on goroutines of their own, outside the namespace:
	// they open their links on a thread moved into it.
	mk := func(addrs [3]netip.Addr) func(t *testing.T) (a, b, c link.Link) {
		return func(t *testing.T) (a, b, c link.Link) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
				if err := unix.Setns(int(ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
					t.Errorf("setns: %v", err)
					return
				}
				a, b, c = triple(t, addrs)
			}()
			<-done
			if a == nil {
				t.FailNow()
			}
			return a, b, c
		}
	}
	for _, c := range []struct {
		name  string
		group netip.Addr
		addrs [3]netip.Addr
	}{
		{"IPv4", netip.MustParseAddr("239.1.1.7"), v4},
		{"IPv6", netip.MustParseAddr("ff0e::4791:1"), v6},
		{"IPv6LinkLocalScope", netip.MustParseAddr("ff02::4791:2"), v6},
	} {
		t.Run(c.name, func(t *testing.T) { linktest.RunMulticast(t, c.group, mk(c.addrs)) })
	}
}
