package sm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// The SM sweeps an in-process fabric of one switch and two CAs from
// HcaA's port: every port gets a LID and becomes ACTIVE.
func Example() {
	topo, _ := fabric.ParseTopology(strings.NewReader(`
Switch	4 "Sw1"
[1]	"HcaA"[1]
[2]	"HcaB"[1]

Hca	1 "HcaA"
[1]	"Sw1"[1]

Hca	1 "HcaB"
[1]	"Sw1"[2]
`), "example")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	t, err := sm.FabricTransport(f, f.NodeByName("HcaA"), 1)
	if err != nil {
		panic(err)
	}
	m, err := sm.New(t, sm.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	if err := m.Sweep(context.Background()); err != nil {
		panic(err)
	}
	sn := m.Subnet()
	for _, n := range sn.Nodes {
		for _, p := range n.Ports {
			if p != nil && (n.Switch == nil || p.Num == 0) {
				fmt.Printf("%s port %d: LID %d state %d\n", n.Desc, p.Num, p.LID(), n.Ports[max(p.Num, 1)].Info.PortState)
			}
		}
	}
	fmt.Println("SM LID", sn.SMLID)
	// Output:
	// HcaA port 1: LID 1 state 4
	// Sw1 port 0: LID 2 state 4
	// HcaB port 1: LID 3 state 4
	// SM LID 1
}

// The SM as an ibsim client: against Linux ibsim (started as
// `IBSIM_SOCKNAME=sim ibsim -s net`) or softrdma fabric -sm=false, at the
// node Hca1, sweeping until interrupted.
func ExampleIbsimTransport() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, err := sm.IbsimTransport(ctx, ibsim.ClientConfig{SockName: "sim", Node: "Hca1"})
	if err != nil {
		fmt.Println("no ibsim server:", err)
		return
	}
	m, err := sm.New(t, sm.Config{Routing: sm.RoutingUpDown, SweepInterval: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	m.Run(ctx) // until ctx ends
	if sn := m.Subnet(); sn != nil {
		fmt.Println("nodes:", len(sn.Nodes), "SM LID:", sn.SMLID)
	}
}

// With a partition policy the sweep writes every CA port's P_Key table;
// SetMulticast then programs a group into the switch's MFT (the SA's
// joins call it when the SA runs beside the SM: sa.Attach).
func ExampleManager_SetMulticast() {
	topo, _ := fabric.ParseTopology(strings.NewReader(`
Switch	4 "Sw1"
[1]	"HcaA"[1]
[2]	"HcaB"[1]
[3]	"HcaC"[1]

Hca	1 "HcaA"
[1]	"Sw1"[1]

Hca	1 "HcaB"
[1]	"Sw1"[2]

Hca	1 "HcaC"
[1]	"Sw1"[3]
`), "example")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := fabric.New(topo, &fabric.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	ps, err := policy.ParsePartitions(strings.NewReader("Default=0x7fff : ALL=full ;\nStorage=0x0010 : ALL_CAS=full ;\n"))
	if err != nil {
		panic(err)
	}
	t, err := sm.FabricTransport(f, f.NodeByName("HcaA"), 1)
	if err != nil {
		panic(err)
	}
	m, err := sm.New(t, sm.Config{Logger: quiet, Partitions: ps})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	if err := m.Sweep(context.Background()); err != nil {
		panic(err)
	}
	sn := m.Subnet()
	b := sn.PortByGUID(f.NodeByName("HcaB").PortGUID(1))
	c := sn.PortByGUID(f.NodeByName("HcaC").PortGUID(1))
	fmt.Printf("HcaB's P_Keys: %#x\n", b.PKeys[:2])

	m.SetMulticast(0xC000, []*sm.Port{b, c})
	for range 500 {
		raw, _ := f.Query(f.NodeByName("Sw1"), mad.SMAttrMulticastFT, mad.MulticastFTModifier(0, 0))
		if x, _ := mad.ParseMulticastFT(raw); x.PortMask[0] != 0 {
			fmt.Printf("Sw1 sends MLID 0xc000 to ports %016b\n", x.PortMask[0])
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// HcaB's P_Keys: [0xffff 0x8010]
	// Sw1 sends MLID 0xc000 to ports 0000000000001100
}
