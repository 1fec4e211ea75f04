//go:build !linux

// Socket setup where the Linux options are not available: a plain UDP socket
// with best-effort buffer sizes. IPv4 packets then leave with whatever IP
// Identification the system picks, so strict peers may reject their ICRC.

package udp

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
)

// listenUDP binds a plain UDP socket at ap.
func listenUDP(network string, ap netip.AddrPort, _ bool, buf int, log *slog.Logger) (*net.UDPConn, error) {
	pc, err := new(net.ListenConfig).ListenPacket(context.Background(), network, ap.String())
	if err != nil {
		return nil, err
	}
	c := pc.(*net.UDPConn)
	if buf > 0 {
		if err := c.SetReadBuffer(buf); err != nil {
			log.Warn("udp: cannot set receive buffer", "bytes", buf, "err", err)
		}
		if err := c.SetWriteBuffer(buf); err != nil {
			log.Warn("udp: cannot set send buffer", "bytes", buf, "err", err)
		}
	}
	return c, nil
}

// listenSourceUDP binds a send-only socket at ap for a source port.
func listenSourceUDP(network string, ap netip.AddrPort, is4 bool, buf int, log *slog.Logger) (sockConn, error) {
	c, err := listenUDP(network, ap, is4, 0, log)
	if err != nil {
		return nil, err
	}
	if buf > 0 {
		_ = c.SetWriteBuffer(buf)
	}
	_ = c.SetReadBuffer(sourceRcvBuf)
	return c, nil
}
