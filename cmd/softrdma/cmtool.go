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
	"strings"
	"time"

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

// devFlags are the flags that say how the tools open their device.
type devFlags struct {
	port     *uint
	peerPort *uint
}

func addDevFlags(fs *flag.FlagSet) *devFlags {
	return &devFlags{
		port:     fs.Uint("roce-port", 4791, "local UDP port of the RoCEv2 device"),
		peerPort: fs.Uint("roce-peer-port", 0, "UDP port of the peer's device (default: -roce-port)"),
	}
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

// openCM opens a device on addrs and rdma_cm on it.
func openCM(addrs []netip.Addr, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, error) {
	lvl := slog.LevelWarn
	if debug {
		lvl = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if !debug {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pp := *df.peerPort
	if pp == 0 {
		pp = *df.port
	}
	dev, err := roce.Open(addrs, &roce.Options{Port: uint16(*df.port),
		Options: verbs.Options{RemotePort: uint16(pp), Logger: logger}})
	if err != nil {
		return nil, nil, fmt.Errorf("opening a device on %v port %d: %w", addrs, *df.port, err)
	}
	cm, err := rdmacm.New([]*verbs.Device{dev}, &rdmacm.Options{Logger: logger})
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, cm, nil
}

// openForServer opens a device for a server bound to a (unspecified: all
// local addresses of its family).
func openForServer(a netip.Addr, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, error) {
	addrs := []netip.Addr{a}
	if a.IsUnspecified() {
		addrs = localAddrs(a.Is6())
		if len(addrs) == 0 {
			return nil, nil, errors.New("no local addresses to listen on")
		}
	}
	return openCM(addrs, df, debug)
}

// openForClient opens a device on src, or on the source address of the
// route to dst.
func openForClient(src, dst netip.Addr, df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, netip.Addr, error) {
	if !src.IsValid() {
		var err error
		if src, err = sourceFor(dst); err != nil {
			return nil, nil, src, err
		}
	}
	dev, cm, err := openCM([]netip.Addr{src}, df, debug)
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

// nextEvent waits for an rdma_cm event.
func nextEvent(ctx context.Context, ch *rdmacm.EventChannel) (*rdmacm.Event, error) {
	return ch.Get(ctx)
}

// expect waits for an event of type want.
func expect(ctx context.Context, ch *rdmacm.EventChannel, want rdmacm.EventType) (*rdmacm.Event, error) {
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
