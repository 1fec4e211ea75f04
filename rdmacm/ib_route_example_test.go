package rdmacm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/verbs"
)

// openHCA opens a verbs device on port 1 of a CA of the fabric and waits
// for the SM to bring it up.
func openHCA(f *fabric.Fabric, name string) *verbs.Device {
	p, err := f.ConnectHCA(f.NodeByName(name), 1)
	if err != nil {
		panic(err)
	}
	l, err := ib.New(p)
	if err != nil {
		panic(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	for {
		if pa, err := d.QueryPort(1); err == nil && pa.State == verbs.PortActive {
			return d
		}
		time.Sleep(time.Millisecond)
	}
}

// On an InfiniBand fabric rdma_cm addresses a port by its GID and asks the
// subnet administrator for the route: here softrdma's SM sweeps a fabric
// of two switches from Hca1, its SA beside it (sa.Attach) answers the
// queries that reach Hca1's QP1 on the fabric, and Hca3 (on Switch1)
// resolves the route to Hca2 (on Switch2).
func Example_infiniBandRoute() {
	text, err := os.ReadFile("../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		panic(err)
	}
	topo, err := fabric.ParseTopology(strings.NewReader(string(text)), "net.2sw2path4hca")
	if err != nil {
		panic(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	t, err := sm.FabricTransport(f, f.NodeByName("Hca1"), 1)
	if err != nil {
		panic(err)
	}
	mgr, err := sa.Attach(t, sm.Config{Logger: quiet}, sa.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer mgr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mgr.Sweep(ctx); err != nil {
		panic(err)
	}

	d3, d2 := openHCA(f, "Hca3"), openHCA(f, "Hca2")
	defer d3.Close()
	defer d2.Close()
	s, err := rdmacm.New([]*verbs.Device{d3}, &rdmacm.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	id, err := s.CreateID(nil, rdmacm.PortSpaceTCP, nil)
	if err != nil {
		panic(err)
	}
	defer id.Destroy()
	dst := netip.AddrPortFrom(rdmacm.GIDAddr(d2.GIDs()[0]), 7471)
	if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
		panic(err)
	}
	if err := id.ResolveRoute(ctx); err != nil {
		panic(err)
	}
	r, _ := id.Route()
	fmt.Printf("to %v: LID %d -> LID %d, SL %d, MTU %d, GRH %v\n", dst.Addr(), r.SLID, r.DLID, r.SL, r.MTU.Bytes(), r.Global)
	// Output:
	// to fe80::10:4: LID 3 -> LID 5, SL 0, MTU 4096, GRH false
}
