package sm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/internal/leakcheck"
	"github.com/softrdma/softrdma/wire/mad"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testFabric builds an in-process fabric from topology text.
type testFabric struct {
	*fabric.Fabric
	topo *fabric.Topology
}

func openTopo(t testing.TB, text string) *testFabric {
	t.Helper()
	topo, err := fabric.ParseTopology(strings.NewReader(text), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &testFabric{f, topo}
}

func readTopo(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fatTree writes a two-level fat tree: leaves leaf switches with hosts CAs
// each, every leaf joined to every one of spines spine switches.
func fatTree(spines, leaves, hosts int) string {
	var b strings.Builder
	for s := 1; s <= spines; s++ {
		fmt.Fprintf(&b, "Switch\t%d \"Spine%d\"\n", leaves, s)
		for l := 1; l <= leaves; l++ {
			fmt.Fprintf(&b, "[%d]\t\"Leaf%d\"[%d]\n", l, l, hosts+s)
		}
		b.WriteString("\n")
	}
	for l := 1; l <= leaves; l++ {
		fmt.Fprintf(&b, "Switch\t%d \"Leaf%d\"\n", hosts+spines, l)
		for h := 1; h <= hosts; h++ {
			fmt.Fprintf(&b, "[%d]\t\"Hca%d\"[1]\n", h, (l-1)*hosts+h)
		}
		for s := 1; s <= spines; s++ {
			fmt.Fprintf(&b, "[%d]\t\"Spine%d\"[%d]\n", hosts+s, s, l)
		}
		b.WriteString("\n")
	}
	for n := 1; n <= leaves*hosts; n++ {
		fmt.Fprintf(&b, "Hca\t1 \"Hca%d\"\n[1]\t\"Leaf%d\"[%d]\n\n", n, (n-1)/hosts+1, (n-1)%hosts+1)
	}
	return b.String()
}

// firstCA returns the first CA of the topology.
func (f *testFabric) firstCA(t testing.TB) *fabric.Node {
	for _, n := range f.topo.Nodes {
		if n.Type == mad.NodeTypeCA {
			return f.NodeByName(n.ID)
		}
	}
	t.Fatal("no CA")
	return nil
}

func startSM(t testing.TB, f *testFabric, n *fabric.Node, port int, cfg Config) *Manager {
	t.Helper()
	tr, err := FabricTransport(f.Fabric, n, port)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	m, err := New(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func sweep(t testing.TB, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
}

func portInfo(t testing.TB, f *testFabric, n *fabric.Node, port int) mad.PortInfo {
	t.Helper()
	b, err := f.Query(n, mad.SMAttrPortInfo, uint32(port))
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := mad.ParsePortInfo(b)
	return pi
}

// lftOf reads a switch's LFT from the fabric: LinearFDBTop+1 entries.
func lftOf(t testing.TB, f *testFabric, n *fabric.Node) []byte {
	t.Helper()
	b, err := f.Query(n, mad.SMAttrSwitchInfo, 0)
	if err != nil {
		t.Fatal(err)
	}
	si, _ := mad.ParseSwitchInfo(b)
	var lft []byte
	for blk := 0; blk*64 <= int(si.LinearFDBTop); blk++ {
		b, err := f.Query(n, mad.SMAttrLinearFT, uint32(blk))
		if err != nil {
			t.Fatal(err)
		}
		lft = append(lft, b[:64]...)
	}
	return lft[:int(si.LinearFDBTop)+1]
}

// hop is one step of a walked route: the switch and the port it left by.
type hop struct {
	sw   string
	port int
}

// checked is what checkSubnet learned from the fabric.
type checked struct {
	lids   map[string]uint16 // "Hca1/1" or switch name -> base LID
	routes map[string][]hop  // "src/port->lid" -> the hops
}

// checkSubnet checks from the fabric's side (not the SM's snapshot) that
// every linked port is ACTIVE, every CA port and switch has a unique LID
// (LMC-aligned) and the SM's LID as SM LID, and that the switches' LFTs,
// as read back, carry every CA port to every LID of every other CA port.
func checkSubnet(t *testing.T, f *testFabric, m *Manager, lmc uint8) checked {
	t.Helper()
	sn := m.Subnet()
	if sn == nil {
		t.Fatal("no snapshot")
	}
	c := checked{lids: map[string]uint16{}, routes: map[string][]hop{}}
	owner := map[uint16]string{}
	lfts := map[string][]byte{}
	type end struct {
		name string
		port int
	}
	var cas []end
	nodes := 0
	for _, tn := range f.topo.Nodes {
		n := f.NodeByName(tn.ID)
		nodes++
		if tn.Type == mad.NodeTypeSwitch {
			pi := portInfo(t, f, n, 0)
			c.lids[tn.ID] = pi.LID
			for i := uint16(0); i < 1<<pi.LMC; i++ {
				if o, dup := owner[pi.LID+i]; dup || pi.LID == 0 {
					t.Errorf("switch %s LID %d (also %q)", tn.ID, pi.LID, o)
				}
				owner[pi.LID+i] = tn.ID
			}
			if pi.MasterSMLID != sn.SMLID {
				t.Errorf("switch %s: SM LID %d, want %d", tn.ID, pi.MasterSMLID, sn.SMLID)
			}
			lfts[tn.ID] = lftOf(t, f, n)
		}
		for port := 1; port <= tn.NumPorts(); port++ {
			pi := portInfo(t, f, n, port)
			if pi.PortPhysicalState != mad.PhysStateLinkUp {
				continue
			}
			if pi.PortState != mad.PortStateActive {
				t.Errorf("%s port %d: state %d, want ACTIVE", tn.ID, port, pi.PortState)
			}
			if tn.Type != mad.NodeTypeCA {
				continue
			}
			key := fmt.Sprintf("%s/%d", tn.ID, port)
			c.lids[key] = pi.LID
			cas = append(cas, end{tn.ID, port})
			if pi.LMC != lmc || pi.LID == 0 || pi.LID&(1<<lmc-1) != 0 || pi.MasterSMLID != sn.SMLID || pi.GIDPrefix != DefaultPrefix {
				t.Errorf("%s: LID %d LMC %d SM LID %d prefix %#x", key, pi.LID, pi.LMC, pi.MasterSMLID, pi.GIDPrefix)
			}
			for i := uint16(0); i < 1<<lmc; i++ {
				if o, dup := owner[pi.LID+i]; dup {
					t.Errorf("%s LID %d also %s's", key, pi.LID+i, o)
				}
				owner[pi.LID+i] = key
			}
			if p := sn.PortByLID(pi.LID); p == nil || p.GUID != n.PortGUID(port) {
				t.Errorf("%s: the snapshot has LID %d as %v", key, pi.LID, p)
			}
		}
	}
	// Walk every CA port to every LID of every other CA port by the LFTs.
	topo := map[string]*fabric.TopoNode{}
	for _, tn := range f.topo.Nodes {
		topo[tn.ID] = tn
	}
	for _, src := range cas {
		for _, dst := range cas {
			if src == dst {
				continue
			}
			dkey := fmt.Sprintf("%s/%d", dst.name, dst.port)
			for k := uint16(0); k < 1<<lmc; k++ {
				lid := c.lids[dkey] + k
				tp := topo[src.name].Ports[src.port]
				at, in := tp.Remote, tp.RemotePort
				var hops []hop
				for len(hops) < 64 {
					tn := topo[at]
					if tn.Type == mad.NodeTypeCA {
						break
					}
					lft := lfts[at]
					if int(lid) >= len(lft) || lft[lid] == mad.LinearFTNoRoute || lft[lid] == 0 {
						t.Fatalf("%s/%d -> LID %d: no route at %s (in by %d)", src.name, src.port, lid, at, in)
					}
					out := int(lft[lid])
					hops = append(hops, hop{at, out})
					nx := tn.Ports[out]
					at, in = nx.Remote, nx.RemotePort
				}
				if at != dst.name || in != dst.port {
					t.Fatalf("%s/%d -> LID %d (%s): ends at %s/%d after %v", src.name, src.port, lid, dkey, at, in, hops)
				}
				c.routes[fmt.Sprintf("%s/%d->%d", src.name, src.port, lid)] = hops
			}
		}
	}
	if len(sn.Nodes) != nodes {
		t.Errorf("snapshot has %d nodes, the fabric %d", len(sn.Nodes), nodes)
	}
	return c
}

func equalLIDs(a, b map[string]uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestSweep(t *testing.T) {
	cases := []struct {
		name, text, routing string
	}{
		{"net", readTopo(t, "../fabric/testdata/net"), RoutingMinHop},
		{"2sw2path4hca", readTopo(t, "../fabric/testdata/net.2sw2path4hca"), RoutingMinHop},
		{"2sw2path4hca-updn", readTopo(t, "../fabric/testdata/net.2sw2path4hca"), RoutingUpDown},
		{"fattree", readTopo(t, "../fabric/testdata/fattree.ibnetdiscover"), RoutingMinHop},
		{"fattree-updn", readTopo(t, "../fabric/testdata/fattree.ibnetdiscover"), RoutingUpDown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := openTopo(t, tc.text)
			m := startSM(t, f, f.firstCA(t), 1, Config{Routing: tc.routing})
			if m.Subnet() != nil {
				t.Fatal("a snapshot before the first sweep")
			}
			sweep(t, m)
			st := m.Stats()
			t.Logf("first sweep: %v, %d SMPs, %d sets", st.LastSweep, st.Sent, st.LastSets)
			if m.State() != mad.SMStateMaster {
				t.Fatalf("state %d", m.State())
			}
			c1 := checkSubnet(t, f, m, 0)
			// A second sweep finds everything as the first left it.
			sweep(t, m)
			if st := m.Stats(); st.LastSets != 0 || st.Sweeps != 2 || m.Subnet().Sweep != 2 {
				t.Errorf("second sweep: %+v", st)
			}
			c2 := checkSubnet(t, f, m, 0)
			if !equalLIDs(c1.lids, c2.lids) {
				t.Errorf("LIDs moved: %v then %v", c1.lids, c2.lids)
			}
			if tc.routing == RoutingUpDown {
				checkUpDown(t, f, c2)
			}
		})
	}
}

// checkUpDown checks every walked route of a fat tree goes up then down:
// leaf, spine, leaf at most (no route turns down then up).
func checkUpDown(t *testing.T, f *testFabric, c checked) {
	t.Helper()
	for k, hops := range c.routes {
		if len(hops) > 3 {
			t.Errorf("%s: %d switches %v", k, len(hops), hops)
		}
	}
}

// A new SM on a subnet an earlier SM managed keeps the LIDs the ports have
// (as OpenSM does), and a later sweep of the same SM keeps its own.
func TestLIDsKept(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	m1 := startSM(t, f, f.NodeByName("Hca1"), 1, Config{})
	sweep(t, m1)
	c1 := checkSubnet(t, f, m1, 0)
	m1.Close()
	m2 := startSM(t, f, f.NodeByName("Hca2"), 1, Config{})
	sweep(t, m2)
	c2 := checkSubnet(t, f, m2, 0)
	if !equalLIDs(c1.lids, c2.lids) {
		t.Errorf("LIDs under the first SM %v, under the second %v", c1.lids, c2.lids)
	}
	if m2.Stats().LastSets == 0 {
		t.Error("the second SM set nothing (its SM LID must change)")
	}
}

// With LMC 1 every CA port has two LIDs, and where there are two paths
// (two links between the switches) its two LIDs take different ones.
func TestLMC(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{LMC: 1})
	sweep(t, m)
	c := checkSubnet(t, f, m, 1)
	for _, src := range []string{"Hca1/1", "Hca3/1"} {
		for _, dst := range []string{"Hca2/1", "Hca4/1"} {
			lid := c.lids[dst]
			a, b := c.routes[fmt.Sprintf("%s->%d", src, lid)], c.routes[fmt.Sprintf("%s->%d", src, lid+1)]
			if len(a) != 2 || len(b) != 2 || a[0].port == b[0].port {
				t.Errorf("%s to %s: LID %d by %v, LID %d by %v: want two paths", src, dst, lid, a, lid+1, b)
			}
		}
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runSM(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled && err != ErrClosed {
			t.Errorf("Run: %v", err)
		}
	})
}

// A link between the switches goes down: its switches trap, the SM sweeps
// and routes every LID over the other link.
func TestRerouteOnTrap(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{SweepInterval: time.Hour})
	runSM(t, m)
	waitFor(t, 10*time.Second, "the first sweep", func() bool { return m.Stats().Sweeps == 1 })
	c := checkSubnet(t, f, m, 0)
	sw1 := f.NodeByName("Switch1")
	// Down the link that carries some of the routes.
	used := 0
	for _, hops := range c.routes {
		for _, h := range hops {
			if h.sw == "Switch1" && h.port == 3 {
				used++
			}
		}
	}
	if used == 0 {
		t.Fatal("no route uses Switch1 port 3")
	}
	if err := f.SetLink(sw1, 3, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a sweep after the trap", func() bool { return m.Stats().Sweeps >= 2 })
	st := m.Stats()
	t.Logf("reroute: sweep %v with %d sets", st.LastSweep, st.LastSets)
	if st.Traps == 0 {
		t.Errorf("no trap: %+v", st)
	}
	c2 := checkSubnet(t, f, m, 0)
	for k, hops := range c2.routes {
		for _, h := range hops {
			if h.port == 3 {
				t.Errorf("%s still routed by port 3: %v", k, hops)
			}
		}
	}
	if !equalLIDs(c.lids, c2.lids) {
		t.Errorf("LIDs moved: %v then %v", c.lids, c2.lids)
	}
	// The link comes back: the SM sweeps again and brings its ports to ACTIVE.
	if err := f.SetLink(sw1, 3, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a sweep after the link came back", func() bool {
		return m.Stats().Sweeps >= 3 && portInfo(t, f, sw1, 3).PortState == mad.PortStateActive
	})
	checkSubnet(t, f, m, 0)
}

// A light sweep notices what no trap told: a port left in INIT.
func TestLightSweep(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net"))
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{})
	sweep(t, m)
	ctx := context.Background()
	if m.lightSweep(ctx) {
		t.Fatal("a light sweep of an unchanged subnet asks for a heavy one")
	}
	// A CA port goes down and up (a reboot): INIT, without a trap to
	// this SM (the port's SM LID is gone with its state).
	n := f.NodeByName("Hca2")
	for port := 1; port <= n.NumPorts(); port++ {
		if portInfo(t, f, n, port).PortState == mad.PortStateActive {
			pi := portInfo(t, f, n, port)
			pi.PortState = mad.PortStateDown
			b := make([]byte, 64)
			pi.Encode(b)
			// Set DOWN through the fabric's SMA, as a local reset would.
			cl, err := f.Attach(n, port, func(*fabric.Datagram) {})
			if err != nil {
				t.Fatal(err)
			}
			smp := make([]byte, mad.Size)
			s, _ := mad.NewDirectedSMP(smp, mad.MethodSet, mad.SMAttrPortInfo, uint32(port), 1, []byte{0})
			copy(s.Data(), b)
			if err := cl.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: smp}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the port to leave ACTIVE", func() bool {
				return portInfo(t, f, n, port).PortState != mad.PortStateActive
			})
			cl.Close()
			break
		}
	}
	if !m.lightSweep(ctx) {
		t.Fatal("the light sweep missed the port state change")
	}
	sweep(t, m)
	checkSubnet(t, f, m, 0)
}

