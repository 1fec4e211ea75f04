// UDP generic segmentation offload (UDP_SEGMENT, Linux 4.18 and later): a
// run of equal-sized packets to one destination leaves as one sendmsg whose
// control message gives the segment size; the kernel (or the NIC) cuts it
// into datagrams.

package udp

import (
	"errors"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// gsoMaxSegments is the kernel's UDP_MAX_SEGMENTS (64 since GSO came).
const gsoMaxSegments = 64

// probeGSO reports whether the socket takes UDP_SEGMENT.
func probeGSO(c syscall.Conn) bool {
	return withFD(c, func(fd int) error {
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		return err
	}) == nil
}

// gsoSpace is the room a UDP_SEGMENT control message takes.
var gsoSpace = unix.CmsgSpace(2)

// putGSO writes a UDP_SEGMENT control message for segments of size bytes
// into b, which has gsoSpace bytes, and returns it.
func putGSO(b []byte, size int) []byte {
	b = b[:gsoSpace]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = uint16(size)
	return b
}

// gsoRefused reports whether a send failed because segmentation is not
// available on the path (EIO: the device cannot checksum the segments),
// so the socket should stop using it.
func gsoRefused(err error) bool {
	return errors.Is(err, syscall.EIO)
}

// tosSpace is the room an IP_TOS or IPV6_TCLASS control message takes.
var tosSpace = unix.CmsgSpace(4)

// putTOS writes the control message that sends a datagram with traffic
// class tc (IP_TOS on an IPv4 socket, IPV6_TCLASS on an IPv6 one) into b,
// which has tosSpace bytes, and returns it.
func putTOS(b []byte, tc uint8, is4 bool) []byte {
	b = b[:tosSpace]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	if is4 {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	} else {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = int32(tc)
	return b
}
