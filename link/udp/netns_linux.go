// The network namespace of a link's sockets. A program may open a link on a
// thread that it has moved into another network namespace (setns, as
// network tests do) and send from any other thread later. Sockets opened
// later for source ports must be in the namespace of the link's own
// sockets, so the link remembers it and opens them there.

package udp

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns is the network namespace a link was opened in.
type netns struct {
	f   *os.File // /proc/thread-self/ns/net of the opening thread
	ino uint64
}

// currentNetns returns the calling thread's network namespace, or nil if
// it cannot be read (then sockets are opened wherever the caller is).
func currentNetns() *netns {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil
	}
	return &netns{f: f, ino: st.Ino}
}

func (ns *netns) close() {
	if ns != nil {
		ns.f.Close()
	}
}

// in runs open in the namespace ns: on a locked thread that is, or is
// moved into, it. A thread moved is never unlocked, so the runtime ends it
// when the goroutine returns.
func nsIn[C sockConn](ns *netns, open func() (C, error)) (C, error) {
	if ns == nil {
		return open()
	}
	type result struct {
		c   C
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err == nil && st.Ino == ns.ino {
			c, err := open()
			runtime.UnlockOSThread()
			ch <- result{c, err}
			return
		}
		if err := unix.Setns(int(ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
			var none C
			ch <- result{none, fmt.Errorf("entering the link's network namespace: %w", err)}
			return // the thread stays locked and ends with the goroutine
		}
		c, err := open()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