// Two SMs elect one master. A better SM that arrives while another is
// master goes STANDBY; the master hands the subnet over to it at its next
// sweep (SMInfo HANDOVER, as OpenSM does) and stands by itself; when the
// master goes away, the standby takes over.
func TestElection(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	lo := startSM(t, f, f.NodeByName("Hca1"), 1, Config{Priority: 1, SweepInterval: 20 * time.Millisecond})
	// The low-priority SM starts first and becomes master.
	sweep(t, lo)
	if lo.State() != mad.SMStateMaster {
		t.Fatalf("lo: state %d", lo.State())
	}
	// The better one comes later: a master is there, it stands by.
	hi := startSM(t, f, f.NodeByName("Hca2"), 1, Config{Priority: 5, SweepInterval: 20 * time.Millisecond})
	ctx := context.Background()
	if err := hi.Sweep(ctx); !errorsIs(err, ErrNotMaster) {
		t.Fatalf("hi: Sweep %v, want ErrNotMaster", err)
	}
	if hi.State() != mad.SMStateStandby {
		t.Fatalf("hi: state %d", hi.State())
	}
	runSM(t, hi)
	// lo's next sweep hands over.
	if err := lo.Sweep(ctx); !errorsIs(err, ErrNotMaster) {
		t.Fatalf("lo: Sweep %v, want ErrNotMaster (handed over)", err)
	}
	if lo.State() != mad.SMStateStandby {
		t.Fatalf("lo: state %d after the handover", lo.State())
	}
	waitFor(t, 10*time.Second, "hi to take the subnet", func() bool {
		return hi.State() == mad.SMStateMaster && hi.Subnet() != nil
	})
	checkSubnet(t, f, hi, 0)
	sn := hi.Subnet()
	if p := sn.PortByGUID(f.NodeByName("Hca2").PortGUID(1)); p == nil || p.LID() != sn.SMLID {
		t.Errorf("SM LID %d, the new master's port %v", sn.SMLID, p)
	}
	// The master goes away: the standby takes over within a few polls.
	runSM(t, lo)
	hi.Close()
	waitFor(t, 10*time.Second, "lo to take over", func() bool {
		return lo.State() == mad.SMStateMaster && lo.Subnet().Sweep >= 2
	})
	checkSubnet(t, f, lo, 0)
	if sn := lo.Subnet(); sn.PortByGUID(f.NodeByName("Hca1").PortGUID(1)).LID() != sn.SMLID {
		t.Errorf("SM LID %d is not lo's", sn.SMLID)
	}
}

