package mad

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// attrCodec is one attribute codec under test, seen through any.
type attrCodec struct {
	name   string
	size   int // what Parse needs
	full   int // the largest buffer Encode fills (optional parts included)
	parse  func([]byte) (any, error)
	encode func(any, []byte)
	sample any
}

// codec builds an attrCodec from a parser and the pointer-receiver Encode.
func codec[T any](name string, size, full int, parse func([]byte) (T, error), sample T) attrCodec {
	return attrCodec{
		name: name, size: size, full: full,
		parse:  func(b []byte) (any, error) { v, err := parse(b); return v, err },
		encode: func(v any, b []byte) { t := v.(T); any(&t).(interface{ Encode([]byte) }).Encode(b) },
		sample: sample,
	}
}

// codecs lists every SM and PMA attribute codec with a sample value that
// has a distinct, non-zero value in every field.
func codecs() []attrCodec {
	return []attrCodec{
		codec("NodeInfo", NodeInfoSize, NodeInfoSize, ParseNodeInfo, sampleNodeInfo()),
		codec("NodeDescription", NodeDescriptionSize, NodeDescriptionSize, ParseNodeDescription,
			NodeDescription{Description: "ibsw1 HCA-1"}),
		codec("PortInfo", PortInfoSize, PortInfoSize, ParsePortInfo, samplePortInfo()),
		codec("SwitchInfo", SwitchInfoSize, SwitchInfoSize, ParseSwitchInfo, sampleSwitchInfo()),
		codec("GUIDInfo", GUIDInfoSize, GUIDInfoSize, ParseGUIDInfo, sampleGUIDInfo()),
		codec("PKeyTable", PKeyTableSize, PKeyTableSize, ParsePKeyTable, samplePKeyTable()),
		codec("SLToVLTable", SLToVLTableSize, SLToVLTableSize, ParseSLToVLTable, sampleSLToVL()),
		codec("VLArbTable", VLArbTableSize, VLArbTableSize, ParseVLArbTable, sampleVLArb()),
		codec("LinearFT", LinearFTSize, LinearFTSize, ParseLinearFT, sampleLinearFT()),
		codec("MulticastFT", MulticastFTSize, MulticastFTSize, ParseMulticastFT, sampleMulticastFT()),
		codec("SMInfo", SMInfoSize, SMInfoSize, ParseSMInfo, sampleSMInfo()),
		codec("Notice", NoticeSize, NoticeFullSize, ParseNotice, sampleNotice()),
		codec("PortCounters", PortCountersSize, PortCountersSize, ParsePortCounters, samplePortCounters()),
		codec("PortCountersExt", PortCountersExtSize, PortCountersExtFullSize, ParsePortCountersExt,
			samplePortCountersExt()),
		codec("ClassPortInfo", ClassPortInfoSize, ClassPortInfoSize, ParseClassPortInfo, sampleClassPortInfo()),
	}
}

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

func sampleGUIDInfo() GUIDInfo {
	var x GUIDInfo
	for i := range x.GUID {
		x.GUID[i] = 0x0002c90300000000 | uint64(i+1)<<8 | uint64(i)
	}
	return x
}

func samplePKeyTable() PKeyTable {
	var x PKeyTable
	x.PKey[0] = 0xffff
	for i := 1; i < len(x.PKey); i++ {
		x.PKey[i] = uint16(0x8000 | i*0x111)
	}
	return x
}

func sampleSLToVL() SLToVLTable {
	var x SLToVLTable
	for sl := range x.VL {
		x.VL[sl] = uint8(15 - sl)
	}
	return x
}

func sampleVLArb() VLArbTable {
	var x VLArbTable
	for i := range x.Entry {
		x.Entry[i] = VLArbEntry{VL: uint8(i % 16), Weight: uint8(255 - i)}
	}
	return x
}

func sampleLinearFT() LinearFT {
	var x LinearFT
	for i := range x.Port {
		x.Port[i] = uint8(i*7) % 37
	}
	x.Port[63] = LinearFTNoRoute
	return x
}

