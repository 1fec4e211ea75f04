// What the rdma_cm tools (ping, cmatose, udaddy) share: splitting combined
// short flags, opening a device for an address, completion and event
// waits.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/internal/tool"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// splitShortFlags turns "-vV" into "-v" "-V" when every letter is one of
// the boolean flags, as getopt allows.
func splitShortFlags(args []string, bools string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") {
			ok := true
			for _, c := range a[1:] {
				if !strings.ContainsRune(bools, c) {
					ok = false
					break
				}
			}
			if ok {
				for _, c := range a[1:] {
					out = append(out, "-"+string(c))
				}
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// devFlags are the flags that say how the tools open their device: the
// shared ones of package tool (--pcap, --bind, -d/--ib-dev, --roce-port)
// and the peer's RoCE port.
type devFlags struct {
	tool.Flags
	peerPort uint
}

// addDevFlags registers the device flags; shortDev says whether -d names
// the device too (rping uses -d for debug output).
func addDevFlags(fs *flag.FlagSet, shortDev bool) *devFlags {
	df := &devFlags{}
	names := []string{"ib-dev"}
	if shortDev {
		names = []string{"d", "ib-dev"}
	}
	for _, n := range names {
		fs.StringVar(&df.Dev, n, "", "device `name`: softrdma_IF or IF, the addresses of that interface (default: the address of -a/-b, or the route's)")
	}
	fs.StringVar(&df.Pcap, "pcap", "", "write every RoCEv2 packet sent and received to `file` (pcap, raw IP)")
	fs.StringVar(&df.Bind, "bind", "", "open the device on these comma-separated `addresses` (softrdma extension)")
	fs.UintVar(&df.RoCEPort, "roce-port", 4791, "local UDP `port` of the RoCEv2 device (softrdma extension)")
	fs.UintVar(&df.peerPort, "roce-peer-port", 0, "UDP `port` of the peer's device (default: -roce-port)")
	df.RegisterLinkFlags(fs)
	df.RegisterIB(fs)
	return df
}

// addrs returns the addresses --bind or -d select, or nil.
func (df *devFlags) addrs() ([]netip.Addr, *net.Interface, error) {
	switch {
	case df.Bind != "":
		as, err := tool.ParseAddrs(df.Bind)
		return as, nil, err
	case df.Dev != "":
		return tool.InterfaceAddrs(df.Dev)
	}
	return nil, nil, nil
}

func resolveHost(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed - invalid hostname or IP address %q", s)
	}
	return ips[0].Unmap(), nil
}

// sourceFor returns the source address the kernel would use towards dst.
func sourceFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// localAddrs returns every address of the up interfaces, for a server
// bound to the unspecified address.
func localAddrs(v6 bool) []netip.Addr {
	var out []netip.Addr
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		as, _ := roce.GIDOrder(&ifc)
		for _, a := range as {
			if a.Is4() != v6 && !a.IsLinkLocalUnicast() {
				out = append(out, a)
			}
		}
	}
	return out
}

// openCM opens a device on addrs (of ifc, if not nil) and rdma_cm on it.
func openCM(addrs []netip.Addr, ifc *net.Interface, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, error) {
	lvl := slog.LevelWarn
	if debug {
		lvl = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if !debug {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	name := "softrdma0"
	if ifc != nil {
		name = tool.DevicePrefix + ifc.Name
	}
	if df.peerPort > 65535 {
		return nil, nil, fmt.Errorf("%w: --roce-peer-port %d", tool.ErrUsage, df.peerPort)
	}
	d, err := df.OpenAddrs(addrs, ifc, name, uint16(df.peerPort), logger)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a device on %v port %d: %w", addrs, df.RoCEPort, err)
	}
	cm, err := rdmacm.New([]*verbs.Device{d.Device}, &rdmacm.Options{Logger: logger})
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d.Device, cm, nil
}

// openForServer opens a device for a server bound to a (unspecified: all
// local addresses of its family), or on the addresses --bind or -d give.
func openForServer(a netip.Addr, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, error) {
	if df.IsIB() {
		dev, cm, _, err := openIBCM(df, debug)
		return dev, cm, err
	}
	addrs, ifc, err := df.addrs()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case addrs != nil:
		if !a.IsUnspecified() && !slices.Contains(addrs, a) {
			return nil, nil, fmt.Errorf("%w: address %v is not one of the device's %v", tool.ErrUsage, a, addrs)
		}
	case a.IsUnspecified():
		addrs = localAddrs(a.Is6())
		if len(addrs) == 0 {
			return nil, nil, errors.New("no local addresses to listen on")
		}
	default:
		addrs = []netip.Addr{a}
	}
	return openCM(addrs, ifc, df, debug)
}

// openForClient opens a device on src, on the addresses --bind or -d give,
// or on the source address of the route to dst. It returns the source
// address to connect from: src, else the route's if the device has it,
// else the device's first address of dst's family.
func openForClient(src, dst netip.Addr, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, netip.Addr, error) {
	if df.IsIB() {
		dev, cm, gid, err := openIBCM(df, debug)
		if !src.IsValid() {
			src = gid
		}
		return dev, cm, src, err
	}
	addrs, ifc, err := df.addrs()
	if err != nil {
		return nil, nil, src, err
	}
	if !src.IsValid() {
		route, rerr := sourceFor(dst)
		switch {
		case addrs == nil:
			if rerr != nil {
				return nil, nil, src, rerr
			}
			src = route
		case rerr == nil && slices.Contains(addrs, route):
			src = route
		default:
			for _, a := range addrs {
				if a.Is4() == dst.Is4() {
					src = a
					break
				}
			}
			if !src.IsValid() {
				return nil, nil, src, fmt.Errorf("%w: the device's addresses %v include none of %v's family", tool.ErrUsage, addrs, dst)
			}
		}
	}
	if addrs == nil {
		addrs = []netip.Addr{src}
	}
	dev, cm, err := openCM(addrs, ifc, df, debug)
	return dev, cm, src, err
}

// errDisconnected ends a wait when the connection went away.
var errDisconnected = errors.New("disconnected")

// waitWC polls cq until a completion arrives, ctx ends or gone closes.
func waitWC(ctx context.Context, cq *verbs.CQ, gone <-chan struct{}) (verbs.WC, error) {
	var wc [1]verbs.WC
	spins := 0
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		select {
		case <-ctx.Done():
			return verbs.WC{}, ctx.Err()
		case <-gone:
			if cq.Poll(wc[:]) == 1 {
				return wc[0], nil
			}
			return verbs.WC{}, errDisconnected
		default:
		}
		spins++
		if spins > 100 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// cmEvents is where a tool takes rdma_cm events from: an event channel,
// or one connection's share of it (rping -P).
type cmEvents interface {
	Get(ctx context.Context) (*rdmacm.Event, error)
}

// nextEvent waits for an rdma_cm event.
func nextEvent(ctx context.Context, ch cmEvents) (*rdmacm.Event, error) {
	return ch.Get(ctx)
}

// expect waits for an event of type want.
func expect(ctx context.Context, ch cmEvents, want rdmacm.EventType) (*rdmacm.Event, error) {
	ev, err := nextEvent(ctx, ch)
	if err != nil {
		return nil, err
	}
	if ev.Type != want {
		// rping's words, then rdmacm's explanation (a rejection's reason).
		return ev, fmt.Errorf("cma event %v, error %d: %w", ev.Type, ev.Status, &rdmacm.ErrEvent{Event: ev, Want: want})
	}
	return ev, nil
}

// waitBriefly yields between polls of an empty CQ.
func waitBriefly() { time.Sleep(20 * time.Microsecond) }
