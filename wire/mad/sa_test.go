package mad

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// saCodecs lists every SA record codec (and the SA and RMPP headers) with
// a sample that has a distinct, non-zero value in every field.
func saCodecs() []attrCodec {
	return []attrCodec{
		codec("NodeRecord", NodeRecordSize, NodeRecordSize, ParseNodeRecord, sampleNodeRecord()),
		codec("PortInfoRecord", PortInfoRecordSize, PortInfoRecordSize, ParsePortInfoRecord, samplePortInfoRecord()),
		codec("SwitchInfoRecord", SwitchInfoRecordSize, SwitchInfoRecordSize, ParseSwitchInfoRecord,
			SwitchInfoRecord{LID: 0x0102, Info: sampleSwitchInfo()}),
		codec("LinkRecord", LinkRecordSize, LinkRecordSize, ParseLinkRecord, sampleLinkRecord()),
		codec("ServiceRecord", ServiceRecordSize, ServiceRecordSize, ParseServiceRecord, sampleServiceRecord()),
		codec("PathRecord", PathRecordSize, PathRecordSize, ParsePathRecord, samplePathRecord()),
		codec("MCMemberRecord", MCMemberRecordSize, MCMemberRecordSize, ParseMCMemberRecord, sampleMCMemberRecord()),
		codec("SLToVLRecord", SLToVLRecordSize, SLToVLRecordSize, ParseSLToVLRecord,
			SLToVLRecord{LID: 0x0102, InPort: 3, OutPort: 4, Table: sampleSLToVL()}),
		codec("VLArbRecord", VLArbRecordSize, VLArbRecordSize, ParseVLArbRecord,
			VLArbRecord{LID: 0x0102, OutPort: 5, Block: 3, Table: sampleVLArb()}),
		codec("PKeyTableRecord", PKeyTableRecordSize, PKeyTableRecordSize, ParsePKeyTableRecord,
			PKeyTableRecord{LID: 0x0102, Block: 0x0304, Port: 6, Table: samplePKeyTable()}),
		codec("LinearFTRecord", LinearFTRecordSize, LinearFTRecordSize, ParseLinearFTRecord,
			LinearFTRecord{LID: 0x0102, Block: 0x0304, Table: sampleLinearFT()}),
		codec("MulticastFTRecord", MulticastFTRecordSize, MulticastFTRecordSize, ParseMulticastFTRecord,
			MulticastFTRecord{LID: 0x0102, Position: 0xa, Block: 0x1c3, Table: sampleMulticastFT()}),
		codec("GUIDInfoRecord", GUIDInfoRecordSize, GUIDInfoRecordSize, ParseGUIDInfoRecord,
			GUIDInfoRecord{LID: 0x0102, Block: 7, Table: sampleGUIDInfo()}),
		codec("SMInfoRecord", SMInfoRecordSize, SMInfoRecordSize, ParseSMInfoRecord,
			SMInfoRecord{LID: 0x0102, Info: sampleSMInfo()}),
		codec("InformInfo", InformInfoSize, InformInfoSize, ParseInformInfo, sampleInformInfo()),
		codec("InformInfoRecord", InformInfoRecordSize, InformInfoRecordSize, ParseInformInfoRecord,
			InformInfoRecord{SubscriberGID: MakeGID(0xfe80000000000000, 0x0002c90300000009), Enum: 0x0a0b,
				Info: sampleInformInfo()}),
		codec("MultiPathRecord", MultiPathRecordSize, MultiPathRecordSize, ParseMultiPathRecord, sampleMultiPathRecord()),
		codec("SAHeader", SAHeaderSize, SAHeaderSize, ParseSAHeader,
			SAHeader{SMKey: 0x0102030405060708, AttributeOffset: 14, ComponentMask: 0x8000000000000011}),
		codec("RMPPHeader", RMPPHeaderSize, RMPPHeaderSize, ParseRMPPHeader, sampleRMPP()),
	}
}