func sampleMulticastFT() MulticastFT {
	var x MulticastFT
	for i := range x.PortMask {
		x.PortMask[i] = uint16(1<<(i%16) | 0x8001)
	}
	return x
}

func sampleSMInfo() SMInfo {
	return SMInfo{GUID: 0x0002c90300000abc, SMKey: 0x0102030405060708, ActCount: 0xdeadbeef,
		Priority: 14, SMState: SMStateMaster}
}

func sampleNotice() Notice {
	n := Notice{IsGeneric: true, Type: NoticeTypeInformational, ProducerType: NodeTypeSwitch,
		TrapNumber: TrapCapabilityMaskChanged, IssuerLID: 0x0017, Toggle: true, Count: 0x7123}
	n.SetTrap144(Trap144Details{LID: 0x0017, OtherLocalChanges: true, CapabilityMask: 0x02510a6a,
		ChangeFlags: Trap144NodeDescriptionChange | Trap144CapabilityMask2Change, CapabilityMask2: 0x0031})
	n.DataDetails[53] = 0xee // not reserved as far as the codec knows: kept
	for i := range n.IssuerGID {
		n.IssuerGID[i] = byte(0xf0 + i)
	}
	return n
}

func samplePortCounters() PortCounters {
	return PortCounters{PortSelect: 3, CounterSelect: 0xf0f1, SymbolErrorCounter: 0x1011,
		LinkErrorRecoveryCounter: 0x12, LinkDownedCounter: 0x13, PortRcvErrors: 0x1415,
		PortRcvRemotePhysicalErrors: 0x1617, PortRcvSwitchRelayErrors: 0x1819, PortXmitDiscards: 0x1a1b,
		PortXmitConstraintErrors: 0x1c, PortRcvConstraintErrors: 0x1d, CounterSelect2: 0x1e,
		LocalLinkIntegrityErrors: 0xa, ExcessiveBufferOverrunErrors: 0x5, QP1Dropped: 0x2021,
		VL15Dropped: 0x2223, PortXmitData: 0x24252627, PortRcvData: 0x28292a2b,
		PortXmitPkts: 0x2c2d2e2f, PortRcvPkts: 0x30313233, PortXmitWait: 0x34353637}
}

func samplePortCountersExt() PortCountersExt {
	x := PortCountersExt{PortSelect: 2, CounterSelect: 0x00ff, CounterSelect2: 0x01020304}
	for i, p := range x.traffic() {
		*p = 0x1000000000000000*uint64(i+1) + uint64(i)
	}
	for i, p := range x.Errors.counters() {
		*p = 0x0100000000000000*uint64(i+1) + uint64(i+0x40)
	}
	return x
}

func sampleClassPortInfo() ClassPortInfo {
	x := ClassPortInfo{BaseVersion: 1, ClassVersion: 1, CapabilityMask: 0x0600, CapabilityMask2: 0x7fffffe,
		RespTimeValue: 18, RedirectTC: 0xa0, RedirectSL: 0xb, RedirectFL: 0xfedcb, RedirectLID: 0x0102,
		RedirectPKey: 0xffff, RedirectQP: 0xabcdef, RedirectQKey: GSIQKey, TrapTC: 0x33, TrapSL: 0x5,
		TrapFL: 0x12345, TrapLID: 0x0304, TrapPKey: 0x8001, TrapHL: 64, TrapQP: 1, TrapQKey: 0x11223344}
	for i := range 16 {
		x.RedirectGID[i], x.TrapGID[i] = byte(i+1), byte(0x80+i)
	}
	return x
}

// TestAttrRoundTrip encodes every sample and decodes it again, and checks
// that decoding never reads past the attribute: bytes after it are left
// alone by Encode.
func TestAttrRoundTrip(t *testing.T) {
	for _, c := range codecs() {
		b := make([]byte, c.full+8)
		for i := range b {
			b[i] = 0xa5
		}
		c.encode(c.sample, b)
		for i := c.full; i < len(b); i++ {
			if b[i] != 0xa5 {
				t.Errorf("%s: Encode wrote byte %d, past its %d bytes", c.name, i, c.full)
			}
		}
		got, err := c.parse(b[:c.full])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.sample) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.sample)
		}
	}
}

