package sa_test

import (
	"context"
	"fmt"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/wire/mad"
)

// reportPrinter is a Transport that prints the SA's answers and Reports.
type reportPrinter struct{}

func (reportPrinter) Send(d *sm.Datagram) error {
	m := mad.SAMAD(d.MAD)
	if m.MAD().Method() == mad.MethodReport {
		n, _ := mad.ParseNotice(m.Data()[:mad.NoticeFullSize])
		fmt.Printf("Report to LID %d QP %d: trap %d\n", d.DLID, d.DQP, n.TrapNumber)
		return nil
	}
	fmt.Printf("to LID %d: %s %s\n", d.DLID, mad.SAMethodName(m.MAD().Method()), mad.SAStatusName(m.MAD().Status()))
	return nil
}
func (reportPrinter) Recv(ctx context.Context) (*sm.Datagram, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (reportPrinter) Close() error { return nil }

// A port subscribes with Set(InformInfo) to GIDs going out of service;
// when the next snapshot lacks a port, Observe reports trap 65 to the
// subscriber's QP.
func ExampleServer_Observe() {
	ca := func(guid uint64, lid uint16) *sm.Node {
		n := &sm.Node{Info: mad.NodeInfo{NodeType: mad.NodeTypeCA, NumPorts: 1, NodeGUID: guid}}
		n.Ports = []*sm.Port{nil, {Node: n, Num: 1, GUID: guid + 1, Info: mad.PortInfo{LID: lid}}}
		return n
	}
	both := &sm.Subnet{Prefix: 0xfe80000000000000, SMLID: 1, Nodes: []*sm.Node{ca(0x10, 1), ca(0x20, 2)}}
	both.Index()
	one := &sm.Subnet{Prefix: 0xfe80000000000000, SMLID: 1, Nodes: []*sm.Node{ca(0x10, 1)}}
	one.Index()
	src := &snapshotPtr{s: both}
	srv, err := sa.New(src, reportPrinter{}, sa.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	b := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(b, mad.MethodSet, mad.SAAttrInformInfo, 1, &mad.SAHeader{})
	ii := mad.InformInfo{LIDRangeBegin: 0xFFFF, IsGeneric: true, Subscribe: true, Type: 0xFFFF,
		TrapNumber: sa.TrapGIDOutOfService, QPN: 5, ProducerType: 0xFFFFFF}
	ii.Encode(m.Data())
	srv.Handle(&sm.Datagram{SLID: 1, DLID: 1, SQP: 5, DQP: 1, PKey: 0xffff, MAD: b})

	srv.Observe(both)
	src.s = one
	srv.Observe(one)
	fmt.Println(srv.InformStats().Reports, "report(s)")
	// Output:
	// to LID 1: GetResp OK
	// Report to LID 1 QP 5: trap 65
	// 1 report(s)
}

// snapshotPtr is a Source whose Subnet the example changes.
type snapshotPtr struct{ s *sm.Subnet }

func (x *snapshotPtr) Subnet() *sm.Subnet { return x.s }
