// Package tool is the plumbing the softrdma command's rdma-core-style tools
// share: the flags every tool takes (device, port, GID index, pcap tap,
// addresses to bind) and the one function that opens a device from them.
//
// # Device names
//
// A softrdma device is a set of IP addresses of one network interface, bound
// on UDP port 4791, whose GID table lists them in the order Linux rxe does
// (IPv6 link-local, then IPv4 as IPv4-mapped GIDs, then other IPv6). The
// device on interface IF is named "softrdma_IF"; -d accepts that name or
// the bare interface name (-d eth0 and -d softrdma_eth0 are the same device).
// So on a host where rxe0 sits on eth0, "softrdma -d eth0 -g 1" uses the same
// GID as "ibv_... -d rxe0 -g 1": the IPv4 address.
//
// Without -d, a tool with a peer host opens the interface that routes to the
// peer; a server opens the first interface that is up, not loopback, and has
// addresses. --bind ADDR[,ADDR...] (a softrdma extension) opens a device on
// exactly those addresses, in that order, instead of an interface: UDP 4791
// can be bound only once per address, so two softrdma processes on one host
// need distinct addresses (e.g. --bind 127.0.0.1 and --bind 127.0.0.2).
//
// # GID index
//
// -g N selects entry N of the GID table, as in rdma-core's tools. The
// default (-1) picks one: the entry of the local address that routes to the
// peer, or for a server the first IPv4 entry (else entry 0). rdma-core's
// tools use no GID without -g, which RoCE cannot do; run them with -g.
//
// # InfiniBand ports
//
// --hca NODE[:PORT] (a softrdma extension, on the tools that register it
// with RegisterIB) opens the device on that CA port of an InfiniBand fabric
// served at --fabric ADDR (softrdma fabric -hca ADDR; 127.0.0.1:4792 by
// default) instead of on UDP. The port's LID, SM LID and state are the
// subnet manager's. As with rdma-core's tools on an InfiniBand HCA, no GID
// is used without -g: the peers exchange LIDs and address each other by
// DLID and SL alone; with -g N packets also carry a GRH from GID N.
package tool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/softrdma/softrdma/internal/netif"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/pcap"
	"github.com/softrdma/softrdma/link/udp"
	"github.com/softrdma/softrdma/metrics"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// DevicePrefix is the prefix of the name of a device on an interface.
const DevicePrefix = "softrdma_"

// rxeHeaderRoom is what Linux rxe subtracts from a netdev MTU to get the
// largest path MTU: 1500 gives 1024.
const rxeHeaderRoom = 80

// ErrUsage is wrapped by errors about flag values.
var ErrUsage = errors.New("usage")

// Flags are the flags every tool shares.
type Flags struct {
	// Dev is the device (interface) name, -d/--ib-dev.
	Dev string
	// IBPort is the port number, -i/--ib-port; softrdma devices have port 1.
	IBPort int
	// GIDIdx is the GID index, -g/--gid-idx; -1 picks one (see the package
	// documentation).
	GIDIdx int
	// Pcap is a file to write every packet sent and received to, --pcap.
	Pcap string
	// Bind lists local addresses to bind instead of an interface, --bind.
	Bind string
	// RoCEPort is the UDP port bound and sent to, --roce-port (4791).
	RoCEPort uint
	// NoGSO sends every packet as its own datagram, --gso=false.
	NoGSO bool
	// BusyPoll is --busy-poll, on by default: the device's CQ polls receive
	// on the polling goroutine (--busy-poll=false sets
	// verbs.Options.NoPollReceive).
	BusyPoll bool
	// Metrics is an address to serve the device's counters at for
	// Prometheus (http://ADDR/metrics), --metrics.
	Metrics string
	// HCA is --hca NODE[:PORT]: a CA port of the fabric at Fabric to open
	// the device on, instead of a RoCE link (see RegisterIB).
	HCA string
	// Fabric is --fabric: the address the fabric serves its CA ports at.
	Fabric string
}

// RegisterLinkFlags defines --gso, --busy-poll and --metrics on fs.
func (f *Flags) RegisterLinkFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Metrics, "metrics", "", "serve the device's counters for Prometheus at http://`host:port`/metrics while the tool runs ('softrdma stat' reads them; softrdma extension)")
	fs.BoolVar(&f.BusyPoll, "busy-poll", true, "polls that find nothing receive and handle packets themselves; --busy-poll=false leaves that to the receive goroutine, which polling loops can starve (softrdma extension)")
	fs.BoolFunc("gso", "send runs of equal-sized packets as one UDP GSO send (default true; --gso=false sends datagram by datagram)", func(v string) error {
		on, err := strconv.ParseBool(v)
		f.NoGSO = !on
		return err
	})
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&f.Dev, n, "", "device `name`: softrdma_IF or the interface name IF (default: the interface routing to the peer, or the first one up)")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.IntVar(&f.IBPort, n, 1, "device `port` (softrdma devices have port 1)")
	}
	for _, n := range []string{"g", "gid-idx"} {
		fs.IntVar(&f.GIDIdx, n, -1, "GID `index` as in rxe's table: link-local IPv6, then IPv4, then other IPv6 (default: the address routing to the peer)")
	}
	fs.StringVar(&f.Pcap, "pcap", "", "write every RoCEv2 packet sent and received to `file` (pcap, raw IP)")
	fs.StringVar(&f.Bind, "bind", "", "bind these comma-separated `addresses` instead of an interface (softrdma extension)")
	fs.UintVar(&f.RoCEPort, "roce-port", link.DefaultPort, "UDP `port` to bind and send RoCEv2 to (softrdma extension)")
	f.RegisterLinkFlags(fs)
}