// TestAttrTruncated feeds every parser each length short of its size.
func TestAttrTruncated(t *testing.T) {
	for _, c := range codecs() {
		for n := 0; n < c.size; n++ {
			if _, err := c.parse(make([]byte, n)); !errors.Is(err, ErrTruncated) {
				t.Errorf("%s of %d bytes: %v", c.name, n, err)
			}
		}
		if _, err := c.parse(make([]byte, c.size)); err != nil {
			t.Errorf("%s of %d bytes: %v", c.name, c.size, err)
		}
	}
}

// TestAttrOptionalParts checks that the parts beyond the required size
// (Notice's issuer GID, PortCountersExtended's error counters) are decoded
// only from a buffer that holds them.
func TestAttrOptionalParts(t *testing.T) {
	b := make([]byte, NoticeFullSize)
	n := sampleNotice()
	n.Encode(b)
	short, err := ParseNotice(b[:NoticeSize])
	if err != nil || short.IssuerGID != [16]byte{} {
		t.Errorf("64-byte Notice: %v, issuer GID %x", err, short.IssuerGID)
	}
	short.IssuerGID = n.IssuerGID
	if short != n {
		t.Errorf("64-byte Notice: %+v", short)
	}
	// Encoding into 64 bytes writes no GID (and does not panic).
	n.Encode(make([]byte, NoticeSize))

	b = make([]byte, PortCountersExtFullSize)
	pc := samplePortCountersExt()
	pc.Encode(b)
	shortPC, err := ParsePortCountersExt(b[:PortCountersExtSize])
	if err != nil || shortPC.Errors != (PortErrorCountersExt{}) {
		t.Errorf("72-byte PortCountersExt: %v, %+v", err, shortPC.Errors)
	}
	pc.Encode(make([]byte, PortCountersExtSize))
}

