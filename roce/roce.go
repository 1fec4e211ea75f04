// Package roce opens verbs devices that speak RoCEv2 on kernel UDP
// sockets (link/udp): on given IP addresses, or on a network interface whose
// addresses form the GID table in the order Linux rxe lists them. verbs
// itself knows only the link.Link interface; this package joins it to the
// UDP link.
package roce

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/softrdma/softrdma/internal/netif"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/verbs"
)

// rxeHeaderRoom is what Linux rxe subtracts from a netdev MTU to get the
// largest path MTU (Ethernet, IP, UDP and RoCE headers): 1500 gives 1024.
const rxeHeaderRoom = 80

// Options configure a device on UDP sockets.
type Options struct {
	verbs.Options
	// Port is the local UDP port; 0 means 4791, the RoCEv2 port. Unless
	// Options.RemotePort says otherwise, the device also sends to peers on
	// this port: a device moved off 4791 talks to peers moved the same way.
	Port uint16
	// ICRCPolicy decides what to do with IPv4 packets whose ICRC cannot be
	// verified (see link/udp).
	ICRCPolicy udp.ICRCPolicy
	// FixedSourcePort sends every packet from Port instead of a UDP source
	// port per queue pair, as Linux picks it (udp.Config.FixedSourcePort).
	FixedSourcePort bool
	// MaxSourcePorts bounds the sockets held for source ports
	// (udp.DefaultMaxSourcePorts if zero).
	MaxSourcePorts int
	// DisableGSO and DisableGRO are udp.Config's: UDP segmentation on
	// send and coalescing on receive, both on by default where the kernel
	// has them.
	DisableGSO, DisableGRO bool
}

// Open opens a device speaking RoCEv2 over UDP on the given local
// addresses, which become its GID table in that order. Unless opts sets it,
// the port MTU follows the MTU of the interface owning the first address.
func Open(addrs []netip.Addr, opts *Options) (*verbs.Device, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	return openUDP(addrs, o, "")
}

// openUDP is Open; ifname, if set, is the interface whose state the port
// follows.
func openUDP(addrs []netip.Addr, o Options, ifname string) (*verbs.Device, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("roce: %w: no addresses", verbs.ErrInvalid)
	}
	if o.Port == 0 {
		o.Port = link.DefaultPort
	}
	if o.RemotePort == 0 {
		o.RemotePort = o.Port
	}
	if o.MTU == 0 || o.NodeGUID == 0 {
		if ifc, err := netif.InterfaceOf(addrs[0]); err == nil {
			if o.MTU == 0 {
				o.MTU = verbs.MTUFromBytes(min(ifc.MTU-rxeHeaderRoom, 4096))
			}
			if o.NodeGUID == 0 {
				o.NodeGUID = NodeGUIDFromMAC(ifc.HardwareAddr)
			}
		}
		if o.MTU == 0 {
			o.MTU = verbs.MTU1024
		}
	}
	l, err := udp.Open(udp.Config{Addrs: addrs, Port: o.Port, ICRCPolicy: o.ICRCPolicy, Logger: o.Logger, Interface: ifname,
		FixedSourcePort: o.FixedSourcePort, MaxSourcePorts: o.MaxSourcePorts, DisableGSO: o.DisableGSO, DisableGRO: o.DisableGRO})
	if err != nil {
		return nil, err
	}
	d, err := verbs.Open(l, &o.Options)
	if err != nil {
		l.Close()
		return nil, err
	}
	return d, nil
}

// OpenInterface opens a device on every IP address of the named network
// interface. The GID table follows Linux rxe: IPv6 link-local addresses
// first, then IPv4 addresses (as IPv4-mapped GIDs), then other IPv6
// addresses, so GID indexes mean the same as on a Linux host. On Linux the
// port follows the interface's state (netlink RTNLGRP_LINK): DOWN, with an
// EventPortErr, while it is not up and running; ACTIVE, with
// EventPortActive, when it is again.
func OpenInterface(name string, opts *Options) (*verbs.Device, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("roce: %w: interface %q: %v", verbs.ErrInvalid, name, err)
	}
	addrs, err := GIDOrder(ifc)
	if err != nil {
		return nil, err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = "softrdma_" + name
	}
	if o.MTU == 0 {
		o.MTU = verbs.MTUFromBytes(min(ifc.MTU-rxeHeaderRoom, 4096))
	}
	if o.NodeGUID == 0 {
		o.NodeGUID = NodeGUIDFromMAC(ifc.HardwareAddr)
	}
	if runtime.GOOS != "linux" {
		name = "" // no netlink: the port does not follow the interface
	}
	return openUDP(addrs, o, name)
}

// NodeGUIDFromMAC returns the node GUID Linux rxe gives a device on an
// interface with this MAC address: the modified EUI-64 of the address
// (FF:FE in its middle, the universal/local bit inverted), as IPv6 forms
// an interface identifier. It returns 0 for an address that is not 6 bytes
// or is all zeros (loopback has none); verbs.Open then derives one.
func NodeGUIDFromMAC(mac net.HardwareAddr) uint64 {
	if len(mac) != 6 || binary.BigEndian.Uint32(mac[:4]) == 0 && binary.BigEndian.Uint16(mac[4:]) == 0 {
		return 0
	}
	eui := [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(eui[:])
}

// GIDOrder returns an interface's addresses in rxe's GID order.
func GIDOrder(ifc *net.Interface) ([]netip.Addr, error) {
	as, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("roce: %w: addresses of %s: %v", verbs.ErrInvalid, ifc.Name, err)
	}
	var ll, v4, v6 []netip.Addr
	for _, a := range as {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		switch {
		case ip.Is4():
			v4 = append(v4, ip)
		case ip.IsLinkLocalUnicast():
			ll = append(ll, ip.WithZone(ifc.Name))
		default:
			v6 = append(v6, ip)
		}
	}
	out := append(append(ll, v4...), v6...)
	if len(out) == 0 {
		return nil, fmt.Errorf("roce: %w: interface %s has no IP addresses", verbs.ErrInvalid, ifc.Name)
	}
	return out, nil
}
