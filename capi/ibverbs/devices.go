//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/internal/netif"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// devicePrefix is the prefix of a device on an interface, as the tools
// name it.
const devicePrefix = "softrdma_"

// rxeHeaderRoom is what Linux rxe subtracts from an interface MTU to get
// the largest path MTU (1500 gives 1024), as roce and the tools do.
const rxeHeaderRoom = 80

// errConfig marks a bad SOFTRDMA_DEVICES or SOFTRDMA_ROCE_PORT.
var errConfig = errors.New("softrdma: bad configuration")

// device is one configured device. Its data device (UDP sockets) is
// opened by the first context that needs it and closed with the last.
type device struct {
	name   string
	addrs  []netip.Addr
	ifname string // the interface it was configured by, or ""
	opts   roce.Options

	mu   sync.Mutex
	refs int
	data *verbs.Device
	guid uint64 // node GUID, once known

	evStop, evDone chan struct{} // the data device's event watcher (async.go)
}

// The device table, read from the environment once.
var (
	devOnce sync.Once
	devices []*device
	devErr  error
	logger  *slog.Logger
)

func loadDevices() {
	devOnce.Do(func() {
		level := slog.LevelWarn
		if s := os.Getenv("SOFTRDMA_LOG"); s != "" {
			if err := level.UnmarshalText([]byte(s)); err != nil {
				level = slog.LevelWarn
			}
		}
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("lib", "libibverbs.so.1 (softrdma)")
		devices, devErr = parseDevices(os.Getenv("SOFTRDMA_DEVICES"), os.Getenv("SOFTRDMA_ROCE_PORT"))
		if devErr != nil {
			logger.Error("no devices", "err", devErr)
		}
	})
}

// parseDevices reads the configuration (see the package comment).
func parseDevices(spec, portSpec string) ([]*device, error) {
	port := uint16(link.DefaultPort)
	if portSpec != "" {
		p, err := strconv.ParseUint(portSpec, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: SOFTRDMA_ROCE_PORT=%q: a UDP port, 1-65535", errConfig, portSpec)
		}
		port = uint16(p)
	}
	var out []*device
	fields := strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' })
	if len(fields) == 0 {
		ifs, err := net.Interfaces()
		if err != nil {
			return nil, err
		}
		for _, ifc := range ifs {
			if as, err := ifc.Addrs(); ifc.Flags&net.FlagUp != 0 && err == nil && len(as) > 0 {
				fields = append(fields, ifc.Name)
			}
		}
	}
	nAddr := 0
	seen := map[string]bool{}
	for _, f := range fields {
		name, s, named := strings.Cut(f, "=")
		if !named {
			s, name = f, ""
		}
		if name == "" && named || s == "" {
			return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES entry %q: NAME=SPEC or SPEC", errConfig, f)
		}
		d := &device{opts: roce.Options{Port: port}}
		if first, _, _ := strings.Cut(s, ","); isAddr(first) {
			for _, a := range strings.Split(s, ",") {
				ip, err := netip.ParseAddr(strings.TrimSpace(a))
				if err != nil || !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
					return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES entry %q: %q is not a unicast IP address", errConfig, f, a)
				}
				d.addrs = append(d.addrs, ip.Unmap())
			}
			if name == "" {
				name = fmt.Sprintf("softrdma%d", nAddr)
			}
			nAddr++
			ifc, _ := netif.InterfaceOf(d.addrs[0])
			d.setLinkOpts(ifc)
		} else {
			ifname := strings.TrimPrefix(s, devicePrefix)
			ifc, err := net.InterfaceByName(ifname)
			if err != nil {
				return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES entry %q: no interface %q: %v", errConfig, f, ifname, err)
			}
			if d.addrs, err = roce.GIDOrder(ifc); err != nil {
				return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES entry %q: %v", errConfig, f, err)
			}
			if len(d.addrs) == 0 {
				return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES entry %q: interface %s has no addresses", errConfig, f, ifname)
			}
			if name == "" {
				name = devicePrefix + ifname
			}
			d.ifname = ifname
			d.setLinkOpts(ifc)
		}
		if len(name) >= C.IBV_SYSFS_NAME_MAX {
			return nil, fmt.Errorf("%w: device name %q is longer than %d bytes", errConfig, name, C.IBV_SYSFS_NAME_MAX-1)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: SOFTRDMA_DEVICES names device %s twice", errConfig, name)
		}
		seen[name] = true
		d.name = name
		d.opts.Name = name
		out = append(out, d)
	}
	return out, nil
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(strings.TrimSpace(s))
	return err == nil
}

