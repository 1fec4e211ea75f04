//go:build linux

package peer

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the peer's network namespace,
// then returns the thread to its own namespace. Sockets fn creates stay in
// the peer's namespace for their whole life, so fn can open a softrdma
// device on the host addresses or dial the guest. fn must not start
// goroutines that create sockets: they run on other threads.
func (p *Peer) Do(fn func() error) error {
	return InNamespace(p.cfg.Namespace, fn)
}

// InNamespace runs fn on an OS thread inside the named network namespace
// (/run/netns/NAME).
func InNamespace(name string, fn func() error) error {
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime ends it with the goroutine,
		// so no other goroutine runs in the wrong namespace.
		return fmt.Errorf("setns back from %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// onPinnedThread runs start, then wait, on one locked OS thread that lives
// until wait returns. A child started with Pdeathsig is signalled when the
// thread that started it ends, not the process, and the Go runtime ends
// any thread a goroutine leaves locked (InNamespace and link/udp's
// namespace switch do, when they cannot switch back): started from an
// ordinary goroutine, QEMU was killed in the middle of the suite when its
// parent thread was later reused that way. start's error is returned; wait
// runs only if start succeeded.
func onPinnedThread(start func() error, wait func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Returning locked ends the thread; by then the child has exited.
		if err := start(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		wait()
	}()
	return <-errc
}
