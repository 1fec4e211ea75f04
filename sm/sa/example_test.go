package sa_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/wire/mad"
)

// snapshot is a Source with a fixed Subnet.
type snapshot struct{ s *sm.Subnet }

func (x snapshot) Subnet() *sm.Subnet { return x.s }

// printer is a Transport that prints what the SA sends.
type printer struct{}

func (printer) Send(d *sm.Datagram) error {
	m := mad.SAMAD(d.MAD)
	r, _ := mad.ParseNodeRecord(m.Data())
	fmt.Printf("to LID %d: %s %s, LID %d is %q\n", d.DLID, mad.SAMethodName(m.MAD().Method()),
		mad.SAStatusName(m.MAD().Status()), r.LID, r.Desc.Description)
	return nil
}
func (printer) Recv(ctx context.Context) (*sm.Datagram, error) { <-ctx.Done(); return nil, ctx.Err() }
func (printer) Close() error                                   { return nil }

// An SA answering a NodeRecord Get from a one-node snapshot. In softrdma's
// SM the Source is the *sm.Manager, the Transport the SM's port, and
// Handle is its Config.GMP.
func Example() {
	n := &sm.Node{Desc: "hca-1", Info: mad.NodeInfo{NodeType: mad.NodeTypeCA, NumPorts: 1, NodeGUID: 0x10}}
	n.Ports = []*sm.Port{nil, {Node: n, Num: 1, GUID: 0x11, Info: mad.PortInfo{LID: 7}}}
	s := &sm.Subnet{Prefix: 0xfe80000000000000, Nodes: []*sm.Node{n}}
	s.Index()

	srv, err := sa.New(snapshot{s}, printer{}, sa.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	b := make([]byte, mad.Size)
	q, _ := mad.NewSAMAD(b, mad.MethodGet, mad.SAAttrNodeRecord, 1, &mad.SAHeader{ComponentMask: mad.NodeRecCompLID})
	rec := mad.NodeRecord{LID: 7}
	rec.Encode(q.Data())
	srv.Handle(&sm.Datagram{SLID: 7, DLID: 7, SQP: 1, DQP: 1, MAD: b})
	// Output:
	// to LID 7: GetResp OK, LID 7 is "hca-1"
}

// Route walks the switches' forwarding tables of a snapshot: here a CA,
// a switch and another CA.
func ExampleRoute() {
	sw := &sm.Node{Desc: "switch", Info: mad.NodeInfo{NodeType: mad.NodeTypeSwitch, NumPorts: 2},
		Switch: &mad.SwitchInfo{LinearFDBTop: 3}, LFT: []uint8{0xff, 0, 1, 2}}
	a := &sm.Node{Desc: "a", Info: mad.NodeInfo{NodeType: mad.NodeTypeCA, NumPorts: 1}}
	b := &sm.Node{Desc: "b", Info: mad.NodeInfo{NodeType: mad.NodeTypeCA, NumPorts: 1}}
	link := mad.PortInfo{NeighborMTU: mad.MTU2048, LinkWidthActive: mad.LinkWidth4X, LinkSpeedActive: mad.LinkSpeedQDR}
	sw.Ports = []*sm.Port{{Node: sw, GUID: 0x20, Info: mad.PortInfo{LID: 1}},
		{Node: sw, Num: 1, GUID: 0x20, Info: link}, {Node: sw, Num: 2, GUID: 0x20, Info: link}}
	pa, pb := link, link
	pa.LID, pb.LID = 2, 3
	a.Ports = []*sm.Port{nil, {Node: a, Num: 1, GUID: 0x11, Info: pa, Remote: sw.Ports[1]}}
	b.Ports = []*sm.Port{nil, {Node: b, Num: 1, GUID: 0x12, Info: pb, Remote: sw.Ports[2]}}
	sw.Ports[1].Remote, sw.Ports[2].Remote = a.Ports[1], b.Ports[1]
	s := &sm.Subnet{Nodes: []*sm.Node{sw, a, b}}
	s.Index()

	p, err := sa.Route(s, a.Ports[1], 3)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d hops to %s, MTU code %d, rate %d Mb/s\n", p.Hops, p.Dest.Node.Desc, p.MTU, mad.RateMbps(p.Rate))
	// Output:
	// 2 hops to b, MTU code 4, rate 40000 Mb/s
}

// Attach runs softrdma's SM with its SA beside it on a port of an
// in-process fabric: after a sweep the SA answers from the SM's snapshot.
func ExampleAttach() {
	f, err := os.Open("../../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		panic(err)
	}
	topo, err := fabric.ParseTopology(f, "net.2sw2path4hca")
	f.Close()
	if err != nil {
		panic(err)
	}
	fab, err := fabric.New(topo, nil)
	if err != nil {
		panic(err)
	}
	defer fab.Close()
	t, err := sm.FabricTransport(fab, fab.NodeByName("Hca1"), 1)
	if err != nil {
		panic(err)
	}
	x, err := sa.Attach(t, sm.Config{Logger: slog.New(slog.DiscardHandler)}, sa.Config{})
	if err != nil {
		panic(err)
	}
	defer x.Close()
	if err := x.Sweep(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(len(x.Subnet().Nodes), "nodes; SA at LID", x.Subnet().SMLID)
	// Output:
	// 6 nodes; SA at LID 1
}
