//go:build !linux

package udp

// netns is the network namespace a link was opened in; only Linux has
// them.
type netns struct{}

func currentNetns() *netns { return nil }

func (ns *netns) close() {}

func nsIn[C sockConn](_ *netns, open func() (C, error)) (C, error) { return open() }
