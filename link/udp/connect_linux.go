// Connecting a source socket and reading its IPv4 Identification counter
// back on Linux (connect.go).

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// connectSocket connects sk to dst.
func connectSocket(sk *socket, dst netip.AddrPort) error {
	return withFD(sk.conn, func(fd int) error {
		var sa unix.Sockaddr
		if sk.is4 {
			sa = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
		} else {
			sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
		}
		if err := unix.Connect(fd, sa); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		return nil
	})
}

// disconnectSocket dissolves sk's connection (connect with AF_UNSPEC).
func disconnectSocket(sk *socket) error {
	return withFD(sk.conn, func(fd int) error {
		sa := unix.RawSockaddr{Family: unix.AF_UNSPEC}
		if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); e != 0 {
			return fmt.Errorf("connect AF_UNSPEC: %w", e)
		}
		return nil
	})
}

// readBackWait bounds the wait for a timestamp to come back. On the
// loopback path it is there when the send returns.
const readBackWait = 20 * time.Millisecond

// readBackID sends a datagram without payload from sk to its own address
// (the kernel drops it: no socket takes it) asking for a software transmit
// timestamp, and returns the IPv4 Identification the datagram had, read
// from the copy the error queue returns. (A variable: tests replace it.)
var readBackID = func(sk *socket) (uint16, error) { return readBack(sk, nil) }

// readBackIDGSO is readBackID with a datagram of two one-byte GSO segments;
// it returns the Identification of its header (its first segment's).
var readBackIDGSO = func(sk *socket) (uint16, error) { return readBack(sk, []byte{0, 0}) }

func readBack(sk *socket, payload []byte) (uint16, error) {
	var id uint16
	err := withFD(sk.conn, func(fd int) (err error) {
		id, err = readBackFD(fd, sk.local, payload)
		return err
	})
	return id, err
}

func readBackFD(fd int, self netip.AddrPort, payload []byte) (uint16, error) {
	buf := make([]byte, 256)
	oob := make([]byte, 512)
	// Whatever an earlier read-back left (it timed out) would be taken for
	// this one's.
	for {
		if _, _, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	cm := make([]byte, 0, unix.CmsgSpace(4)+gsoSpace)
	cm = append(cm, make([]byte, unix.CmsgSpace(4))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&cm[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SO_TIMESTAMPING
	h.SetLen(unix.CmsgLen(4))
	*(*uint32)(unsafe.Pointer(&cm[unix.CmsgLen(0)])) = unix.SOF_TIMESTAMPING_TX_SOFTWARE
	if len(payload) > 1 {
		cm = append(cm, putGSO(make([]byte, gsoSpace), 1)...)
	}
	// Reporting is on only while the read-back lasts (the datagram asks
	// for its timestamp in its control message).
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, unix.SOF_TIMESTAMPING_SOFTWARE); err != nil {
		return 0, fmt.Errorf("%w: SO_TIMESTAMPING: %v", errNoReadBack, err)
	}
	defer unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, 0)
	to := &unix.SockaddrInet4{Port: int(self.Port()), Addr: self.Addr().As4()}
	for {
		err := unix.Sendmsg(fd, payload, cm, to, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%w: send: %v", errNoReadBack, err)
		}
		break
	}
	deadline := time.Now().Add(readBackWait)
	for {
		n, _, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err == nil {
			if id, ok := findIPv4ID(buf[:n], self.Addr(), self.Port()); ok {
				return id, nil
			}
			continue
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return 0, fmt.Errorf("%w: %v", errNoReadBack, err)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: no timestamp came back (net.core.tstamp_allow_data?)", errNoReadBack)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// findIPv4ID finds, in the start of a datagram the error queue returned
// (its link-layer header, then its IPv4 header), the IPv4 header of a UDP
// datagram from and to addr and port, and returns its Identification.
func findIPv4ID(b []byte, addr netip.Addr, port uint16) (uint16, bool) {
	a := addr.As4()
	for o := 0; o+28 <= len(b) && o <= 64; o++ {
		ip := b[o:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+8 || ip[9] != unix.IPPROTO_UDP {
			continue
		}
		if [4]byte(ip[12:16]) != a || [4]byte(ip[16:20]) != a {
			continue
		}
		if binary.BigEndian.Uint16(ip[ihl:]) != port || binary.BigEndian.Uint16(ip[ihl+2:]) != port {
			continue
		}
		return binary.BigEndian.Uint16(ip[4:6]), true
	}
	return 0, false
}
