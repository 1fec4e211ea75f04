package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// ibNet is an in-process InfiniBand fabric (net.2sw2path4hca: Hca1 and
// Hca3 on Switch1, Hca2 and Hca4 on Switch2) swept by softrdma's SM at
// Hca1, with its SA beside it (sa.Attach, unless withSA is false): the
// fabric hands the SA the GSI MADs HCAs send to the SM's port on the data
// plane and puts its answers back there. rdma_cms over verbs devices on
// the other HCAs are opened by the test.
type ibNet struct {
	t   testing.TB
	f   *fabric.Fabric
	mgr *sm.Manager
	sa  *sa.Server
}

func newIBNet(t testing.TB, withSA bool) *ibNet {
	t.Helper()
	return newIBNetCfg(t, withSA, sm.Config{})
}

// newIBNetCfg is newIBNet with the SM configured by cfg (its Logger set
// here).
func newIBNetCfg(t testing.TB, withSA bool, cfg sm.Config) *ibNet {
	t.Helper()
	text, err := os.ReadFile("../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(bytes.NewReader(text), "net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n := &ibNet{t: t, f: f}
	t.Cleanup(func() { f.Close() })
	tr, err := sm.FabricTransport(f, f.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet
	if withSA {
		x, err := sa.Attach(tr, cfg, sa.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		n.mgr, n.sa = x.Manager, x.SA
		t.Cleanup(func() { x.Close() })
	} else {
		if n.mgr, err = sm.New(tr, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.mgr.Close() })
	}
	if err := n.mgr.Sweep(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return n
}

// openDev opens a verbs device on port 1 of HCA name and waits for the
// port to be ACTIVE with its LID.
func (n *ibNet) openDev(name string) *verbs.Device {
	t := n.t
	t.Helper()
	p, err := n.f.ConnectHCA(n.f.NodeByName(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "ib-" + name})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		pa, err := d.QueryPort(1)
		if err == nil && pa.State == verbs.PortActive && pa.LID != 0 && pa.SMLID != 0 {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: port not ACTIVE: %+v %v", name, pa, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// open starts a verbs device and an rdma_cm on port 1 of HCA name.
func (n *ibNet) open(name string) (*CM, *verbs.Device) {
	t := n.t
	t.Helper()
	d := n.openDev(name)
	s, err := New([]*verbs.Device{d}, &Options{CM: cm.Options{ResponseTimeout: 14}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, d
}

func lidOf(t testing.TB, d *verbs.Device) uint16 {
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return pa.LID
}

// TestIBConnect connects Hca3 (Switch1) to Hca4 (Switch2) by rdma_cm: the
// address is Hca4's GID, the route the SA's PathRecord, the REQ carries
// its LIDs and SL, both QPs address each other by LID, and SEND and RDMA
// WRITE go both ways through the switches.
func TestIBConnect(t *testing.T) {
	n := newIBNet(t, true)
	sa3, d3 := n.open("Hca3")
	sa4, d4 := n.open("Hca4")
	ctx := ctxT(t)
	dst := netip.AddrPortFrom(GIDAddr(d4.GIDs()[0]), 7471)

	// The route alone, as rdma_resolve_route gets it.
	id, err := sa3.CreateID(nil, PortSpaceTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
		t.Fatal(err)
	}
	if id.Device() != d3 {
		t.Fatal("ResolveAddr picked another device")
	}
	if err := id.ResolveRoute(ctx); err != nil {
		pa, _ := d3.QueryPort(1)
		t.Fatalf("%v (SA %+v, port %+v)", err, n.sa.Stats(), pa)
	}
	r, ok := id.Route()
	lid3, lid4 := lidOf(t, d3), lidOf(t, d4)
	if !ok || r.SLID != lid3 || r.DLID != lid4 || r.DGID != d4.GIDs()[0] || r.Global || r.MTU == 0 {
		t.Fatalf("route %+v (%v), want LID %d -> %d", r, ok, lid3, lid4)
	}
	id.Destroy()
	if st := n.sa.Stats(); st.Requests == 0 {
		t.Fatalf("the SA answered no request: %+v", st)
	}

	l, err := Listen(ctx, dst, &ConnOptions{CM: sa4})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   *Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		acc <- res{c, err}
	}()
	ca, err := Dial(ctx, dst, &ConnOptions{CM: sa3, Param: ConnParam{PrivateData: []byte("over IB")}})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	ar := <-acc
	if ar.err != nil {
		t.Fatal(ar.err)
	}
	cb := ar.c
	defer cb.Close()

	// The passive side's view of the REQ: the LIDs of the SA's path.
	req := cb.ID.req
	if req == nil {
		t.Fatal("no REQ kept")
	}
	pp := req.PrimaryPath
	if pp.LocalLID != lid3 || pp.RemoteLID != lid4 || pp.SL != r.SL || !pp.SubnetLocal || pp.PacketRate != r.Rate ||
		pp.LocalGID != d3.GIDs()[0] || pp.RemoteGID != d4.GIDs()[0] {
		t.Fatalf("REQ path %+v, route %+v", pp, r)
	}
	for _, c := range []struct {
		c    *Conn
		dlid uint16
	}{{ca, lid4}, {cb, lid3}} {
		a, _ := c.c.QP.Query()
		if a.AH.DLID != c.dlid || a.AH.IsGlobal || a.AH.SL != r.SL {
			t.Fatalf("QP address vector %+v, want DLID %d", a.AH, c.dlid)
		}
	}
	if err := ca.ID.LoadAltPath(ctx, d3.GIDs()[0].Addr(), d4.GIDs()[0].Addr()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("LoadAltPath with LMC 0 (no second path): %v, want ErrInvalid", err)
	}
	exchange(t, ca, cb, []byte("SEND from Hca3 to Hca4"))
	exchange(t, cb, ca, []byte("SEND from Hca4 to Hca3"))
	ibWrite(t, ca, cb)
	ibWrite(t, cb, ca)
}

// ibWrite writes with RDMA WRITE from a's QP into a region of b's.
func ibWrite(t testing.TB, a, b *Conn) {
	t.Helper()
	dst := make([]byte, 8192)
	mrb, err := b.PD.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mrb.Dereg()
	src := make([]byte, 8192)
	for i := range src {
		src[i] = byte(i * 7)
	}
	mra, err := a.PD.RegMR(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mra.Dereg()
	if err := a.QP.PostSend([]verbs.SendWR{{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mra.SGE(0, len(src))}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.CQ, verbs.WCRDMAWrite)
	if !bytes.Equal(dst, src) {
		t.Fatal("RDMA WRITE: the region differs")
	}
}

// TestIBNoSA: with no SA beside the SM, ResolveRoute on an InfiniBand port
// fails with EventRouteError whose error wraps cm.ErrNoSA; a GID the SA
// does not know gets cm.ErrNoPath.
func TestIBNoSA(t *testing.T) {
	n := newIBNet(t, false)
	s3, _ := n.open("Hca3")
	_, d4 := n.open("Hca4")
	ctx := ctxT(t)
	id, err := s3.CreateID(nil, PortSpaceTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(GIDAddr(d4.GIDs()[0]), 1)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The tries share the deadline; one that ends it on a loaded machine
	// still reports the SA's silence.
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	err = id.ResolveRoute(short)
	if !errors.Is(err, cm.ErrNoSA) || !errors.Is(err, ErrConnect) {
		t.Fatalf("ResolveRoute without an SA: %v, want cm.ErrNoSA", err)
	}
	t.Logf("no SA: %v after %v", err, time.Since(start))

	n2 := newIBNet(t, true)
	s1, _ := n2.open("Hca3")
	id2, err := s1.CreateID(nil, PortSpaceTCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer id2.Destroy()
	g := d4.GIDs()[0]
	g[15] ^= 0x55 // a port GUID nobody has
	if err := id2.ResolveAddr(ctx, netip.Addr{}, netip.AddrPortFrom(GIDAddr(g), 1)); err != nil {
		t.Fatal(err)
	}
	err = id2.ResolveRoute(ctx)
	var se *cm.SAError
	if !errors.Is(err, cm.ErrNoPath) || !errors.As(err, &se) || se.Status == 0 {
		t.Fatalf("ResolveRoute to an unknown GID: %v, want cm.ErrNoPath", err)
	}
	t.Logf("unknown GID: %v", err)
}

// TestIBPathRecordTable asks the SA for every path from Hca3's GID
// (GetTable): the answer, several records, comes by RMPP in more than
// one segment and is reassembled; a Get by LIDs gives the path to Hca4.
func TestIBPathRecordTable(t *testing.T) {
	n := newIBNet(t, true)
	s3, d3 := n.open("Hca3")
	_, d4 := n.open("Hca4")
	m := s3.devs[0].mgr
	ctx := ctxT(t)
	g3 := d3.GIDs()[0]
	recs, err := m.PathRecords(ctx, &cm.PathQuery{SGID: g3})
	if err != nil {
		t.Fatal(err)
	}
	// A path to every end port and switch port 0 of the subnet: 4 HCAs
	// (itself included) and 2 switches, 6 records of 64 bytes, more than
	// one 200-byte segment.
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	found := false
	for _, r := range recs {
		if wire.GID(r.SGID) != g3 || r.SLID != lidOf(t, d3) {
			t.Fatalf("record from %v LID %d", r.SGID, r.SLID)
		}
		found = found || wire.GID(r.DGID) == d4.GIDs()[0] && r.DLID == lidOf(t, d4)
	}
	if !found {
		t.Fatal("no path to Hca4")
	}
	// The SA counts the transfer done when our last ACK reaches it.
	for deadline := time.Now().Add(5 * time.Second); n.sa.Stats().Transfers == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no RMPP transfer completed: %+v", n.sa.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	r, err := m.PathRecord(ctx, &cm.PathQuery{SLID: lidOf(t, d3), DLID: lidOf(t, d4)})
	if err != nil || wire.GID(r.DGID) != d4.GIDs()[0] {
		t.Fatalf("Get by LIDs: %+v %v", r, err)
	}
	if _, err := m.PathRecord(ctx, &cm.PathQuery{SLID: lidOf(t, d3), DLID: 0xBFFF}); !errors.Is(err, cm.ErrNoPath) {
		t.Fatalf("Get to a LID nobody has: %v, want cm.ErrNoPath", err)
	}
}

// BenchmarkIBResolveRoute measures rdma_resolve_address and
// rdma_resolve_route on an InfiniBand port: one SA PathRecord Get from
// Hca3 to the SA on Hca1 and back through Switch1, per iteration.
func BenchmarkIBResolveRoute(b *testing.B) {
	n := newIBNet(b, true)
	s3, _ := n.open("Hca3")
	_, d4 := n.open("Hca4")
	ctx := context.Background()
	dst := netip.AddrPortFrom(GIDAddr(d4.GIDs()[0]), 7471)
	b.ReportAllocs()
	for b.Loop() {
		id, err := s3.CreateID(nil, PortSpaceTCP, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
			b.Fatal(err)
		}
		if err := id.ResolveRoute(ctx); err != nil {
			b.Fatal(err)
		}
		id.Destroy()
	}
}
