package fabric_test

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// Two CAs cabled back to back, with the LIDs the topology gives them.
const cabled = `
Hca 1 "Hca1"
[1] "Hca2"[1] # lid 1 lmc 0 "Hca2" lid 2 4xQDR

Hca 1 "Hca2"
[1] "Hca1"[1] # lid 2 lmc 0 "Hca1" lid 1 4xQDR
`

// Two HCAs exchange a packet through the data plane. A management client
// plays the subnet manager's last step first (both ports to ARMED, then
// ACTIVE, by directed-route PortInfo Sets); then Hca1's HCA sends an RC
// SEND by LID and Hca2's receives it, VCRC and all.
func ExampleFabric_ConnectHCA() {
	topo, _ := fabric.ParseTopology(strings.NewReader(cabled), "example")
	f, _ := fabric.New(topo, nil)
	defer f.Close()

	// The SM's part: both ports ARMED, then ACTIVE.
	answers := make(chan *fabric.Datagram, 1)
	sm, _ := f.Attach(f.NodeByName("Hca1"), 1, func(d *fabric.Datagram) { answers <- d })
	defer sm.Close()
	tid := uint64(0)
	smp := func(method mad.Method, path []byte, data []byte) []byte {
		tid++
		b := make([]byte, mad.Size)
		s, _ := mad.NewDirectedSMP(b, method, mad.SMAttrPortInfo, 1, tid, path)
		copy(s.Data(), data)
		sm.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, MAD: b})
		return mad.SMP((<-answers).MAD).Data()
	}
	for _, state := range []uint8{mad.PortStateArmed, mad.PortStateActive} {
		for _, path := range [][]byte{{0}, {0, 1}} {
			pi, _ := mad.ParsePortInfo(smp(mad.MethodGet, path, nil))
			pi.PortState = state
			b := make([]byte, 64)
			pi.Encode(b)
			smp(mad.MethodSet, path, b)
		}
	}

	// The HCAs.
	hca1, err := f.ConnectHCA(f.NodeByName("Hca1"), 1)
	if err != nil {
		panic(err)
	}
	defer hca1.Close()
	hca2, _ := f.ConnectHCA(f.NodeByName("Hca2"), 1)
	defer hca2.Close()
	got := make(chan []byte, 1)
	hca2.Start(func(pkts [][]byte) {
		for _, b := range pkts {
			got <- append([]byte(nil), b...)
		}
	})
	a := hca1.Attr()
	fmt.Printf("Hca1: LID %d state %d MTU %d VLs %d\n", a.LID, a.State, a.MTU, a.OperVLs)

	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11}}
	payload := binary.BigEndian.AppendUint32(nil, 0xC0FFEE)
	pkt := make([]byte, wire.IBPacketLen(h.BTH.Opcode, len(payload), false))
	wire.BuildIB(pkt, &wire.IBFraming{LRH: wire.LRHFields{SL: 0, VL: a.SL2VL[0], SLID: a.LID, DLID: 2}}, &h, payload)
	if err := hca1.Send([][]byte{pkt}); err != nil {
		panic(err)
	}
	p, err := wire.ParseIB(<-got)
	if err != nil {
		panic(err)
	}
	fmt.Printf("Hca2 got %v from LID %d: %#x\n", p.Transport().BTH().Opcode(), p.LRH().SLID(), p.Transport().Payload())
	// Output:
	// Hca1: LID 1 state 4 MTU 4096 VLs 8
	// Hca2 got RC SEND_ONLY from LID 1: 0x00c0ffee
}
