//go:build !linux

package udp

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
)

// multicastSend leaves the system's multicast defaults.
func multicastSend(syscall.Conn, netip.Addr, int, *slog.Logger) {}

// listenGroup is not implemented outside Linux.
func listenGroup(netip.AddrPort, netip.Addr, int, int, *slog.Logger) (*net.UDPConn, error) {
	return nil, errors.ErrUnsupported
}