// Two SMs starting together: the higher priority becomes master, the
// other STANDBY, whatever the order of their first sweeps.
func TestElectionTogether(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net"))
	a := startSM(t, f, f.NodeByName("Hca1"), 1, Config{Priority: 2})
	b := startSM(t, f, f.NodeByName("Hca2"), 2, Config{Priority: 9})
	ctx := context.Background()
	// Both DISCOVERING: a yields to the better b, which becomes master.
	if err := a.Sweep(ctx); !errorsIs(err, ErrNotMaster) {
		t.Fatalf("a: %v", err)
	}
	if err := b.Sweep(ctx); err != nil {
		t.Fatalf("b: %v", err)
	}
	if a.State() != mad.SMStateStandby || b.State() != mad.SMStateMaster {
		t.Fatalf("states a %d b %d", a.State(), b.State())
	}
	checkSubnet(t, f, b, 0)
}

// SA GMPs that reach the SM's port go to Config.GMP.
func TestGMP(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net"))
	got := make(chan *Datagram, 1)
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{GMP: func(d *Datagram) { got <- d }})
	sweep(t, m)
	sn := m.Subnet()
	cl, err := f.Attach(f.NodeByName("Hca2"), 2, func(*fabric.Datagram) {})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := make([]byte, mad.Size)
	mm := mad.MAD(b)
	b[0], b[2] = 1, 2
	mm.SetMgmtClass(mad.ClassSubnAdm)
	mm.SetMethod(mad.MethodGet)
	mm.SetTransactionID(77)
	src := sn.PortByGUID(f.NodeByName("Hca2").PortGUID(2))
	if err := cl.Send(&fabric.Datagram{SLID: src.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if mad.MAD(d.MAD).TransactionID() != 77 || d.SLID != src.LID() || d.DQP != 1 {
			t.Errorf("GMP %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no GMP")
	}
}

func TestConfigErrors(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net"))
	for _, cfg := range []Config{{LMC: 8}, {Priority: 16}, {Routing: "ftree"}} {
		tr, err := FabricTransport(f.Fabric, f.NodeByName("Hca1"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(tr, cfg); !errorsIs(err, ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
		tr.Close()
	}
	if _, err := New(nil, Config{}); !errorsIs(err, ErrConfig) {
		t.Error(err)
	}
	if _, err := FabricTransport(f.Fabric, f.NodeByName("Switch1"), 1); err == nil {
		t.Error("a transport at a switch's external port")
	}
}

// TestSweepBig sweeps a generated fat tree of 612 nodes (12 spines, 24
// leaves of 24 CAs) when SOFTRDMA_SM_BIG is set, for the figures in
// DESIGN.md.
func TestSweepBig(t *testing.T) {
	if os.Getenv("SOFTRDMA_SM_BIG") == "" {
		t.Skip("set SOFTRDMA_SM_BIG=1 to sweep a 612-node fat tree")
	}
	for _, routing := range []string{RoutingMinHop, RoutingUpDown} {
		f := openTopo(t, fatTree(12, 24, 24))
		m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{Routing: routing})
		start := time.Now()
		sweep(t, m)
		d := time.Since(start)
		st := m.Stats()
		sweep(t, m)
		t.Logf("612 nodes, %s: first sweep %v (%d SMPs, %d sets, %d retries); second %v (%d sets)",
			routing, d.Round(time.Millisecond), st.Sent, st.LastSets, st.Retries, m.Stats().LastSweep.Round(time.Millisecond), m.Stats().LastSets)
		checkSubnet(t, f, m, 0)
		m.Close()
	}
}

func BenchmarkSweepFatTree(b *testing.B) {
	for _, tc := range []struct{ name, text string }{
		{"fattree40", readTopo(b, "../fabric/testdata/fattree.ibnetdiscover")},
		{"fattree612", fatTree(12, 24, 24)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				topo, _ := fabric.ParseTopology(strings.NewReader(tc.text), "bench")
				f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				var first *fabric.Node
				for _, tn := range topo.Nodes {
					if tn.Type == mad.NodeTypeCA {
						first = f.NodeByName(tn.ID)
						break
					}
				}
				tr, _ := FabricTransport(f, first, 1)
				m, _ := New(tr, Config{Logger: quiet})
				b.StartTimer()
				if err := m.Sweep(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.Close()
				f.Close()
				b.StartTimer()
			}
		})
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// mesh writes a w x h grid of switches joined to their neighbours (with
// wrap-around when torus is set), one CA on each.
func mesh(w, h int, torus bool) string {
	var b strings.Builder
	name := func(x, y int) string { return fmt.Sprintf("S%d_%d", (x+w)%w, (y+h)%h) }
	// Ports: 1 the CA, 2 east, 3 west, 4 north, 5 south.
	for y := range h {
		for x := range w {
			fmt.Fprintf(&b, "Switch\t5 %q\n[1]\t\"H%d_%d\"[1]\n", name(x, y), x, y)
			if x+1 < w || torus {
				fmt.Fprintf(&b, "[2]\t%q[3]\n", name(x+1, y))
			}
			if x > 0 || torus {
				fmt.Fprintf(&b, "[3]\t%q[2]\n", name(x-1, y))
			}
			if y+1 < h || torus {
				fmt.Fprintf(&b, "[4]\t%q[5]\n", name(x, y+1))
			}
			if y > 0 || torus {
				fmt.Fprintf(&b, "[5]\t%q[4]\n", name(x, y-1))
			}
			fmt.Fprintf(&b, "\nHca\t1 \"H%d_%d\"\n[1]\t%q[1]\n\n", x, y, name(x, y))
		}
	}
	return b.String()
}

// On a torus (where min-hop routes have cyclic channel dependencies),
// up/down routes every pair, and no walked route turns from a down hop to
// an up hop: the property that makes it deadlock-free.
func TestUpDownTorus(t *testing.T) {
	f := openTopo(t, mesh(4, 3, true))
	m := startSM(t, f, f.NodeByName("H0_0"), 1, Config{Routing: RoutingUpDown})
	sweep(t, m)
	c := checkSubnet(t, f, m, 0)
	g := newGraph(m.Subnet().Nodes)
	ud := newUpDown(g)
	if !complete(ud, len(g.sw)) {
		t.Fatal("up/down does not route every pair of the torus")
	}
	key := map[string]int{}
	for i, n := range g.sw {
		key[n.Desc] = ud.key[i]
	}
	for k, hops := range c.routes {
		// Each hop goes from hops[i].sw to hops[i+1].sw.
		down := false
		for i := 0; i+1 < len(hops); i++ {
			up := key[hops[i+1].sw] < key[hops[i].sw]
			if up && down {
				t.Errorf("%s turns down then up: %v", k, hops)
				break
			}
			down = down || !up
		}
	}
	if len(c.routes) != 12*11 {
		t.Errorf("%d routes walked", len(c.routes))
	}
}

// Two SMs running at once settle on one master, the higher priority, and
// stay so.
func TestElectionRunning(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	cfg := func(prio uint8) Config { return Config{Priority: prio, SweepInterval: 20 * time.Millisecond} }
	a := startSM(t, f, f.NodeByName("Hca1"), 1, cfg(3))
	b := startSM(t, f, f.NodeByName("Hca4"), 1, cfg(7))
	runSM(t, a)
	runSM(t, b)
	settled := func() bool {
		return b.State() == mad.SMStateMaster && a.State() == mad.SMStateStandby && b.Subnet() != nil
	}
	waitFor(t, 10*time.Second, "b MASTER and a STANDBY", settled)
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		if !settled() {
			t.Fatalf("states changed: a %d b %d", a.State(), b.State())
		}
	}
	checkSubnet(t, f, b, 0)
	if sn := b.Subnet(); sn.PortByGUID(f.NodeByName("Hca4").PortGUID(1)).LID() != sn.SMLID {
		t.Errorf("SM LID %d is not the master's", sn.SMLID)
	}
}

// The snapshot carries every CA port's P_Key table as the port has it
// (the fabric's default: the default partition, full member).
func TestSnapshotPKeys(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net.2sw2path4hca"))
	m := startSM(t, f, f.NodeByName("Hca1"), 1, Config{})
	sweep(t, m)
	for _, name := range []string{"Hca1", "Hca2", "Switch1"} {
		n := f.NodeByName(name)
		port := 1
		if n.Type() == mad.NodeTypeSwitch {
			port = 0
		}
		p := m.Subnet().PortByGUID(n.PortGUID(port))
		b, err := f.Query(n, mad.SMAttrPKeyTable, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := mad.ParsePKeyTable(b)
		if p == nil || len(p.PKeys) == 0 || p.PKeys[0] != want.PKey[0] || p.PKeys[0] != 0xFFFF {
			t.Errorf("%s: PKeys %v, the fabric's %v", name, p.PKeys, want.PKey[:4])
		}
	}
}

// A better SM joining a running master: it stands by, the master's light
// sweep finds it and hands the subnet over.
func TestHandoverRunning(t *testing.T) {
	f := openTopo(t, readTopo(t, "../fabric/testdata/net"))
	cfg := func(prio uint8) Config { return Config{Priority: prio, SweepInterval: 20 * time.Millisecond} }
	lo := startSM(t, f, f.NodeByName("Hca1"), 1, cfg(0))
	runSM(t, lo)
	waitFor(t, 10*time.Second, "lo MASTER", func() bool { return lo.State() == mad.SMStateMaster && lo.Subnet() != nil })
	hi := startSM(t, f, f.NodeByName("Hca2"), 2, cfg(15))
	runSM(t, hi)
	waitFor(t, 10*time.Second, "the handover", func() bool {
		return hi.State() == mad.SMStateMaster && lo.State() == mad.SMStateStandby && hi.Subnet() != nil
	})
	checkSubnet(t, f, hi, 0)
}
