package udp

import (
	"net"
	"net/netip"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSourcePortNetns opens a link and a receiver on a thread moved into a
// network namespace of its own, then sends from the test's goroutine,
// outside it: the source-port socket must be opened in the link's
// namespace (127.0.0.1 there is another host's loopback). It needs
// CAP_SYS_ADMIN (unshare) and is skipped without it.
func TestSourcePortNetns(t *testing.T) {
	type opened struct {
		l   *Link
		r   *net.UDPConn
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		// The goroutine's thread enters the namespace and is never
		// unlocked: it ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- opened{err: err}
			return
		}
		lo, err := net.InterfaceByName("lo")
		if err == nil {
			// Bring lo up with netlink-free means: a socket ioctl.
			err = setUp(lo.Name)
		}
		if err != nil {
			ch <- opened{err: err}
			return
		}
		l, err := Open(Config{Addrs: []netip.Addr{lo1}})
		if err != nil {
			ch <- opened{err: err}
			return
		}
		r, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo1, 0)))
		ch <- opened{l, r, err}
	}()
	o := <-ch
	if o.err != nil {
		t.Skipf("no network namespace: %v", o.err)
	}
	defer o.l.Close()
	defer o.r.Close()
	p := uint16(0xF123)
	if got := sendFrom(t, o.l, lo1, p, o.r); got != p {
		t.Fatalf("sent from port %#x, want %#x (fallbacks %d)", got, p, o.l.Stats().TxSourcePortFallback)
	}
}

// setUp sets the IFF_UP flag of the named interface.
func setUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