func sampleMultiPathRecord() MultiPathRecord {
	return MultiPathRecord{RawTraffic: true, FlowLabel: 0xabcde, HopLimit: 0x40, TClass: 0x12, Reversible: true,
		NumbPath: 0x7f, PKey: 0xffff, QoSClass: 0xabc, SL: 0x5, MTUSelector: SelectExactly, MTU: MTU2048,
		RateSelector: SelectExactly, Rate: Rate10Gbps, LifeSelector: SelectExactly, PacketLifeTime: 0x12,
		ServiceID: 0x1122334455667788, Independence: 2,
		SGIDs: []GID{MakeGID(0xfe80000000000000, 1), MakeGID(0xfe80000000000000, 2)},
		DGIDs: []GID{MakeGID(0xfe80000000000000, 3), MakeGID(0xfe80000000000000, 4), MakeGID(0xfe80000000000000, 5)}}
}

func sampleInformInfo() InformInfo {
	return InformInfo{GID: MakeGID(0xfe80000000000000, 0x0002c90300000007), LIDRangeBegin: 0x0102,
		LIDRangeEnd: 0x0304, IsGeneric: true, Subscribe: true, Type: 0x0506, TrapNumber: 0x0708,
		QPN: 0xabcdef, RespTimeValue: 0x13, ProducerType: 0x123456}
}

func sampleNodeRecord() NodeRecord {
	return NodeRecord{LID: 0x0c01, Info: sampleNodeInfo(), Desc: NodeDescription{Description: "softrdma hca 3"}}
}

func samplePortInfoRecord() PortInfoRecord {
	return PortInfoRecord{EndportLID: 0x0033, PortNum: 7, Options: 0x80, Info: samplePortInfo()}
}

func sampleLinkRecord() LinkRecord {
	return LinkRecord{FromLID: 0x0011, FromPort: 3, ToPort: 17, ToLID: 0xbfff}
}

func sampleServiceRecord() ServiceRecord {
	x := ServiceRecord{ID: 0x1000000000000abc, GID: MakeGID(0xfe80000000000000, 0x0002c90300000042),
		PKey: 0xffff, Lease: 3600, Name: "softrdma test service"}
	for i := range x.Key {
		x.Key[i] = byte(0xa0 + i)
	}
	for i := range x.Data8 {
		x.Data8[i] = byte(i + 1)
	}
	for i := range x.Data16 {
		x.Data16[i] = uint16(0x1000 + i)
	}
	for i := range x.Data32 {
		x.Data32[i] = uint32(0x20000000 + i)
	}
	x.Data64 = [2]uint64{0x3000000000000001, 0x3000000000000002}
	return x
}

func samplePathRecord() PathRecord {
	return PathRecord{ServiceID: 0x0000000001060000 | 0x4242, DGID: MakeGID(0xfe80000000000000, 0x0002c90300000002),
		SGID: MakeGID(0xfe80000000000000, 0x0002c90300000001), DLID: 0x0004, SLID: 0x0003, RawTraffic: true,
		FlowLabel: 0xabcde, HopLimit: 0x40, TClass: 0x12, Reversible: true, NumbPath: 0x7f, PKey: 0xffff,
		QoSClass: 0xabc, SL: 0x5, MTUSelector: SelectExactly, MTU: MTU2048, RateSelector: SelectExactly,
		Rate: Rate10Gbps, LifeSelector: SelectExactly, PacketLifeTime: 0x12, Preference: 3}
}

func sampleMCMemberRecord() MCMemberRecord {
	mgid := GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	return MCMemberRecord{MGID: mgid, PortGID: MakeGID(0xfe80000000000000, 0x0002c90300000001),
		QKey: 0x0b1b, MLID: 0xc001, MTUSelector: SelectExactly, MTU: MTU2048, TClass: 0x21, PKey: 0xffff,
		RateSelector: SelectExactly, Rate: Rate10Gbps, LifeSelector: SelectExactly, PacketLifeTime: 0x12,
		SL: 3, FlowLabel: 0x12345, HopLimit: 0x33, Scope: 2, JoinState: JoinFullMember, ProxyJoin: true}
}

func sampleRMPP() RMPPHeader {
	return RMPPHeader{Version: RMPPVersion, Type: RMPPTypeData, RRespTime: 0x13,
		Flags: RMPPFlagActive | RMPPFlagFirst, Status: 0x76, SegmentNumber: 0x01020304, Length: 0x05060708}
}

