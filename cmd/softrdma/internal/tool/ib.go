// Devices on an InfiniBand port of a fabric (softrdma fabric -hca ADDR):
// --hca NODE[:PORT] attaches that CA port through fabric/remote and opens
// the device on it, addressed by LID.

package tool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/metrics"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// ErrPortNotActive is wrapped by Open's error when the InfiniBand port
// --hca names is not ACTIVE: no subnet manager has brought it up.
var ErrPortNotActive = errors.New("InfiniBand port not ACTIVE")

// RegisterIB defines --hca and --fabric on fs: the flags that put the
// device on an InfiniBand port of a fabric instead of a RoCE link.
func (f *Flags) RegisterIB(fs *flag.FlagSet) {
	fs.StringVar(&f.HCA, "hca", "", "open the device on CA port `NODE[:PORT]` of the InfiniBand fabric at --fabric (a topology node name\n"+
		"or GUID; port 1 by default): addressed by LID, GRH only with -g (softrdma extension)")
	fs.StringVar(&f.Fabric, "fabric", remote.DefaultAddr, "`address` of the fabric's HCA ports (softrdma fabric -hca): host:port or unix:PATH (softrdma extension)")
}

// ParseHCA parses --hca's NODE[:PORT]: the port is the digits after the
// last colon, 1 if there are none.
func ParseHCA(s string) (node string, port int, err error) {
	node, port = s, 1
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		n, perr := strconv.Atoi(s[i+1:])
		if perr != nil || n < 1 || n > 254 {
			return "", 0, fmt.Errorf("%w: --hca %q: port %q is not a number 1..254", ErrUsage, s, s[i+1:])
		}
		node, port = s[:i], n
	}
	if node == "" {
		return "", 0, fmt.Errorf("%w: --hca %q: no node", ErrUsage, s)
	}
	return node, port, nil
}

// IsIB reports whether the flags select an InfiniBand port (--hca).
func (f *Flags) IsIB() bool { return f.HCA != "" }

// OpenIB attaches the CA port --hca names on the fabric served at --fabric
// and opens a device on it, whatever the port's state. The device is named
// -d, or softrdma_NODE (softrdma_NODE_PORT for a port other than 1). Its
// GIDIndex is -g's (-1 without: LID routing, no GRH) and GID that entry
// (zero without -g).
func (f *Flags) OpenIB(ctx context.Context, log *slog.Logger) (*Device, error) {
	if log == nil {
		log = slog.Default()
	}
	node, port, err := ParseHCA(f.HCA)
	if err != nil {
		return nil, err
	}
	switch {
	case f.Bind != "":
		return nil, fmt.Errorf("%w: --bind and --hca exclude each other (--hca opens an InfiniBand port)", ErrUsage)
	case f.Pcap != "":
		return nil, fmt.Errorf("%w: --pcap records RoCEv2 packets; an InfiniBand port (--hca) has none", ErrUsage)
	case f.IBPort != 1 && f.IBPort != 0:
		return nil, fmt.Errorf("%w: port %d: softrdma devices have one port, 1 (--hca NODE:PORT picks the fabric's port)", ErrUsage, f.IBPort)
	}
	p, err := (&remote.Dialer{Logger: log}).Dial(ctx, f.Fabric, node, port)
	if err != nil {
		return nil, err
	}
	l, err := ib.New(p)
	if err != nil {
		p.Close()
		return nil, err
	}
	name := f.Dev
	if name == "" {
		name = DevicePrefix + node
		if port != 1 {
			name += "_" + strconv.Itoa(port)
		}
	}
	dev, err := verbs.Open(l, &verbs.Options{Name: name, Logger: log, NoPollReceive: !f.BusyPoll})
	if err != nil {
		l.Close()
		return nil, err
	}
	d := &Device{Device: dev, GIDIndex: -1, HCA: fmt.Sprintf("%s:%d", node, port)}
	if f.GIDIdx >= 0 {
		if d.GID, err = dev.QueryGID(1, f.GIDIdx); err != nil {
			dev.Close()
			return nil, fmt.Errorf("%w: GID index %d: %v", ErrUsage, f.GIDIdx, err)
		}
		d.GIDIndex = f.GIDIdx
	}
	if f.Metrics != "" {
		if d.MetricsAddr, d.stopMetrics, err = metrics.Serve(context.Background(), f.Metrics, dev); err != nil {
			dev.Close()
			return nil, fmt.Errorf("--metrics %s: %w", f.Metrics, err)
		}
		log.Info("serving the device's counters", "device", name, "url", fmt.Sprintf("http://%s/metrics", d.MetricsAddr))
	}
	return d, nil
}

// openIBActive is Open for --hca: the port must be ACTIVE, as traffic
// needs.
func (f *Flags) openIBActive(ctx context.Context, log *slog.Logger) (*Device, error) {
	d, err := f.OpenIB(ctx, log)
	if err != nil {
		return nil, err
	}
	if p, err := d.QueryPort(1); err != nil || p.State != verbs.PortActive {
		d.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s on the fabric at %s is %v (LID %d): run a subnet manager (e.g. ibsim-run opensm) first",
			ErrPortNotActive, d.HCA, f.Fabric, p.State, p.LID)
	}
	return d, nil
}

// IsIB reports whether the device's port is an InfiniBand port.
func (d *Device) IsIB() bool { return d.HCA != "" }

// UseGRH reports whether packets to a peer that announced gid carry a
// GRH: as rdma-core's pingpong decides, when the peer's GID has a nonzero
// interface ID; always on RoCE. On an InfiniBand port a GRH needs a local
// GID too (-g): a peer that sent one while this side has none is an error.
func (d *Device) UseGRH(gid wire.GID) (bool, error) {
	if !d.IsIB() {
		return true, nil
	}
	global := gid[8]|gid[9]|gid[10]|gid[11]|gid[12]|gid[13]|gid[14]|gid[15] != 0
	if global && d.GIDIndex < 0 {
		return false, fmt.Errorf("%w: the peer sent GID %v (it runs with -g): run this side with -g too, or neither", ErrUsage, gid)
	}
	return global && d.GIDIndex >= 0, nil
}
