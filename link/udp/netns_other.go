//go:build !linux

package udp

import "net"

// netns is the network namespace a link was opened in; only Linux has
// them.
type netns struct{}

func currentNetns() *netns { return nil }

func (ns *netns) close() {}

func (ns *netns) in(open func() (*net.UDPConn, error)) (*net.UDPConn, error) { return open() }
