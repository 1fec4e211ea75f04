// Following a network interface's state on Linux: a NETLINK_ROUTE socket
// subscribed to RTNLGRP_LINK reports every change of the interface's flags.

package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ifWatch is a netlink subscription to one interface's link messages.
type ifWatch struct {
	f     *os.File
	index int32
}

// watchInterface subscribes to the named interface's state and returns it
// and whether the interface is up and running now.
func watchInterface(name string) (*ifWatch, bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, false, fmt.Errorf("udp: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_LINK}); err != nil {
		unix.Close(fd)
		return nil, false, fmt.Errorf("udp: netlink bind: %w", err)
	}
	// Subscribed first, then read: a change in between is not missed.
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		unix.Close(fd)
		return nil, false, fmt.Errorf("udp: interface %q: %w", name, err)
	}
	// A non-blocking descriptor: os.File reads it through the poller.
	w := &ifWatch{f: os.NewFile(uintptr(fd), "netlink"), index: int32(ifc.Index)}
	up := ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0
	return w, up, nil
}

// run reads link messages until the watch is closed, calling state with
// the interface's state whenever a message about it comes (it may repeat
// the current state). An interface deleted is down.
func (w *ifWatch) run(state func(up bool)) {
	buf := make([]byte, 1<<16)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ENOBUFS) {
				continue // messages were lost; the next one tells the state
			}
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if (m.Header.Type != unix.RTM_NEWLINK && m.Header.Type != unix.RTM_DELLINK) ||
				len(m.Data) < unix.SizeofIfInfomsg {
				continue
			}
			ifi := (*unix.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
			if ifi.Index != w.index {
				continue
			}
			up := m.Header.Type == unix.RTM_NEWLINK &&
				ifi.Flags&unix.IFF_UP != 0 && ifi.Flags&unix.IFF_RUNNING != 0
			state(up)
		}
	}
}

func (w *ifWatch) close() error { return w.f.Close() }
