// Package netif finds the network interface that owns an IP address, for
// the device constructors and the tools.
package netif

import (
	"fmt"
	"net"
	"net/netip"
)

// InterfaceOf returns the interface owning a.
func InterfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	a = a.Unmap().WithZone("")
	for i := range ifs {
		as, _ := ifs[i].Addrs()
		for _, x := range as {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Unmap() == a {
				return &ifs[i], nil
			}
		}
	}
	// 127.0.0.0/8 addresses other than 127.0.0.1 are not listed but are
	// served by the loopback interface.
	if a.IsLoopback() {
		for i := range ifs {
			if ifs[i].Flags&net.FlagLoopback != 0 {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface has address %v", a)
}
