// The rdma_cm tools on an InfiniBand port (--hca NODE[:PORT] of the fabric
// at --fabric): addresses are GIDs, written as IPv6 addresses (a port's
// GID is its subnet prefix and port GUID: fe80::GUID on the default
// subnet), and rdma_cm asks the fabric's SA for the route.

package main

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/verbs"
)

// openIBCM opens the device on the InfiniBand port --hca names (it must
// be ACTIVE) and rdma_cm on it; it returns the port's GID as an address.
func openIBCM(df *devFlags, debug bool) (*verbs.Device, *rdmacm.CM, netip.Addr, error) {
	lvl := slog.LevelWarn
	if debug {
		lvl = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if !debug {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds the attach only
	defer cancel()
	d, err := df.Open(ctx, "", logger)
	if err != nil {
		return nil, nil, netip.Addr{}, err
	}
	cm, err := rdmacm.New([]*verbs.Device{d.Device}, &rdmacm.Options{Logger: logger})
	if err != nil {
		d.Close()
		return nil, nil, netip.Addr{}, err
	}
	return d.Device, cm, rdmacm.GIDAddr(d.Device.GIDs()[0]), nil
}