// Device is a device opened by Open, with the GID the tool uses.
type Device struct {
	*verbs.Device
	// GIDIndex and GID are the chosen entry of the GID table; on an
	// InfiniBand port without -g, -1 and the zero GID (no GRH).
	GIDIndex int
	GID      wire.GID
	// Interface is the interface the device is on ("" with --bind).
	Interface string
	// Pcap is the tap's writer, or nil.
	Pcap *pcap.Writer
	// MetricsAddr is where --metrics serves the counters, or nil.
	MetricsAddr net.Addr
	// HCA is the fabric's CA port (NODE:PORT) of a device on an
	// InfiniBand port, "" on RoCE.
	HCA         string
	stopMetrics func()
}

// Close stops serving the counters (--metrics) and closes the device.
func (d *Device) Close() error {
	if d.stopMetrics != nil {
		d.stopMetrics()
	}
	return d.Device.Close()
}

// Open opens the device the flags select. peer is the peer host of a client
// (a name or an address) or "" for a server. log receives the device's logs.
// With --hca the device is on that InfiniBand port, which must be ACTIVE
// (the error wraps ErrPortNotActive otherwise), and peer is not used.
func (f *Flags) Open(ctx context.Context, peer string, log *slog.Logger) (*Device, error) {
	if log == nil {
		log = slog.Default()
	}
	if f.HCA != "" {
		return f.openIBActive(ctx, log)
	}
	if f.IBPort != 1 {
		return nil, fmt.Errorf("%w: port %d: softrdma devices have one port, 1", ErrUsage, f.IBPort)
	}
	if f.RoCEPort == 0 || f.RoCEPort > 65535 {
		return nil, fmt.Errorf("%w: --roce-port %d", ErrUsage, f.RoCEPort)
	}
	var peerAddr, local netip.Addr
	if peer != "" {
		var err error
		if peerAddr, err = Resolve(ctx, peer); err != nil {
			return nil, err
		}
		if local, err = RouteTo(peerAddr); err != nil {
			return nil, err
		}
	}
	addrs, ifc, err := f.addrs(local)
	if err != nil {
		return nil, err
	}
	name := f.Dev
	if ifc != nil {
		name = DevicePrefix + ifc.Name
	} else if name == "" {
		name = "softrdma0"
	}
	d, err := f.OpenAddrs(addrs, ifc, name, 0, log)
	if err != nil {
		return nil, err
	}
	if d.GIDIndex, err = f.gidIndex(d.Device, local); err != nil {
		d.Close()
		return nil, err
	}
	d.GID, _ = d.QueryGID(1, d.GIDIndex)
	return d, nil
}

// OpenAddrs opens a device named name on addrs (ifc, if not nil, is their
// interface, whose MTU sets the port's) on the flags' --roce-port, with
// the --pcap tap if asked; it sends to peerPort, or to --roce-port if 0.
// It leaves the GID choice to the caller.
func (f *Flags) OpenAddrs(addrs []netip.Addr, ifc *net.Interface, name string, peerPort uint16, log *slog.Logger) (*Device, error) {
	if log == nil {
		log = slog.Default()
	}
	if f.RoCEPort == 0 || f.RoCEPort > 65535 {
		return nil, fmt.Errorf("%w: --roce-port %d", ErrUsage, f.RoCEPort)
	}
	mtuIfc := ifc
	if mtuIfc == nil {
		mtuIfc, _ = netif.InterfaceOf(addrs[0])
	}
	mtu := verbs.MTU1024
	if mtuIfc != nil {
		mtu = PathMTU(mtuIfc.MTU)
	}
	port := uint16(f.RoCEPort)
	if peerPort == 0 {
		peerPort = port
	}
	ul, err := udp.Open(udp.Config{Addrs: addrs, Port: port, Logger: log, DisableGSO: f.NoGSO})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("UDP port %d is already in use on %v (Linux rxe or another softrdma bound there; choose other addresses with --bind): %w", port, addrs, err)
		}
		return nil, err
	}
	var l link.Link = ul
	var pw *pcap.Writer
	if f.Pcap != "" {
		if pw, err = pcap.Create(f.Pcap); err != nil {
			ul.Close()
			return nil, err
		}
		l = pcap.Tap(ul, pw, func(err error) { log.Error("pcap tap stopped", "err", err) })
	}
	var guid uint64
	if mtuIfc != nil {
		guid = roce.NodeGUIDFromMAC(mtuIfc.HardwareAddr)
	}
	dev, err := verbs.Open(l, &verbs.Options{Name: name, MTU: mtu, RemotePort: peerPort, Logger: log,
		NoPollReceive: !f.BusyPoll, NodeGUID: guid})
	if err != nil {
		l.Close()
		return nil, err
	}
	d := &Device{Device: dev, Pcap: pw}
	if f.Metrics != "" {
		if d.MetricsAddr, d.stopMetrics, err = metrics.Serve(context.Background(), f.Metrics, dev); err != nil {
			dev.Close()
			return nil, fmt.Errorf("--metrics %s: %w", f.Metrics, err)
		}
		fmt.Fprintf(os.Stderr, "softrdma: %s's counters at http://%s/metrics\n", name, d.MetricsAddr)
	}
	if ifc != nil {
		d.Interface = ifc.Name
	}
	return d, nil
}

