// Socket options set on Linux before bind: buffer sizes, path MTU discovery
// "do" (IPv4 packets leave with Don't Fragment and Identification 0, which the
// ICRC covers) and, on IPv6, acceptance of a zero UDP checksum.

package udp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// withFD runs f on c's descriptor, which stays open meanwhile, and returns
// f's error, or the one met getting at the descriptor.
func withFD(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// listenUDP binds a UDP socket at ap with the options RoCEv2 needs.
func listenUDP(network string, ap netip.AddrPort, is4 bool, buf int, log *slog.Logger) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = setOptions(int(fd), is4, buf, log) })
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, ap.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

func setOptions(fd int, is4 bool, buf int, log *slog.Logger) error {
	if buf > 0 {
		setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, buf, log)
		setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, buf, log)
	}
	if is4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("setsockopt IP_MTU_DISCOVER: %w", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
		return fmt.Errorf("setsockopt IPV6_MTU_DISCOVER: %w", err)
	}
	// Linux rxe sends IPv6 UDP checksum 0; without this the kernel drops it.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
		return fmt.Errorf("setsockopt UDP_NO_CHECK6_RX: %w", err)
	}
	return nil
}

// setBuffer asks for a socket buffer of size bytes, beyond the sysctl limit
// if the process may (force), else up to it. Failures are only logged.
func setBuffer(fd, force, plain, size int, log *slog.Logger) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size); err != nil {
		log.Warn("udp: cannot set socket buffer", "option", plain, "bytes", size, "err", err)
	}
}

// listenSourceUDP binds a send-only socket at ap for a source port: the
// options of listenUDP, a send buffer of buf bytes and a small receive
// buffer (nothing reads it).
//
// The socket is not a net.UDPConn but a file the runtime's network poller
// does not know. A socket in the poller's epoll set has the poller's entry
// on its wait queue, and the kernel calls it each time a datagram the socket
// sent is freed, to report room to write: on loopback, within the send
// call. A ping-pong of segmented datagrams (udpfloor -connect, pinned pair)
// ran 0.2-0.25 us a round trip slower with its sending sockets in an epoll
// set that nothing waited on, and its receiving sockets' membership cost
// nothing measurable. Nothing waits on a source socket but a send that finds
// its buffer full, which waits in poll(2) instead (sysScratch.write). The
// descriptor is left in blocking mode, which keeps os.NewFile from adding it
// to the poller; every call made on it is non-blocking by its flags.
func listenSourceUDP(network string, ap netip.AddrPort, is4 bool, buf int, log *slog.Logger) (sockConn, error) {
	family := unix.AF_INET6
	if is4 {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := sourceOptions(fd, ap, is4, buf, log); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s %s: %w", network, ap, err)
	}
	return os.NewFile(uintptr(fd), network+" "+ap.String()), nil
}

// sourceOptions sets up and binds a source socket's descriptor: what
// listenUDP's sockets have, with the net package's defaults for UDP
// (broadcast allowed on IPv4, IPv6 only on IPv6).
func sourceOptions(fd int, ap netip.AddrPort, is4 bool, buf int, log *slog.Logger) error {
	if err := setOptions(fd, is4, 0, log); err != nil {
		return err
	}
	if buf > 0 {
		setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, buf, log)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, sourceRcvBuf)
	var sa unix.Sockaddr
	if is4 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
		sa6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		if z := ap.Addr().Zone(); z != "" {
			idx, err := zoneIndex(z)
			if err != nil {
				return err
			}
			sa6.ZoneId = idx
		}
		sa = sa6
	}
	if err := unix.Bind(fd, sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}
