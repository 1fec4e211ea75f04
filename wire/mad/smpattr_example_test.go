package mad_test

import (
	"fmt"

	"github.com/softrdma/softrdma/wire/mad"
)

// An SMA answers an SM's Get(PortInfo) for port 1: it fills the
// attribute into the 64-byte SMP data, and the SM decodes it.
func ExamplePortInfo() {
	data := make([]byte, 64) // an SMP's data field
	pi := mad.PortInfo{
		GIDPrefix:         0xfe80000000000000,
		LID:               3,
		MasterSMLID:       1,
		CapabilityMask:    mad.PortCapIsTrapSupported | mad.PortCapIsSLMappingSupported,
		LocalPortNum:      1,
		LinkWidthActive:   mad.LinkWidth4X,
		PortState:         mad.PortStateActive,
		PortPhysicalState: mad.PhysStateLinkUp,
		NeighborMTU:       mad.MTU2048,
		VLCap:             4, // VL0-7
		MTUCap:            mad.MTU4096,
	}
	pi.Encode(data)

	got, err := mad.ParsePortInfo(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: LID %d, state %d, SM at LID %d\n",
		mad.AttrName(mad.ClassSubnDirected, mad.SMAttrPortInfo), got.LID, got.PortState, got.MasterSMLID)
	_, err = mad.ParsePortInfo(data[:40])
	fmt.Println(err)
	// Output:
	// PortInfo: LID 3, state 4, SM at LID 1
	// mad: truncated: PortInfo is 64 bytes, got 40
}

// A switch's PMA answers PortCounters; the data starts at PerfDataOffset
// of the MAD.
func ExamplePortCounters() {
	m := make([]byte, mad.Size)
	h := mad.HeaderFields{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassPerf, ClassVersion: 1,
		Method: mad.MethodGetResp, AttributeID: mad.PerfAttrPortCounters}
	h.Encode(m)
	pc := mad.PortCounters{PortSelect: 1, PortXmitData: 6624, PortRcvData: 6624, PortXmitPkts: 92, PortRcvPkts: 92}
	pc.Encode(m[mad.PerfDataOffset:])

	got, _ := mad.ParsePortCounters(mad.MAD(m)[mad.PerfDataOffset:])
	fmt.Println(mad.AttrName(mad.MAD(m).MgmtClass(), mad.MAD(m).AttributeID()), got.PortXmitPkts, got.PortXmitData*4, "bytes")
	// Output: PortCounters 92 26496 bytes
}