// TestSARoundTrip encodes each sample, parses it back, checks truncation
// and that encoding a parsed record gives the same bytes.
func TestSARoundTrip(t *testing.T) {
	for _, c := range saCodecs() {
		b := make([]byte, c.full)
		c.encode(c.sample, b)
		got, err := c.parse(b)
		if err != nil || !reflect.DeepEqual(got, c.sample) {
			t.Errorf("%s: round trip gave %+v, %v; want %+v", c.name, got, err, c.sample)
		}
		again := make([]byte, c.full)
		c.encode(got, again)
		if !bytes.Equal(b, again) {
			t.Errorf("%s: re-encoding differs", c.name)
		}
		for n := range c.size {
			if _, err := c.parse(b[:n]); !errors.Is(err, ErrTruncated) {
				t.Errorf("%s: %d bytes: %v, want ErrTruncated", c.name, n, err)
			}
		}
	}
}

// leaf is one settable field of a record, possibly inside a nested struct
// or an element of an integer array.
type leaf struct {
	name string // the field's name, Name[i] for an array element
	v    reflect.Value
}

func leaves(v reflect.Value, out []leaf) []leaf {
	for i := range v.NumField() {
		f, n := v.Field(i), v.Type().Field(i).Name
		switch {
		case f.Kind() == reflect.Struct:
			out = leaves(f, out)
		case f.Kind() == reflect.Array && f.Type().Elem().Kind() != reflect.Uint8 || n == "Data8":
			for j := range f.Len() {
				out = append(out, leaf{n + "[" + string(rune('0'+j/10)) + string(rune('0'+j%10)) + "]", f.Index(j)})
			}
		default:
			out = append(out, leaf{n, f})
		}
	}
	return out
}