func TestAttrNames(t *testing.T) {
	for _, c := range []struct {
		c    Class
		a    AttributeID
		want string
	}{
		{ClassSubnLID, SMAttrPortInfo, "PortInfo"},
		{ClassSubnDirected, SMAttrNodeInfo, "NodeInfo"},
		{ClassSubnDirected, SMAttrMulticastFT, "MulticastForwardingTable"},
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
	// The CM names stay as they were.
	if s := SMAttrNodeInfo.String(); s != "MRA" {
		t.Errorf("AttributeID(0x11).String() = %q", s)
	}
}

// field is where IBTA volume 1 puts one field of an attribute: its first
// bit (bit 0 is the most significant bit of byte 0) and its width.
type field struct {
	name       string
	off, width int
}

// layouts are the fields of each attribute as the tables of IBTA volume 1
// sections 13.4.8.1, 14.2.5 and 16.1 give them, written down from the
// tables, independently of the codecs.
var layouts = map[string][]field{
	"NodeInfo": {{"BaseVersion", 0, 8}, {"ClassVersion", 8, 8}, {"NodeType", 16, 8}, {"NumPorts", 24, 8},
		{"SystemImageGUID", 32, 64}, {"NodeGUID", 96, 64}, {"PortGUID", 160, 64}, {"PartitionCap", 224, 16},
		{"DeviceID", 240, 16}, {"Revision", 256, 32}, {"LocalPortNum", 288, 8}, {"VendorID", 296, 24}},
	"PortInfo": {{"MKey", 0, 64}, {"GIDPrefix", 64, 64}, {"LID", 128, 16}, {"MasterSMLID", 144, 16},
		{"CapabilityMask", 160, 32}, {"DiagCode", 192, 16}, {"MKeyLeasePeriod", 208, 16},
		{"LocalPortNum", 224, 8}, {"LinkWidthEnabled", 232, 8}, {"LinkWidthSupported", 240, 8},
		{"LinkWidthActive", 248, 8}, {"LinkSpeedSupported", 256, 4}, {"PortState", 260, 4},
		{"PortPhysicalState", 264, 4}, {"LinkDownDefaultState", 268, 4}, {"MKeyProtectBits", 272, 2},
		{"LMC", 277, 3}, {"LinkSpeedActive", 280, 4}, {"LinkSpeedEnabled", 284, 4}, {"NeighborMTU", 288, 4},
		{"MasterSMSL", 292, 4}, {"VLCap", 296, 4}, {"InitType", 300, 4}, {"VLHighLimit", 304, 8},
		{"VLArbitrationHighCap", 312, 8}, {"VLArbitrationLowCap", 320, 8}, {"InitTypeReply", 328, 4},
		{"MTUCap", 332, 4}, {"VLStallCount", 336, 3}, {"HOQLife", 339, 5}, {"OperationalVLs", 344, 4},
		{"PartitionEnforcementInbound", 348, 1}, {"PartitionEnforcementOutbound", 349, 1},
		{"FilterRawInbound", 350, 1}, {"FilterRawOutbound", 351, 1}, {"MKeyViolations", 352, 16},
		{"PKeyViolations", 368, 16}, {"QKeyViolations", 384, 16}, {"GUIDCap", 400, 8},
		{"ClientReregister", 408, 1}, {"MulticastPKeyTrapSuppressionEnabled", 409, 2},
		{"SubnetTimeOut", 411, 5}, {"RespTimeValue", 419, 5}, {"LocalPhyErrors", 424, 4},
		{"OverrunErrors", 428, 4}, {"MaxCreditHint", 432, 16}, {"LinkSpeedExtActive2", 449, 2},
		{"LinkSpeedExtSupported2", 451, 2}, {"LinkSpeedExtEnabled2", 453, 3},
		{"LinkRoundTripLatency", 456, 24}, {"CapabilityMask2", 480, 16}, {"LinkSpeedExtActive", 496, 4},
		{"LinkSpeedExtSupported", 500, 4}, {"LinkSpeedExtEnabled", 507, 5}},
	"SwitchInfo": {{"LinearFDBCap", 0, 16}, {"RandomFDBCap", 16, 16}, {"MulticastFDBCap", 32, 16},
		{"LinearFDBTop", 48, 16}, {"DefaultPort", 64, 8}, {"DefaultMulticastPrimaryPort", 72, 8},
		{"DefaultMulticastNotPrimaryPort", 80, 8}, {"LifeTimeValue", 88, 5}, {"PortStateChange", 93, 1},
		{"OptimizedSLtoVLMappingProgramming", 94, 2}, {"LIDsPerPort", 96, 16},
		{"PartitionEnforcementCap", 112, 16}, {"InboundEnforcementCap", 128, 1},
		{"OutboundEnforcementCap", 129, 1}, {"FilterRawInboundCap", 130, 1},
		{"FilterRawOutboundCap", 131, 1}, {"EnhancedPort0", 132, 1}, {"MulticastFDBTop", 144, 16}},
	"SMInfo": {{"GUID", 0, 64}, {"SMKey", 64, 64}, {"ActCount", 128, 32}, {"Priority", 160, 4},
		{"SMState", 164, 4}},
	"Notice": {{"IsGeneric", 0, 1}, {"Type", 1, 7}, {"ProducerType", 8, 24}, {"TrapNumber", 32, 16},
		{"IssuerLID", 48, 16}, {"Toggle", 64, 1}, {"Count", 65, 15}},
	"PortCounters": {{"PortSelect", 8, 8}, {"CounterSelect", 16, 16}, {"SymbolErrorCounter", 32, 16},
		{"LinkErrorRecoveryCounter", 48, 8}, {"LinkDownedCounter", 56, 8}, {"PortRcvErrors", 64, 16},
		{"PortRcvRemotePhysicalErrors", 80, 16}, {"PortRcvSwitchRelayErrors", 96, 16},
		{"PortXmitDiscards", 112, 16}, {"PortXmitConstraintErrors", 128, 8},
		{"PortRcvConstraintErrors", 136, 8}, {"CounterSelect2", 144, 8},
		{"LocalLinkIntegrityErrors", 152, 4}, {"ExcessiveBufferOverrunErrors", 156, 4},
		{"QP1Dropped", 160, 16}, {"VL15Dropped", 176, 16}, {"PortXmitData", 192, 32},
		{"PortRcvData", 224, 32}, {"PortXmitPkts", 256, 32}, {"PortRcvPkts", 288, 32},
		{"PortXmitWait", 320, 32}},
	"PortCountersExt": {{"PortSelect", 8, 8}, {"CounterSelect", 16, 16}, {"CounterSelect2", 32, 32},
		{"PortXmitData", 64, 64}, {"PortRcvData", 128, 64}, {"PortXmitPkts", 192, 64},
		{"PortRcvPkts", 256, 64}, {"PortUnicastXmitPkts", 320, 64}, {"PortUnicastRcvPkts", 384, 64},
		{"PortMulticastXmitPkts", 448, 64}, {"PortMulticastRcvPkts", 512, 64},
		{"Errors.SymbolErrorCounter", 576, 64}, {"Errors.LinkErrorRecoveryCounter", 640, 64},
		{"Errors.LinkDownedCounter", 704, 64}, {"Errors.PortRcvErrors", 768, 64},
		{"Errors.PortRcvRemotePhysicalErrors", 832, 64}, {"Errors.PortRcvSwitchRelayErrors", 896, 64},
		{"Errors.PortXmitDiscards", 960, 64}, {"Errors.PortXmitConstraintErrors", 1024, 64},
		{"Errors.PortRcvConstraintErrors", 1088, 64}, {"Errors.LocalLinkIntegrityErrors", 1152, 64},
		{"Errors.ExcessiveBufferOverrunErrors", 1216, 64}, {"Errors.VL15Dropped", 1280, 64},
		{"Errors.PortXmitWait", 1344, 64}, {"Errors.QP1Dropped", 1408, 64}},
	"ClassPortInfo": {{"BaseVersion", 0, 8}, {"ClassVersion", 8, 8}, {"CapabilityMask", 16, 16},
		{"CapabilityMask2", 32, 27}, {"RespTimeValue", 59, 5}, {"RedirectGID", 64, 128},
		{"RedirectTC", 192, 8}, {"RedirectSL", 200, 4}, {"RedirectFL", 204, 20}, {"RedirectLID", 224, 16},
		{"RedirectPKey", 240, 16}, {"RedirectQP", 264, 24}, {"RedirectQKey", 288, 32},
		{"TrapGID", 320, 128}, {"TrapTC", 448, 8}, {"TrapSL", 456, 4}, {"TrapFL", 460, 20},
		{"TrapLID", 480, 16}, {"TrapPKey", 496, 16}, {"TrapHL", 512, 8}, {"TrapQP", 520, 24},
		{"TrapQKey", 544, 32}},
}

// TestAttrLayout sets one field at a time to all ones, encodes, and checks
// that exactly the bits the layout table gives for it are set; and that
// every field of the struct is in the table.
func TestAttrLayout(t *testing.T) {
	for _, c := range codecs() {
		fields, ok := layouts[c.name]
		if !ok {
			continue
		}
		typ := reflect.TypeOf(c.sample)
		seen := map[string]bool{}
		for _, f := range fields {
			seen[f.name] = true
			v := reflect.New(typ).Elem()
			fv := v.FieldByName(f.name)
			if f.name[:min(len(f.name), 7)] == "Errors." {
				fv = v.FieldByName("Errors").FieldByName(f.name[7:])
			}
			if !fv.IsValid() {
				t.Errorf("%s has no field %s", c.name, f.name)
				continue
			}
			setOnes(fv, 64)
			b := make([]byte, c.full)
			c.encode(v.Interface(), b)
			setOnes(fv, f.width)
			for bit := 0; bit < 8*len(b); bit++ {
				set := b[bit/8]>>(7-bit%8)&1 != 0
				want := bit >= f.off && bit < f.off+f.width
				if set != want {
					t.Errorf("%s.%s: bit %d (byte %d) is %v, want %v", c.name, f.name, bit, bit/8, set, want)
					break
				}
			}
			// The parser reads the field back as width one bits, and
			// every other field as zero.
			got, err := c.parse(b)
			if err != nil || !reflect.DeepEqual(got, v.Interface()) {
				t.Errorf("%s.%s: parsed %+v, %v", c.name, f.name, got, err)
			}
		}
		for i := range typ.NumField() {
			n := typ.Field(i).Name
			if n == "Errors" || n == "DataDetails" || n == "IssuerGID" {
				continue
			}
			if !seen[n] {
				t.Errorf("%s.%s is not in the layout table", c.name, n)
			}
		}
	}
}

// setOnes sets an integer field to its low width bits set (all of them if
// width is 64 or more: Encode must keep only the field's own), a bool to
// true and a byte array to all 0xff.
func setOnes(v reflect.Value, width int) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if width >= 64 {
			v.SetUint(^uint64(0) >> (64 - v.Type().Bits()))
		} else {
			v.SetUint(1<<width - 1)
		}
	case reflect.Array:
		for i := range v.Len() {
			v.Index(i).SetUint(0xff)
		}
	default:
		panic(fmt.Sprint("setOnes: ", v.Kind()))
	}
}

