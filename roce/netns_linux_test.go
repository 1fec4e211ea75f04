package roce

import (
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"golang.org/x/sys/unix"
)

// TestPortFollowsInterface opens a device with OpenInterface on the loopback
// interface of a network namespace of its own and takes the interface down
// and up with ip(8): the port follows, with verbs.EventPortErr and
// verbs.EventPortActive. It needs CAP_SYS_ADMIN (unshare) and ip; without them it
// is skipped.
func TestPortFollowsInterface(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	// The subtest's goroutine locks its thread, which enters the namespace
	// and is never unlocked: it ends with the goroutine, and the namespace
	// with it.
	t.Run("netns", func(t *testing.T) {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Skipf("unshare(CLONE_NEWNET): %v", err)
		}
		ip := func(args ...string) {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
		ip("link", "set", "lo", "up")
		d, err := OpenInterface("lo", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		state := func() verbs.PortState {
			pa, err := d.QueryPort(1)
			if err != nil {
				t.Fatal(err)
			}
			return pa.State
		}
		if s := state(); s != verbs.PortActive {
			t.Fatalf("port %v at open, want ACTIVE", s)
		}
		ip("link", "set", "lo", "down")
		if ev := expectEvent(t, d, verbs.EventPortErr); ev.Port != 1 {
			t.Fatalf("event %+v", ev)
		}
		if s := state(); s != verbs.PortDown {
			t.Fatalf("port %v with lo down, want DOWN", s)
		}
		ip("link", "set", "lo", "up")
		expectEvent(t, d, verbs.EventPortActive)
		if s := state(); s != verbs.PortActive {
			t.Fatalf("port %v with lo up again, want ACTIVE", s)
		}
		select {
		case ev := <-d.Events():
			t.Fatalf("unexpected event %v", ev.Type)
		case <-time.After(50 * time.Millisecond):
		}
	})
}

// expectEvent waits for d's next async event and checks its type.
func expectEvent(t testing.TB, d *verbs.Device, typ verbs.EventType) verbs.AsyncEvent {
	t.Helper()
	select {
	case ev := <-d.Events():
		if ev.Type != typ {
			t.Fatalf("async event %v, want %v", ev.Type, typ)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no async event, want %v", typ)
	}
	return verbs.AsyncEvent{}
}

// TestNodeGUIDFromInterface opens devices on an interface of a network
// namespace of its own whose MAC address it sets: the node GUID is the
// address's modified EUI-64, as Linux rxe's, whether the device is opened by
// interface or by address. It needs CAP_SYS_ADMIN (unshare), ip, and dummy
// or veth interfaces; without them it is skipped.
func TestNodeGUIDFromInterface(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	t.Run("netns", func(t *testing.T) {
		runtime.LockOSThread() // never unlocked: see TestPortFollowsInterface
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Skipf("unshare(CLONE_NEWNET): %v", err)
		}
		ip := func(args ...string) error {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
			return nil
		}
		if err := ip("link", "add", "g0", "type", "dummy"); err != nil {
			if err2 := ip("link", "add", "g0", "type", "veth", "peer", "name", "g1"); err2 != nil {
				t.Skipf("no dummy or veth interface: %v; %v", err, err2)
			}
		}
		for _, args := range [][]string{
			{"link", "set", "g0", "address", "02:42:ac:11:00:02"},
			{"addr", "add", "10.77.0.1/24", "dev", "g0"},
			{"link", "set", "g0", "up"},
		} {
			if err := ip(args...); err != nil {
				t.Fatal(err)
			}
		}
		const want = 0x0042acfffe110002
		d, err := OpenInterface("g0", &Options{Port: 14799})
		if err != nil {
			t.Fatal(err)
		}
		got := d.QueryDevice()
		d.Close()
		if got.NodeGUID != want || got.SysImageGUID != want {
			t.Errorf("OpenInterface: node GUID %#x, system image GUID %#x, want %#x", got.NodeGUID, got.SysImageGUID, want)
		}
		d, err = Open([]netip.Addr{netip.MustParseAddr("10.77.0.1")}, &Options{Port: 14799})
		if err != nil {
			t.Fatal(err)
		}
		got = d.QueryDevice()
		d.Close()
		if got.NodeGUID != want {
			t.Errorf("Open: node GUID %#x, want %#x", got.NodeGUID, want)
		}
	})
}