// setLinkOpts sets the port MTU and node GUID from the interface the
// device's addresses are on, as roce does when it opens the device, so
// that a device described before it is opened reports the same.
func (d *device) setLinkOpts(ifc *net.Interface) {
	d.opts.MTU = verbs.MTU1024
	if ifc != nil {
		if m := verbs.MTUFromBytes(min(ifc.MTU-rxeHeaderRoom, 4096)); m != 0 {
			d.opts.MTU = m
		} else {
			d.opts.MTU = verbs.MTU256
		}
		d.opts.NodeGUID = roce.NodeGUIDFromMAC(ifc.HardwareAddr)
	}
	d.opts.Logger = logger
}

// portUp reports whether the device's interface is up and running (true
// for a device on addresses of no known interface).
func (d *device) portUp() bool {
	var ifc *net.Interface
	if d.ifname != "" {
		ifc, _ = net.InterfaceByName(d.ifname)
	} else {
		ifc, _ = netif.InterfaceOf(d.addrs[0])
	}
	return ifc == nil || ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0
}

// openQuery opens the device on an in-process link: it answers queries
// with the device's attributes and binds nothing.
func (d *device) openQuery() (*verbs.Device, func(), error) {
	network := loop.NewNetwork(loop.Config{})
	l, err := network.Attach(d.addrs, d.opts.Port)
	if err != nil {
		network.Close()
		return nil, nil, err
	}
	o := d.opts.Options
	o.Logger = slog.New(slog.DiscardHandler)
	dev, err := verbs.Open(l, &o)
	if err != nil {
		l.Close()
		network.Close()
		return nil, nil, err
	}
	return dev, func() { dev.Close(); network.Close() }, nil
}

// acquire returns the data device, opening it for the first user.
func (d *device) acquire() (*verbs.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.data == nil {
		var dev *verbs.Device
		var err error
		if d.ifname != "" {
			dev, err = roce.OpenInterface(d.ifname, &d.opts)
		} else {
			dev, err = roce.Open(d.addrs, &d.opts)
		}
		if err != nil {
			logger.Error("opening the device", "dev", d.name, "addrs", d.addrs, "port", d.opts.Port, "err", err)
			return nil, err
		}
		d.data = dev
		d.startEvents(dev)
	}
	d.refs++
	return d.data, nil
}

// release drops a user of the data device, closing it with the last.
func (d *device) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refs--; d.refs == 0 {
		d.stopEvents()
		d.data.Close()
		d.data = nil
	}
}

// errno is the errno libibverbs would return for err.
func errno(err error) C.int {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return C.int(e)
	case errors.Is(err, verbs.ErrNotSupported):
		return C.EOPNOTSUPP
	case errors.Is(err, verbs.ErrQueueFull), errors.Is(err, verbs.ErrLimit):
		return C.ENOMEM
	case errors.Is(err, verbs.ErrBusy):
		return C.EBUSY
	case errors.Is(err, verbs.ErrClosed):
		return C.ENODEV
	case errors.Is(err, verbs.ErrInvalid), errors.Is(err, verbs.ErrState), errors.Is(err, errConfig):
		return C.EINVAL
	}
	return C.EIO
}

//export srdgo_num_devices
func srdgo_num_devices() C.int {
	loadDevices()
	return C.int(len(devices))
}

//export srdgo_devices_error
func srdgo_devices_error() C.int {
	loadDevices()
	return errno(devErr)
}

//export srdgo_device_name
func srdgo_device_name(i C.int, buf *C.char, n C.size_t) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	b[copy(b[:len(b)-1], devices[i].name)] = 0
}

//export srdgo_device_guid
func srdgo_device_guid(i C.int) C.uint64_t {
	d := devices[i]
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.guid == 0 {
		d.guid = d.opts.NodeGUID
		if d.guid == 0 {
			if dev, done, err := d.openQuery(); err == nil {
				d.guid = dev.QueryDevice().NodeGUID
				done()
			}
		}
	}
	return C.uint64_t(d.guid)
}
