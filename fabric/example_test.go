package fabric_test

import (
	"fmt"
	"strings"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/wire/mad"
)

const twoNodes = `
Switch 4 "Sw1"
[1] "Hca1"[1]

Hca 1 "Hca1"
[1] "Sw1"[1]
`

// A fabric from a topology: the nodes, their GUIDs as ibsim derives them,
// and a port's state read through its SMA.
func Example() {
	topo, err := fabric.ParseTopology(strings.NewReader(twoNodes), "example")
	if err != nil {
		panic(err)
	}
	f, err := fabric.New(topo, nil)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	for _, n := range f.Nodes() {
		fmt.Printf("%s type %d GUID %#x ports %d\n", n.Name(), n.Type(), n.GUID(), n.NumPorts())
	}
	b, _ := f.Query(f.NodeByName("Sw1"), mad.SMAttrPortInfo, 1)
	pi, _ := mad.ParsePortInfo(b)
	fmt.Println("Sw1 port 1: state", pi.PortState, "physical state", pi.PortPhysicalState)
	// Output:
	// Sw1 type 2 GUID 0x200000 ports 4
	// Hca1 type 1 GUID 0x100000 ports 1
	// Sw1 port 1: state 2 physical state 5
}

// A management client on Hca1 sends a directed-route NodeInfo Get one hop
// out, to the switch, and receives the answer.
func ExampleClient_Send() {
	topo, _ := fabric.ParseTopology(strings.NewReader(twoNodes), "example")
	f, _ := fabric.New(topo, nil)
	defer f.Close()
	answers := make(chan *fabric.Datagram, 1)
	c, err := f.Attach(f.NodeByName("Hca1"), 1, func(d *fabric.Datagram) { answers <- d })
	if err != nil {
		panic(err)
	}
	defer c.Close()
	b := make([]byte, mad.Size)
	mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, 1, []byte{0, 1})
	if err := c.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b}); err != nil {
		panic(err)
	}
	d := <-answers
	ni, _ := mad.ParseNodeInfo(mad.SMP(d.MAD).Data())
	fmt.Printf("status %d: node %#x type %d, reached on port %d\n", mad.SMP(d.MAD).Status(), ni.NodeGUID, ni.NodeType, ni.LocalPortNum)
	// Output:
	// status 0: node 0x200000 type 2, reached on port 1
}