// TestSAComponentLayout checks each record's component table against its
// codec: with one field set to all ones, the encoded record differs from
// the zero record on exactly the component(s) of that field.
func TestSAComponentLayout(t *testing.T) {
	type rec struct {
		name   string
		zero   any
		comps  []Component
		encode func(any) []byte
		// comp names a field's component when it is not the field's name.
		comp map[string]string
	}
	enc := func(size int, f func(any, []byte)) func(any) []byte {
		return func(v any) []byte { b := make([]byte, size); f(v, b); return b }
	}
	byName := map[string]attrCodec{}
	for _, c := range saCodecs() {
		byName[c.name] = c
	}
	arrays := func(prefix string, n int, base string) map[string]string {
		m := map[string]string{}
		for i := range n {
			k := prefix + "[" + string(rune('0'+i/10)) + string(rune('0'+i%10)) + "]"
			m[k] = base + "#" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		}
		return m
	}
	svc := map[string]string{"ID": "ServiceID", "GID": "ServiceGID", "PKey": "ServicePKey", "Lease": "ServiceLease",
		"Key": "ServiceKey", "Name": "ServiceName"}
	for _, a := range []map[string]string{arrays("Data8", 16, "ServiceData8"), arrays("Data16", 8, "ServiceData16"),
		arrays("Data32", 4, "ServiceData32"), arrays("Data64", 2, "ServiceData64")} {
		for k, v := range a {
			svc[k] = v
		}
	}
	recs := []rec{
		{"NodeRecord", NodeRecord{}, NodeRecordComponents, nil, map[string]string{"Description": "NodeDescription"}},
		{"PortInfoRecord", PortInfoRecord{}, PortInfoRecordComponents, nil, map[string]string{
			"LinkSpeedExtActive2": "Reserved@51", "LinkSpeedExtSupported2": "Reserved@51", "LinkSpeedExtEnabled2": "Reserved@51"}},
		{"SwitchInfoRecord", SwitchInfoRecord{}, SwitchInfoRecordComponents, nil, nil},
		{"LinkRecord", LinkRecord{}, LinkRecordComponents, nil, nil},
		{"ServiceRecord", ServiceRecord{}, ServiceRecordComponents, nil, svc},
		{"PathRecord", PathRecord{}, PathRecordComponents, nil, map[string]string{
			"ServiceID": "ServiceID(MSB)+ServiceID(LSB)", "LifeSelector": "PacketLifeTimeSelector"}},
		{"MCMemberRecord", MCMemberRecord{}, MCMemberRecordComponents, nil, map[string]string{
			"LifeSelector": "PacketLifeTimeSelector"}},
	}
	for _, r := range recs {
		c := byName[r.name]
		r.encode = enc(c.full, c.encode)
		zero := r.encode(r.zero)
		// Which components to expect for a field: by name, by name#i for
		// the i-th component of that name, or by bit (Reserved@51).
		expect := func(field string) map[uint8]bool {
			want := map[uint8]bool{}
			name := field
			if m, ok := r.comp[field]; ok {
				name = m
			}
			for _, part := range strings.Split(name, "+") {
				n, idx, hasIdx := strings.Cut(part, "#")
				n, bit, hasBit := strings.Cut(n, "@")
				k := 0
				for _, cp := range r.comps {
					if cp.Name != n {
						continue
					}
					switch {
					case hasBit && bit == itoa(int(cp.Bit)),
						hasIdx && idx == string(rune('0'+k/10))+string(rune('0'+k%10)),
						!hasIdx && !hasBit:
						want[cp.Bit] = true
					}
					k++
				}
			}
			return want
		}
		v := reflect.New(reflect.TypeOf(r.zero)).Elem()
		ls := leaves(v, nil)
		for _, l := range ls {
			v.Set(reflect.Zero(v.Type()))
			switch l.v.Kind() {
			case reflect.String:
				l.v.SetString(strings.Repeat("x", 64))
			default:
				setOnes(l.v, 64)
			}
			b := r.encode(v.Interface())
			want := expect(l.name)
			if r.name == "SwitchInfoRecord" && l.name != "LID" {
				want = map[uint8]bool{} // SwitchInfo's fields have no component of their own
			}
			if len(want) == 0 && !(r.name == "SwitchInfoRecord" && l.name != "LID") {
				t.Errorf("%s.%s: no component", r.name, l.name)
				continue
			}
			for _, cp := range r.comps {
				differs := !MatchComponents(r.comps, 1<<cp.Bit, zero, b)
				if differs != want[cp.Bit] {
					t.Errorf("%s.%s: component %d (%s) differs %v, want %v", r.name, l.name, cp.Bit, cp.Name, differs, want[cp.Bit])
				}
			}
		}
		// Every byte of the record belongs to at most one component.
		owner := make([]int, 8*len(zero))
		for _, cp := range r.comps {
			for i := cp.Off; i < cp.Off+cp.Len; i++ {
				if int(i) >= len(owner) {
					t.Errorf("%s: component %s runs past the record", r.name, cp.Name)
					break
				}
				if owner[i] != 0 {
					t.Errorf("%s: bit %d in two components", r.name, i)
					break
				}
				owner[i] = int(cp.Bit) + 1
			}
		}
	}
}

func TestMatchComponents(t *testing.T) {
	q, r := samplePathRecord(), samplePathRecord()
	r.SL = 7
	qb, rb := make([]byte, PathRecordSize), make([]byte, PathRecordSize)
	q.Encode(qb)
	r.Encode(rb)
	if !MatchComponents(PathRecordComponents, PathRecCompDLID|PathRecCompSGID, qb, rb) {
		t.Error("records equal on DLID and SGID do not match")
	}
	if MatchComponents(PathRecordComponents, PathRecCompDLID|PathRecCompSL, qb, rb) {
		t.Error("records that differ in SL match on SL")
	}
	if !MatchComponents(PathRecordComponents, 1<<63, qb, rb) {
		t.Error("a mask bit with no component excluded a record")
	}
}

