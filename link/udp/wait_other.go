//go:build !linux

package udp

import "time"

// waitState is empty where PollWait cannot wait.
type waitState struct{}

func (l *Link) initWait()  {}
func (l *Link) stopWait()  {}
func (l *Link) closeWait() {}

// PollWait reports that it cannot wait here (link.Waiter): only Linux's
// receive path can be shared.
func (l *Link) PollWait(time.Duration, func() bool) (int, bool) { return 0, false }

// Wake does nothing here (link.Waiter).
func (l *Link) Wake() {}