// TestTableLayouts checks where the table attributes and the trap details
// put their entries, byte by byte, as IBTA volume 1 section 14.2.5 draws
// them.
func TestTableLayouts(t *testing.T) {
	b := make([]byte, 64)
	sl := SLToVLTable{VL: [16]uint8{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0}}
	sl.Encode(b)
	if want := []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}; !bytes.Equal(b[:8], want) {
		t.Errorf("SLtoVL: % x, want % x", b[:8], want)
	}
	var va VLArbTable
	va.Entry[0] = VLArbEntry{VL: 0xff, Weight: 0x40}
	va.Entry[31] = VLArbEntry{VL: 7, Weight: 255}
	va.Encode(b)
	if b[0] != 0x0f || b[1] != 0x40 || b[62] != 0x07 || b[63] != 0xff {
		t.Errorf("VLArb: % x", b)
	}
	var mf MulticastFT
	mf.PortMask[1] = 0x8002
	mf.Encode(b)
	if b[2] != 0x80 || b[3] != 0x02 {
		t.Errorf("MFT: % x", b)
	}
	g := GUIDInfo{GUID: [8]uint64{7: 0x0102030405060708}}
	g.Encode(b)
	if !bytes.Equal(b[56:], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("GUIDInfo: % x", b)
	}
	if m := PKeyTableModifier(5, 2); m != 0x00050002 {
		t.Errorf("PKeyTableModifier = %#x", m)
	}
	if m := SLToVLModifier(3, 4); m != 0x0304 {
		t.Errorf("SLToVLModifier = %#x", m)
	}
	if m := VLArbModifier(2, VLArbHighEntries0to31); m != 0x00030002 {
		t.Errorf("VLArbModifier = %#x", m)
	}
	if m := MulticastFTModifier(1, 0x1ff); m != 0x100001ff {
		t.Errorf("MulticastFTModifier = %#x", m)
	}

	// Traps: the data details start at byte 10 of the notice.
	var n Notice
	n.SetTrap128(0xabcd)
	n.Encode(b)
	if b[10] != 0xab || b[11] != 0xcd || n.Trap128() != 0xabcd {
		t.Errorf("trap 128: % x", b)
	}
	n.SetTrap129(0x1234, 9)
	n.Encode(b)
	if !bytes.Equal(b[10:16], []byte{0, 0, 0x12, 0x34, 9, 0}) {
		t.Errorf("trap 129: % x", b[10:16])
	}
	if lid, port := n.Trap129(); lid != 0x1234 || port != 9 {
		t.Errorf("Trap129() = %#x, %d", lid, port)
	}
	d := Trap144Details{LID: 0x0102, OtherLocalChanges: true, CapabilityMask: 0x03040506,
		ChangeFlags: 0x3f, CapabilityMask2: 0x0708}
	n.SetTrap144(d)
	n.Encode(b)
	if want := []byte{0, 0, 1, 2, 0, 1, 3, 4, 5, 6, 0, 0x3f, 7, 8, 0}; !bytes.Equal(b[10:25], want) {
		t.Errorf("trap 144: % x, want % x", b[10:25], want)
	}
	if got := n.Trap144(); got != d {
		t.Errorf("Trap144() = %+v", got)
	}
}
