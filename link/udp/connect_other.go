//go:build !linux

package udp

import "net/netip"

// Elsewhere than Linux sockets stay unconnected (connect.go).

func connectSocket(*socket, netip.AddrPort) error { return errNoReadBack }

func disconnectSocket(*socket) error { return nil }

var readBackID = func(*socket) (uint16, error) { return 0, errNoReadBack }

var readBackIDGSO = readBackID
