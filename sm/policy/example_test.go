package policy_test

import (
	"fmt"
	"strings"

	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// A partitions.conf with one compute partition: the P_Key table of a full
// member, of a limited member, and of the switch port facing the limited
// member.
func ExampleParsePartitions() {
	conf := `
Default=0x7fff : ALL=full ;
Compute=0x0001 : 0x0002c90300000011=full, 0x0002c90300000021 ;
`
	ps, err := policy.ParsePartitions(strings.NewReader(conf))
	if err != nil {
		fmt.Println(err)
		return
	}
	full := policy.PortRef{NodeType: mad.NodeTypeCA, PortGUID: 0x0002c90300000011, Port: 1}
	limited := policy.PortRef{NodeType: mad.NodeTypeCA, PortGUID: 0x0002c90300000021, Port: 1}
	sw := policy.PortRef{NodeType: mad.NodeTypeSwitch, Port: 4, PKeyCap: 32, Peer: &limited}
	in, out := ps.Enforce(sw)
	fmt.Printf("full member %#04x\nlimited member %#04x\nswitch port %#04x enforces %v/%v\n",
		ps.PKeys(full), ps.PKeys(limited), ps.PKeys(sw), in, out)
	// Output:
	// full member [0xffff 0x8001]
	// limited member [0xffff 0x0001]
	// switch port [0xffff 0x8001] enforces true/true
}

// The QoS options of an opensm.conf and what a CA port with VL0-7 and
// 8-entry arbitration tables gets: max_op_vls 3 has it operate VL0-3, so
// SL2VL's VLs are masked into them.
func ExampleParseQoS() {
	conf := `
max_op_vls 3
qos TRUE
qos_max_vls 4
qos_high_limit 10
qos_vlarb_high 0:255
qos_vlarb_low 1:64,2:192
qos_sl2vl 0,1,2,3,4,5,6,7,0,1,2,3,4,5,6,15
`
	q, err := policy.ParseQoS(strings.NewReader(conf))
	if err != nil {
		fmt.Println(err)
		return
	}
	p := q.Port(policy.PortRef{NodeType: mad.NodeTypeCA, Port: 1, VLCap: 4, VLArbHighCap: 8, VLArbLowCap: 8})
	fmt.Println("operational VLs code", p.OperationalVLs, "high limit", p.HighLimit)
	fmt.Println("SL2VL", p.SL2VL.VL)
	fmt.Println("high", p.VLArbHigh[0].Entry[:2], "low", p.VLArbLow[0].Entry[:3])
	// Output:
	// operational VLs code 3 high limit 10
	// SL2VL [0 1 2 3 0 1 2 3 0 1 2 3 0 1 2 15]
	// high [{0 255} {0 0}] low [{1 64} {2 192} {0 0}]
}

// The PortRefs of a CA port and of the switch port its link leads to, from
// the attributes an SM reads, and what the default configuration (no
// partitions file) gives them.
func ExampleSwitchPortRef() {
	caInfo := mad.NodeInfo{NodeType: mad.NodeTypeCA, NodeGUID: 0x10, PortGUID: 0x11, PartitionCap: 64}
	swInfo := mad.NodeInfo{NodeType: mad.NodeTypeSwitch, NodeGUID: 0x20, PortGUID: 0x20, PartitionCap: 64}
	pi := mad.PortInfo{VLCap: 4, VLArbitrationHighCap: 8, VLArbitrationLowCap: 8}
	ca := policy.EndPortRef(caInfo, pi, 1, false)
	sw := policy.SwitchPortRef(swInfo, mad.SwitchInfo{PartitionEnforcementCap: 32}, pi, 5, &ca)
	var ps *policy.Partitions // no partitions.conf
	in, out := ps.Enforce(sw)
	fmt.Printf("CA %#04x, switch port %#04x enforcing %v/%v\n", ps.PKeys(ca), ps.PKeys(sw), in, out)
	// Output:
	// CA [0xffff], switch port [0xffff] enforcing true/true
}

// A qos-policy.conf's ULP lines: RDS traffic on SL 4, one storage target
// on SL 6, everything else on SL 1.
func ExampleParseQoSPolicy() {
	conf := `
qos-ulps
    default                               : 1
    rds, port-num 18634                   : 4
    srp, target-port-guid 0x0002c90300000099 : 6
end-qos-ulps
`
	p, err := policy.ParseQoSPolicy(strings.NewReader(conf))
	if err != nil {
		fmt.Println(err)
		return
	}
	rds, _ := p.SL(policy.PathQoS{ServiceID: 0x0000000001060000 + 18634, HasServiceID: true, PKey: 0xffff})
	srp, _ := p.SL(policy.PathQoS{Dest: 0x0002c90300000099, PKey: 0xffff})
	other, _ := p.SL(policy.PathQoS{PKey: 0xffff})
	fmt.Println(rds, srp, other)
	// Output:
	// 4 6 1
}
