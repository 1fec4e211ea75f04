package sa

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// expect compares the fields saquery printed with the values wanted:
// numbers whatever their base, other values as text.
func expect(t *testing.T, what string, got map[string]string, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: saquery printed no %s", what, k)
			continue
		}
		switch w := w.(type) {
		case string:
			if g != w {
				t.Errorf("%s: %s is %q, want %q", what, k, g, w)
			}
		default:
			var wn uint64
			switch w := w.(type) {
			case int:
				wn = uint64(w)
			case uint8:
				wn = uint64(w)
			case uint16:
				wn = uint64(w)
			case uint32:
				wn = uint64(w)
			case uint64:
				wn = w
			}
			if gn := num(t, g); gn != wn {
				t.Errorf("%s: %s is %s, want %#x", what, k, g, wn)
			}
		}
	}
}

func first(t *testing.T, what string, recs []map[string]string) map[string]string {
	t.Helper()
	if len(recs) == 0 {
		t.Fatalf("%s: saquery printed no record", what)
	}
	return recs[0]
}

func checkNodeRecord(t *testing.T, p *sm.Port, recs []map[string]string) {
	t.Helper()
	what := "NodeRecord " + p.Node.Desc
	r := first(t, what, recs)
	ni := p.Node.Info
	portGUID, portNum := ni.PortGUID, ni.LocalPortNum
	if p.Node.Switch == nil {
		portGUID, portNum = p.GUID, uint8(p.Num)
	}
	typ := "Channel Adapter"
	if p.Node.Switch != nil {
		typ = "Switch"
	}
	expect(t, what, r, map[string]any{"lid": p.LID(), "base_version": ni.BaseVersion, "class_version": ni.ClassVersion,
		"node_type": typ, "num_ports": ni.NumPorts, "sys_guid": ni.SystemImageGUID, "node_guid": ni.NodeGUID,
		"port_guid": portGUID, "partition_cap": ni.PartitionCap, "device_id": ni.DeviceID, "revision": ni.Revision,
		"port_num": portNum, "vendor_id": ni.VendorID, "NodeDescription": p.Node.Desc})
}

var linkStates = map[uint8]string{mad.PortStateDown: "Down", mad.PortStateInit: "Initialize",
	mad.PortStateArmed: "Armed", mad.PortStateActive: "Active"}

func checkPortInfoRecord(t *testing.T, p *sm.Port, recs []map[string]string) {
	t.Helper()
	what := "PortInfoRecord " + p.Node.Desc + " port " + itoa(p.Num)
	r := first(t, what, recs)
	pi := p.Info
	expect(t, what, r, map[string]any{"EndPortLid": p.LID(), "PortNum": p.Num, "GidPrefix": pi.GIDPrefix,
		"Lid": pi.LID, "SMLid": pi.MasterSMLID, "CapMask": pi.CapabilityMask, "LocalPort": pi.LocalPortNum,
		"LMC": pi.LMC, "LinkState": linkStates[pi.PortState], "NeighborMTU": 128 << pi.NeighborMTU,
		"MtuCap": 128 << pi.MTUCap, "VLArbHighCap": pi.VLArbitrationHighCap, "GuidCap": pi.GUIDCap,
		"SubnetTimeout": pi.SubnetTimeOut, "HoqLife": pi.HOQLife, "PkeyViolations": pi.PKeyViolations})
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func checkLinkRecord(t *testing.T, p *sm.Port, recs []map[string]string) {
	t.Helper()
	what := "LinkRecord " + p.Node.Desc + " port " + itoa(p.Num)
	expect(t, what, first(t, what, recs), map[string]any{"FromLID": p.LID(), "FromPort": p.Num,
		"ToLID": p.Remote.LID(), "ToPort": p.Remote.Num})
}

func checkSwitchInfoRecord(t *testing.T, n *sm.Node, recs []map[string]string) {
	t.Helper()
	what := "SwitchInfoRecord " + n.Desc
	si := n.Switch
	expect(t, what, first(t, what, recs), map[string]any{"LID": n.Ports[0].LID(), "LinearFDBCap": si.LinearFDBCap,
		"RandomFDBCap": si.RandomFDBCap, "MulticastFDBCap": si.MulticastFDBCap, "LinearFDBTop": si.LinearFDBTop,
		"DefaultPort": si.DefaultPort, "DefaultMulticastPrimaryPort": si.DefaultMulticastPrimaryPort,
		"DefaultMulticastNotPrimaryPort": si.DefaultMulticastNotPrimaryPort, "LIDsPerPort": si.LIDsPerPort,
		"PartitionEnforcementCap": si.PartitionEnforcementCap})
}

func gidText(prefix, guid uint64) string { return netip.AddrFrom16(mad.MakeGID(prefix, guid)).String() }

func checkPathRecord(t *testing.T, s *sm.Subnet, a, b *sm.Port, recs []map[string]string) {
	t.Helper()
	what := "PathRecord " + a.Node.Desc + " -> " + b.Node.Desc
	p, err := Route(s, a, b.LID())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if want := bfsHops(a, b); p.Hops != want {
		t.Errorf("%s: the LFTs OpenSM set take %d hops, the shortest is %d", what, p.Hops, want)
	}
	expect(t, what, first(t, what, recs), map[string]any{"slid": a.LID(), "dlid": b.LID(),
		"sgid": gidText(s.Prefix, a.GUID), "dgid": gidText(s.Prefix, b.GUID), "pkey": 0xffff,
		"num_path_revers": 0x80, "mtu": mad.SelectExactly<<6 | p.MTU, "rate": mad.SelectExactly<<6 | p.Rate,
		"pkt_life": mad.SelectExactly<<6 | 0x12, "sl": 0, "hop_flow_raw": 0})
}

func checkGroups(t *testing.T, sa *Server, recs []map[string]string) {
	t.Helper()
	gs := sa.Groups()
	if len(gs) != 1 || len(recs) < 2 {
		t.Fatalf("%d groups, saquery -g printed %d records", len(gs), len(recs))
	}
	g := gs[0].Record
	if len(gs[0].Members) != 2 {
		t.Errorf("group members %v", gs[0].Members)
	}
	for _, r := range recs[:2] { // one per member
		expect(t, "MCMemberRecord", r, map[string]any{"MGID": netip.AddrFrom16(g.MGID).String(), "Mlid": g.MLID,
			"Mtu": g.MTUSelector<<6 | g.MTU, "pkey": g.PKey, "Rate": g.RateSelector<<6 | g.Rate, "SL": g.SL})
	}
}
