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
	"syscall"

	"golang.org/x/sys/unix"
)

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
func listenSourceUDP(network string, ap netip.AddrPort, is4 bool, buf int, log *slog.Logger) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = setOptions(int(fd), is4, 0, log); serr != nil {
				return
			}
			if buf > 0 {
				setBuffer(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, buf, log)
			}
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, sourceRcvBuf)
		})
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