func TestSAMAD(t *testing.T) {
	b := make([]byte, Size)
	h := SAHeader{SMKey: 7, ComponentMask: NodeRecCompLID}
	s, err := NewSAMAD(b, MethodGetTable, SAAttrNodeRecord, 0x1234, &h)
	if err != nil {
		t.Fatal(err)
	}
	s.SetRMPP(&RMPPHeader{Version: RMPPVersion, Type: RMPPTypeAck, Flags: RMPPFlagActive, SegmentNumber: 3, Length: 9})
	p, err := ParseSA(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Header() != h || p.MAD().Method() != MethodGetTable || p.MAD().ClassVersion() != SAClassVersion ||
		p.MAD().AttributeID() != SAAttrNodeRecord || p.MAD().TransactionID() != 0x1234 {
		t.Errorf("parsed %+v %+v", p.MAD().Fields(), p.Header())
	}
	if r := p.RMPP(); r.Type != RMPPTypeAck || !r.Active() || r.SegmentNumber != 3 || r.Length != 9 {
		t.Errorf("RMPP %+v", r)
	}
	if len(p.Data()) != SADataSize || SADataSize != 200 {
		t.Errorf("data %d bytes", len(p.Data()))
	}
	b[1] = byte(ClassPerf)
	if _, err := ParseSA(b); !errors.Is(err, ErrClass) {
		t.Errorf("PMA MAD: %v", err)
	}
	if _, err := ParseSA(b[:Size-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short: %v", err)
	}
	if _, err := NewSAMAD(b[:10], MethodGet, SAAttrNodeRecord, 1, &h); !errors.Is(err, ErrTruncated) {
		t.Errorf("NewSAMAD short: %v", err)
	}
	if RecordStride(NodeRecordSize) != 112 || RecordStride(LinkRecordSize) != 8 || RecordStride(PortInfoRecordSize) != 72 {
		t.Error("RecordStride")
	}
	if n := AttrName(ClassSubnAdm, SAAttrPathRecord); n != "PathRecord" {
		t.Errorf("AttrName = %q", n)
	}
	if n := SAStatusName(SAStatusNoRecords); n != "ERR_NO_RECORDS" {
		t.Errorf("SAStatusName = %q", n)
	}
	if n := SAMethodName(MethodGetTableResp); n != "GetTableResp" {
		t.Errorf("SAMethodName = %q", n)
	}
}

func TestLinkRate(t *testing.T) {
	for _, c := range []struct{ w, s, e, want uint8 }{
		{LinkWidth4X, LinkSpeedSDR, 0, Rate10Gbps},
		{LinkWidth4X, LinkSpeedQDR, 0, Rate40Gbps},
		{LinkWidth1X, LinkSpeedSDR, 0, Rate2_5Gbps},
		{LinkWidth12X, LinkSpeedDDR, 0, Rate60Gbps},
		{LinkWidth4X, LinkSpeedQDR, 1, Rate56Gbps},
		{LinkWidth4X, LinkSpeedQDR, 2, Rate100Gbps},
		{0, LinkSpeedSDR, 0, 0},
	} {
		if got := LinkRate(c.w, c.s, c.e); got != c.want {
			t.Errorf("LinkRate(%d, %d, %d) = %d, want %d", c.w, c.s, c.e, got, c.want)
		}
	}
	if RateMbps(Rate40Gbps) != 40000 || RateMbps(63) != 0 {
		t.Error("RateMbps")
	}
}

func FuzzSARecord(f *testing.F) {
	for _, c := range saCodecs() {
		b := make([]byte, c.full)
		c.encode(c.sample, b)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		for _, c := range saCodecs() {
			v, err := c.parse(b)
			if err != nil {
				if len(b) >= c.size && !(c.name == "MultiPathRecord" && errors.Is(err, ErrTooLong)) {
					t.Fatalf("%s: %d bytes rejected: %v", c.name, len(b), err)
				}
				continue
			}
			out := make([]byte, c.full)
			c.encode(v, out)
			again, err := c.parse(out)
			if err != nil || !reflect.DeepEqual(v, again) {
				t.Fatalf("%s: round trip changed %+v to %+v (%v)", c.name, v, again, err)
			}
			for j := range out {
				if out[j]&^b[j] != 0 {
					t.Fatalf("%s: re-encoding set bits %08b in byte %d", c.name, out[j]&^b[j], j)
				}
			}
		}
		if _, err := ParseSA(b); err == nil && len(b) != Size {
			t.Fatalf("ParseSA took %d bytes", len(b))
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("parsing changed the input")
		}
	})
}
