// Multicast groups: a joined group has a socket of its own, bound to the
// group address and the link's port (the kernel hands a datagram only to
// sockets bound to its destination address or to the wildcard one), with
// its own reader goroutine, made a member on the interface of the link's
// address of the group's family. Leaving closes it, which leaves the group.

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/link"
)

// MulticastTTL is the IPv4 TTL and IPv6 hop limit of multicast packets the
// link sends: the hop limit Linux's rdma_cm gives a RoCE multicast address
// handle, which rxe puts in the IP header.
const MulticastTTL = 64

// JoinGroup makes the link receive packets sent to group at its port
// (link.Multicaster). It opens a socket bound to group:port with
// SO_REUSEADDR, so other links and programs of the host can join the same
// group, and joins it (IGMP or MLD) on the interface holding the link's
// first address of the group's family. Linux only: elsewhere the error
// wraps errors.ErrUnsupported. The error wraps link.ErrAddress if group is
// not a multicast address of the family of one of the link's addresses, is
// already joined or cannot be joined, and link.ErrClosed if the link is
// closed.
func (l *Link) JoinGroup(group netip.Addr) error {
	g, err := link.CheckGroup(group, l.addrs)
	if err != nil {
		return fmt.Errorf("udp: join: %w", err)
	}
	var main *socket
	for _, s := range l.socks {
		if s.is4 == g.Is4() {
			main = s
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return fmt.Errorf("udp: join %s: %w", g, link.ErrClosed)
	}
	if _, ok := l.groups[g]; ok {
		return fmt.Errorf("udp: join: %w: %s already joined", link.ErrAddress, g)
	}
	bind := netip.AddrPortFrom(g, l.port)
	if !g.Is4() && main.ifindex > 0 {
		bind = netip.AddrPortFrom(g.WithZone(strconv.Itoa(main.ifindex)), l.port)
	}
	conn, err := nsIn(l.ns, func() (*net.UDPConn, error) {
		return listenGroup(bind, main.addr, main.ifindex, l.sockBuf, l.log)
	})
	if err != nil {
		return fmt.Errorf("udp: join %s on %s: %w: %w", g, main.addr, link.ErrAddress, err)
	}
	sk := &socket{addr: g, key: g, local: netip.AddrPortFrom(g, l.port), is4: g.Is4(),
		conn: conn, bc: newBatchConn(conn, g.Is4()), ifindex: main.ifindex}
	if l.started {
		rx, err := l.newRx(sk, l.handler)
		if err != nil {
			conn.Close()
			return fmt.Errorf("udp: join %s: %w", g, err)
		}
		sk.rx.Store(rx)
		l.wg.Add(1)
		go l.readLoop(sk, rx)
	}
	if l.groups == nil {
		l.groups = make(map[netip.Addr]*socket)
	}
	l.groups[g] = sk
	l.log.Debug("udp: joined multicast group", "group", g, "on", main.addr)
	return nil
}

// LeaveGroup closes the group's socket, leaving the group, after which its
// reader exits (link.Multicaster). The error wraps link.ErrAddress if group
// is not joined.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := group.Unmap().WithZone("")
	l.mu.Lock()
	sk, ok := l.groups[g]
	delete(l.groups, g)
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("udp: leave: %w: %s is not joined", link.ErrAddress, group)
	}
	sk.gone.Store(true)
	if err := sk.conn.Close(); err != nil {
		return fmt.Errorf("udp: leave %s: %w", g, err)
	}
	l.log.Debug("udp: left multicast group", "group", g)
	return nil
}

// startGroupsLocked starts the readers of groups joined before Start. The
// caller holds l.mu.
func (l *Link) startGroupsLocked() error {
	for _, sk := range l.groups {
		rx, err := l.newRx(sk, l.handler)
		if err != nil {
			return err
		}
		sk.rx.Store(rx)
		l.wg.Add(1)
		go l.readLoop(sk, rx)
	}
	return nil
}

// interfaceIndex returns the index of the interface holding a (its zone's
// if it has one), or 0 if none is found.
func interfaceIndex(a netip.Addr) int {
	if z := a.Zone(); z != "" {
		if n, err := strconv.Atoi(z); err == nil {
			return n
		}
		if ifi, err := net.InterfaceByName(z); err == nil {
			return ifi.Index
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	want := a.WithZone("")
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == want {
					return ifi.Index
				}
			}
		}
	}
	return 0
}