// InterfaceAddrs returns the addresses of the interface a -d name
// selects (softrdma_IF or IF), in rxe's GID order.
func InterfaceAddrs(dev string) ([]netip.Addr, *net.Interface, error) {
	n := strings.TrimPrefix(dev, DevicePrefix)
	ifc, err := net.InterfaceByName(n)
	if err != nil {
		return nil, nil, fmt.Errorf("device %q: no network interface %q: %w", dev, n, err)
	}
	as, err := roce.GIDOrder(ifc)
	if err != nil {
		return nil, nil, err
	}
	return as, ifc, nil
}

// addrs returns the addresses to bind and the interface they belong to (nil
// for --bind or a lone address).
func (f *Flags) addrs(local netip.Addr) ([]netip.Addr, *net.Interface, error) {
	if f.Bind != "" {
		as, err := ParseAddrs(f.Bind)
		return as, nil, err
	}
	var ifc *net.Interface
	switch {
	case f.Dev != "":
		return InterfaceAddrs(f.Dev)
	case local.IsValid():
		i, err := netif.InterfaceOf(local)
		if err != nil || i.Flags&net.FlagLoopback != 0 {
			// Loopback: bind only the address in use, so that other
			// processes can use other loopback addresses.
			return []netip.Addr{local}, nil, nil
		}
		ifc = i
	default:
		i, err := FirstInterface()
		if err != nil {
			return nil, nil, err
		}
		ifc = i
	}
	as, err := roce.GIDOrder(ifc)
	if err != nil {
		return nil, nil, err
	}
	return as, ifc, nil
}

func (f *Flags) gidIndex(dev *verbs.Device, local netip.Addr) (int, error) {
	gids := dev.GIDs()
	if f.GIDIdx >= 0 {
		if f.GIDIdx >= len(gids) {
			return 0, fmt.Errorf("%w: GID index %d: device %s has %d GIDs %v", ErrUsage, f.GIDIdx, dev.Name(), len(gids), gids)
		}
		return f.GIDIdx, nil
	}
	if local.IsValid() {
		if i := dev.GIDIndex(wire.GIDFromAddr(local.WithZone(""))); i >= 0 {
			return i, nil
		}
	}
	for i, g := range gids {
		if g.Addr().Is4() {
			return i, nil
		}
	}
	return 0, nil
}

// Resolve returns an address of host (an IP address or a name).
func Resolve(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("cannot resolve host %q: %v", host, err)
	}
	for _, a := range ips { // prefer IPv4, as rdma-core's tools do
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return ips[0], nil
}

// RouteTo returns the local address the kernel would send from to reach
// peer. It sends nothing.
func RouteTo(peer netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, link.DefaultPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// ParseAddrs parses a comma-separated list of IP addresses.
func ParseAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, p := range strings.Split(s, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%w: --bind: %v", ErrUsage, err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// FirstInterface returns the first interface that is up, not loopback, and
// has IP addresses.
func FirstInterface() (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		if ifs[i].Flags&net.FlagUp == 0 || ifs[i].Flags&net.FlagLoopback != 0 {
			continue
		}
		if as, err := ifs[i].Addrs(); err == nil && len(as) > 0 {
			return &ifs[i], nil
		}
	}
	return nil, errors.New("no network interface is up with an IP address: name one with -d or give addresses with --bind")
}

// PathMTU returns the largest path MTU of an interface MTU, as Linux rxe
// computes it (1500 gives 1024), and at least MTU256.
func PathMTU(ifMTU int) verbs.MTU {
	if m := verbs.MTUFromBytes(min(ifMTU-rxeHeaderRoom, 4096)); m != 0 {
		return m
	}
	return verbs.MTU256
}
