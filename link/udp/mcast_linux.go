// Linux socket options for multicast: the sending interface, TTL and loop
// of every socket, and the group sockets' binding and membership.

package udp

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// multicastSend makes conn send multicast packets out of the interface
// holding local (by address for IPv4, by ifindex for IPv6), with
// MulticastTTL and with loopback on, so links of one host reach each other.
// Failures are only logged: unicast traffic does not need these.
func multicastSend(conn syscall.Conn, local netip.Addr, ifindex int, log *slog.Logger) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	var errs []error
	_ = rc.Control(func(fd uintptr) {
		f := int(fd)
		if local.Is4() {
			errs = append(errs,
				unix.SetsockoptIPMreqn(f, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Address: local.As4(), Ifindex: int32(ifindex)}),
				unix.SetsockoptInt(f, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, MulticastTTL),
				unix.SetsockoptInt(f, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1))
			return
		}
		if ifindex > 0 {
			errs = append(errs, unix.SetsockoptInt(f, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex))
		}
		errs = append(errs,
			unix.SetsockoptInt(f, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, MulticastTTL),
			unix.SetsockoptInt(f, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 1))
	})
	for _, e := range errs {
		if e != nil {
			log.Debug("udp: multicast send option not set", "addr", local, "err", e)
		}
	}
}

// listenGroup binds a socket at group:port (bind) with SO_REUSEADDR and the
// receive options of listenUDP, and joins the group on the interface
// holding local (IPv4: by address; IPv6: ifindex).
func listenGroup(bind netip.AddrPort, local netip.Addr, ifindex, buf int, log *slog.Logger) (*net.UDPConn, error) {
	g := bind.Addr()
	is4 := g.Is4()
	if !is4 && ifindex == 0 {
		return nil, fmt.Errorf("no interface holds %s", local)
	}
	// Not net.ListenPacket: for a multicast address it binds the wildcard
	// address, which the link's own socket on the port would refuse.
	family := unix.AF_INET6
	if is4 {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := groupOptions(fd, g, local, ifindex, buf, log); err != nil {
		unix.Close(fd)
		return nil, err
	}
	var sa unix.Sockaddr
	if is4 {
		sa = &unix.SockaddrInet4{Port: int(bind.Port()), Addr: g.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(bind.Port()), Addr: g.As16(), ZoneId: uint32(ifindex)}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", bind, err)
	}
	f := os.NewFile(uintptr(fd), "udp "+bind.String())
	defer f.Close() // FilePacketConn dups it
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	c, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("not a UDP socket: %T", pc)
	}
	return c, nil
}

// groupOptions sets a group socket's options and joins the group.
func groupOptions(f int, g, local netip.Addr, ifindex, buf int, log *slog.Logger) error {
	is4 := g.Is4()
	if err := setOptions(f, is4, buf, log); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("setsockopt SO_REUSEADDR: %w", err)
	}
	if is4 {
		// Only this group's datagrams, not every group a socket of the
		// host joined (bound to the group, it sees no others anyway).
		_ = unix.SetsockoptInt(f, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		err := unix.SetsockoptIPMreqn(f, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: g.As4(), Address: local.As4(), Ifindex: int32(ifindex)})
		if err != nil {
			return fmt.Errorf("IP_ADD_MEMBERSHIP: %w", err)
		}
		return nil
	}
	err := unix.SetsockoptIPv6Mreq(f, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
		&unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifindex)})
	if err != nil {
		return fmt.Errorf("IPV6_JOIN_GROUP: %w", err)
	}
	return nil
}
