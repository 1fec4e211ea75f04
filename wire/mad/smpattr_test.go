package mad

import (
	"errors"

	"testing"
)

// sampleNodeInfo and the others hold a distinct value in every field, each
// using the field's full width where it can.
func sampleNodeInfo() NodeInfo {
	return NodeInfo{BaseVersion: 1, ClassVersion: 1, NodeType: NodeTypeSwitch, NumPorts: 36,
		SystemImageGUID: 0x0002c90300001111, NodeGUID: 0x0002c90300002222, PortGUID: 0x0002c90300003333,
		PartitionCap: 8, DeviceID: 0xb924, Revision: 0xa1b2c3d4, LocalPortNum: 7, VendorID: 0x0002c9}
}

func samplePortInfo() PortInfo {
	return PortInfo{MKey: 0x1122334455667788, GIDPrefix: 0xfe80000000000000, LID: 0x1234, MasterSMLID: 0x0042,
		CapabilityMask: 0x02510868, DiagCode: 0x0bad, MKeyLeasePeriod: 0xfffe, LocalPortNum: 9,
		LinkWidthEnabled: 3, LinkWidthSupported: 0x13, LinkWidthActive: LinkWidth4X,
		LinkSpeedSupported: 7, PortState: PortStateArmed, PortPhysicalState: PhysStateLinkUp,
		LinkDownDefaultState: PhysStatePolling, MKeyProtectBits: 2, LMC: 5, LinkSpeedActive: 4,
		LinkSpeedEnabled: 0xf, NeighborMTU: MTU4096, MasterSMSL: 0xa, VLCap: 4, InitType: 0x9,
		VLHighLimit: 0xc1, VLArbitrationHighCap: 8, VLArbitrationLowCap: 0x3e, InitTypeReply: 0xb,
		MTUCap: MTU2048, VLStallCount: 7, HOQLife: 0x13, OperationalVLs: 3,
		PartitionEnforcementInbound: true, PartitionEnforcementOutbound: false, FilterRawInbound: false,
		FilterRawOutbound: true, MKeyViolations: 0x0102, PKeyViolations: 0x0304, QKeyViolations: 0x0506,
		GUIDCap: 32, ClientReregister: true, MulticastPKeyTrapSuppressionEnabled: 2, SubnetTimeOut: 0x11,
		RespTimeValue: 0x1f, LocalPhyErrors: 0xe, OverrunErrors: 0x5, MaxCreditHint: 0x7788,
		LinkSpeedExtActive2: 1, LinkSpeedExtSupported2: 3, LinkSpeedExtEnabled2: 5,
		LinkRoundTripLatency: 0xabcdef, CapabilityMask2: 0x00f1, LinkSpeedExtActive: 2,
		LinkSpeedExtSupported: 0xb, LinkSpeedExtEnabled: 0x1e}
}

func sampleSwitchInfo() SwitchInfo {
	return SwitchInfo{LinearFDBCap: 49152, RandomFDBCap: 0x0102, MulticastFDBCap: 1024, LinearFDBTop: 0xbfff,
		DefaultPort: 1, DefaultMulticastPrimaryPort: 0xfe, DefaultMulticastNotPrimaryPort: 0xfd,
		LifeTimeValue: 0x12, PortStateChange: true, OptimizedSLtoVLMappingProgramming: 2,
		LIDsPerPort: 0x0304, PartitionEnforcementCap: 32, InboundEnforcementCap: true,
		OutboundEnforcementCap: false, FilterRawInboundCap: true, FilterRawOutboundCap: false,
		EnhancedPort0: true, MulticastFDBTop: 0xc3ff}
}

func TestNodeAttrRoundTrip(t *testing.T) {
	b := make([]byte, 64)
	ni := sampleNodeInfo()
	ni.Encode(b)
	if got, err := ParseNodeInfo(b); err != nil || got != ni {
		t.Errorf("NodeInfo: %+v, %v", got, err)
	}
	pi := samplePortInfo()
	pi.Encode(b)
	if got, err := ParsePortInfo(b); err != nil || got != pi {
		t.Errorf("PortInfo:\n got %+v, %v\nwant %+v", got, err, pi)
	}
	si := sampleSwitchInfo()
	si.Encode(b)
	if got, err := ParseSwitchInfo(b); err != nil || got != si {
		t.Errorf("SwitchInfo:\n got %+v, %v\nwant %+v", got, err, si)
	}
	nd := NodeDescription{Description: "ibsw1 HCA-1"}
	nd.Encode(b)
	if got, err := ParseNodeDescription(b); err != nil || got != nd {
		t.Errorf("NodeDescription: %+v, %v", got, err)
	}
}

func TestAttrNames(t *testing.T) {
	for _, c := range []struct {
		c    Class
		a    AttributeID
		want string
	}{
		{ClassSubnLID, SMAttrPortInfo, "PortInfo"},
		{ClassSubnDirected, SMAttrNodeInfo, "NodeInfo"},
		{ClassCM, 0x0011, "MRA"},
		{ClassPerf, PerfAttrPortCounters, "PortCounters"},
		{ClassPerf, AttrClassPortInfo, "ClassPortInfo"},
		{ClassSubnLID, 0x00ff, "AttributeID(0x00ff)"},
		{Class(0x09), SMAttrNodeInfo, "AttributeID(0x0011)"},
	} {
		if got := AttrName(c.c, c.a); got != c.want {
			t.Errorf("AttrName(%v, %#x) = %q, want %q", c.c, uint16(c.a), got, c.want)
		}
	}
}

// TestNodeAttrTruncated feeds every parser each length short of its size.
func TestNodeAttrTruncated(t *testing.T) {
	for name, c := range map[string]struct {
		size  int
		parse func([]byte) error
	}{
		"NodeInfo":        {NodeInfoSize, func(b []byte) error { _, err := ParseNodeInfo(b); return err }},
		"NodeDescription": {NodeDescriptionSize, func(b []byte) error { _, err := ParseNodeDescription(b); return err }},
		"PortInfo":        {PortInfoSize, func(b []byte) error { _, err := ParsePortInfo(b); return err }},
		"SwitchInfo":      {SwitchInfoSize, func(b []byte) error { _, err := ParseSwitchInfo(b); return err }},
	} {
		for n := 0; n < c.size; n++ {
			if err := c.parse(make([]byte, n)); !errors.Is(err, ErrTruncated) {
				t.Errorf("%s of %d bytes: %v", name, n, err)
			}
		}
		if err := c.parse(make([]byte, c.size)); err != nil {
			t.Errorf("%s of %d bytes: %v", name, c.size, err)
		}
	}
}
