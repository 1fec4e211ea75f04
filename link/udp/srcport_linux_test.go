package udp

import (
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/wire"
)

// epollMembers returns the descriptors that the process's epoll instances
// watch, from /proc/self/fdinfo ("tfd:" lines).
func epollMembers(t *testing.T) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	watched := map[int]bool{}
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.Contains(target, "eventpoll") {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "tfd:" {
				if n, err := strconv.Atoi(f[1]); err == nil {
					watched[n] = true
				}
			}
		}
	}
	return watched
}

// fdOf returns the descriptor of a socket.
func fdOf(t *testing.T, sk *socket) int {
	t.Helper()
	fd := -1
	if err := withFD(sk.conn, func(f int) error { fd = f; return nil }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestSourceSocketOutsidePoller: a source-port socket is not in the
// runtime's epoll set (whose entry the kernel would call on every datagram
// the socket sends, see listenSourceUDP), while the link's own socket, which
// its reader waits on, is; packets still leave from the source port.
func TestSourceSocketOutsidePoller(t *testing.T) {
	for _, a := range []netip.Addr{lo1, lo6} {
		t.Run(a.String(), func(t *testing.T) {
			r := rawConn(t, a)
			l := open(t, Config{Addrs: []netip.Addr{a}})
			sport := freeSourcePort(t, a)
			if got := sendFrom(t, l, a, sport, r); got != sport {
				t.Fatalf("packet left from port %d, want %d", got, sport)
			}
			src := l.sports[0].Load()[sport-wire.SourcePortBase].Load()
			if src == nil || src == noSocket {
				t.Fatal("no source socket opened")
			}
			watched := epollMembers(t)
			if fd := fdOf(t, l.socks[0]); !watched[fd] {
				t.Fatalf("the link's socket (fd %d) is not in an epoll set %v: the check sees nothing", fd, watched)
			}
			if fd := fdOf(t, src); watched[fd] {
				t.Errorf("the source socket (fd %d) is in an epoll set", fd)
			}
		})
	}
}

// TestSourceSocketWaitsForRoom: a send from a socket outside the poller
// that finds the send buffer full waits in poll(2) until there is room and
// then sends, and gives up with EAGAIN once the link closes. A datagram
// socket pair stands in for the socket: a UDP socket's buffer on loopback
// never fills (loopback frees each datagram as it is sent).
func TestSourceSocketWaitsForRoom(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	msg := make([]byte, 1024)
	for { // fill the peer's queue
		if _, err := unix.SendmsgN(fds[0], msg, nil, nil, unix.MSG_DONTWAIT); err != nil {
			if err != unix.EAGAIN {
				t.Fatal(err)
			}
			break
		}
	}
	var stop atomic.Bool
	x := &sysScratch{wait: true, stop: &stop}
	if !x.fill([]ipv4.Message{{Buffers: [][]byte{msg}}}, true) {
		t.Fatal("fill")
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		time.Sleep(30 * time.Millisecond)
		buf := make([]byte, 2048)
		for {
			if _, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_DONTWAIT); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	if !x.write(uintptr(fds[0])) || x.errno != 0 || x.sent != 1 {
		t.Fatalf("write: sent %d, errno %v", x.sent, x.errno)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("write returned after %v, before the peer made room", d)
	}
	<-drained

	// Full again, and the link closing: the wait ends.
	for {
		if _, err := unix.SendmsgN(fds[0], msg, nil, nil, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	time.AfterFunc(20*time.Millisecond, func() { stop.Store(true) })
	x.sent, x.errno = 0, 0
	if !x.write(uintptr(fds[0])) || x.errno != unix.EAGAIN || x.sent != 0 {
		t.Fatalf("write on closing: sent %d, errno %v; want 0, EAGAIN", x.sent, x.errno)
	}
	x.release()
}
