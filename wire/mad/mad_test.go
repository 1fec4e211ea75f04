// Unit tests: round trips of every message through EncodeCM, Parse and the
// views; bit-exact placement of every field against the offsets of IBTA
// chapter 12 (as in Linux's ibta_vol1_c12.h); truncation; header checks;
// code names; service IDs and the rdma_cm header.

package mad

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// pattern returns n non-zero bytes starting at start.
func pattern(n int, start byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = start + byte(i)
		if p[i] == 0 {
			p[i] = 0x5A
		}
	}
	return p
}

func gid(start byte) (g [16]byte) {
	copy(g[:], pattern(16, start))
	return g
}

// Sample messages: every field distinct and non-zero, bit fields at their
// maximum where the field is narrower than its Go type.

func sampleREQ() *REQFields {
	f := &REQFields{
		LocalCommID:             0x01020304,
		VendorID:                0xFFFFFF,
		ServiceID:               0x1112131415161718,
		LocalCAGUID:             0x2122232425262728,
		LocalQKey:               0x31323334,
		LocalQPN:                0xFFFFFF,
		ResponderResources:      0x41,
		LocalEECN:               0x424344,
		InitiatorDepth:          0x45,
		RemoteEECN:              0x464748,
		RemoteCMResponseTimeout: 31,
		TransportServiceType:    3,
		EndToEndFlowControl:     true,
		StartingPSN:             0x515253,
		LocalCMResponseTimeout:  0x15,
		RetryCount:              7,
		PKey:                    0x8001,
		PathMTU:                 15,
		RDCExists:               true,
		RNRRetryCount:           6,
		MaxCMRetries:            15,
		SRQ:                     true,
		ExtendedTransportType:   7,
		PrimaryPath: REQPathFields{
			LocalLID: 0x6162, RemoteLID: 0x6364, LocalGID: gid(0x70), RemoteGID: gid(0x80),
			FlowLabel: 0xFFFFF, PacketRate: 63, TrafficClass: 0x65, HopLimit: 0x66,
			SL: 15, SubnetLocal: true, LocalACKTimeout: 31,
		},
		AlternatePath: REQPathFields{
			LocalLID: 0x9192, RemoteLID: 0x9394, LocalGID: gid(0xA0), RemoteGID: gid(0xB0),
			FlowLabel: 0x12345, PacketRate: 0x2A, TrafficClass: 0x95, HopLimit: 0x96,
			SL: 9, SubnetLocal: true, LocalACKTimeout: 0x1E,
		},
		SAPSupported: true,
	}
	copy(f.PrivateData[:], pattern(REQPrivateDataSize, 0xC0))
	return f
}

func sampleMRA() *MRAFields {
	f := &MRAFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageMRAed: 3, ServiceTimeout: 31}
	copy(f.PrivateData[:], pattern(MRAPrivateDataSize, 0x10))
	return f
}

func sampleREJ() *REJFields {
	f := &REJFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageRejected: 3,
		RejectInfoLength: 127, Reason: RejectConsumer}
	copy(f.ARI[:], pattern(REJARISize, 0x20))
	copy(f.PrivateData[:], pattern(REJPrivateDataSize, 0x70))
	return f
}

func sampleREP() *REPFields {
	f := &REPFields{
		LocalCommID: 0x01020304, RemoteCommID: 0x05060708, LocalQKey: 0x090A0B0C,
		LocalQPN: 0xFFFFFF, LocalEECN: 0x111213, StartingPSN: 0x141516, VendorID: 0xFFFFFF,
		ResponderResources: 0x17, InitiatorDepth: 0x18, TargetACKDelay: 31, FailoverAccepted: 3,
		EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x2122232425262728,
	}
	copy(f.PrivateData[:], pattern(REPPrivateDataSize, 0x30))
	return f
}

func sampleRTU() *RTUFields {
	f := &RTUFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708}
	copy(f.PrivateData[:], pattern(RTUPrivateDataSize, 0x40))
	return f
}

func sampleDREQ() *DREQFields {
	f := &DREQFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, RemoteQPN: 0xFFFFFF}
	copy(f.PrivateData[:], pattern(DREQPrivateDataSize, 0x50))
	return f
}

func sampleDREP() *DREPFields {
	f := &DREPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708}
	copy(f.PrivateData[:], pattern(DREPPrivateDataSize, 0x60))
	return f
}

func sampleSIDRReq() *SIDRReqFields {
	f := &SIDRReqFields{RequestID: 0x01020304, PKey: 0xFFFF, ServiceID: 0x1112131415161718}
	copy(f.PrivateData[:], pattern(SIDRReqPrivateDataSize, 0x70))
	return f
}

func sampleSIDRRep() *SIDRRepFields {
	f := &SIDRRepFields{RequestID: 0x01020304, Status: SIDRRedirect, AdditionalInfoLength: 0xFF,
		VendorID: 0xFFFFFF, QPN: 0xFFFFFE, ServiceID: 0x1112131415161718, QKey: 0x21222324}
	copy(f.AdditionalInfo[:], pattern(SIDRRepAddInfoSize, 0x80))
	copy(f.PrivateData[:], pattern(SIDRRepPrivateDataSize, 0x90))
	return f
}

func sampleLAP() *LAPFields {
	f := &LAPFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, RemoteQPN: 0xABCDEF,
		RemoteCMResponseTimeout: 0x15, AlternatePath: REQPathFields{LocalLID: 0x1112, RemoteLID: 0x1314,
			LocalGID: wire.GID{0xfe, 0x80, 15: 0x21}, RemoteGID: wire.GID{0xfe, 0x80, 15: 0x22},
			FlowLabel: 0xABCDE, PacketRate: 0x2A, TrafficClass: 0xB8, HopLimit: 0x40, SL: 0xD,
			SubnetLocal: true, LocalACKTimeout: 0x13}}
	copy(f.PrivateData[:], pattern(LAPPrivateDataSize, 0xA0))
	return f
}

func sampleAPR() *APRFields {
	f := &APRFields{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, AdditionalInfoLength: 0x48,
		Status: APInvalidSL}
	copy(f.AdditionalInfo[:], pattern(APRAddInfoSize, 0xB0))
	copy(f.PrivateData[:], pattern(APRPrivateDataSize, 0xC0))
	return f
}

func allSamples() []Fields {
	return []Fields{sampleREQ(), sampleMRA(), sampleREJ(), sampleREP(), sampleRTU(),
		sampleDREQ(), sampleDREP(), sampleSIDRReq(), sampleSIDRRep(), sampleLAP(), sampleAPR()}
}

// sampleMADs returns one encoded MAD per message type.
func sampleMADs() [][]byte {
	var out [][]byte
	for i, f := range allSamples() {
		out = append(out, EncodeCM(make([]byte, Size), 0x0102030405060700+uint64(i), f))
	}
	return out
}

// decodeMessage returns the Fields of a view, as the matching *XFields.
func decodeMessage(msg Message) Fields {
	switch m := msg.(type) {
	case REQ:
		f := m.Fields()
		return &f
	case MRA:
		f := m.Fields()
		return &f
	case REJ:
		f := m.Fields()
		return &f
	case REP:
		f := m.Fields()
		return &f
	case RTU:
		f := m.Fields()
		return &f
	case DREQ:
		f := m.Fields()
		return &f
	case DREP:
		f := m.Fields()
		return &f
	case SIDRReq:
		f := m.Fields()
		return &f
	case SIDRRep:
		f := m.Fields()
		return &f
	case LAP:
		f := m.Fields()
		return &f
	case APR:
		f := m.Fields()
		return &f
	}
	return nil
}

// equalFields compares two decoded messages of the same kind by value.
func equalFields(a, b Fields) bool {
	switch x := a.(type) {
	case *REQFields:
		y, ok := b.(*REQFields)
		return ok && *x == *y
	case *MRAFields:
		y, ok := b.(*MRAFields)
		return ok && *x == *y
	case *REJFields:
		y, ok := b.(*REJFields)
		return ok && *x == *y
	case *REPFields:
		y, ok := b.(*REPFields)
		return ok && *x == *y
	case *RTUFields:
		y, ok := b.(*RTUFields)
		return ok && *x == *y
	case *DREQFields:
		y, ok := b.(*DREQFields)
		return ok && *x == *y
	case *DREPFields:
		y, ok := b.(*DREPFields)
		return ok && *x == *y
	case *SIDRReqFields:
		y, ok := b.(*SIDRReqFields)
		return ok && *x == *y
	case *SIDRRepFields:
		y, ok := b.(*SIDRRepFields)
		return ok && *x == *y
	case *LAPFields:
		y, ok := b.(*LAPFields)
		return ok && *x == *y
	case *APRFields:
		y, ok := b.(*APRFields)
		return ok && *x == *y
	}
	return false
}

func TestRoundTrip(t *testing.T) {
	for _, want := range allSamples() {
		t.Run(want.AttributeID().String(), func(t *testing.T) {
			clean := EncodeCM(make([]byte, Size), 0xDEADBEEF01, want)

			// Encoding over a dirty buffer must give the same bytes:
			// reserved bits are cleared.
			dirty := bytes.Repeat([]byte{0xA5}, Size+8)
			got := EncodeCM(dirty, 0xDEADBEEF01, want)
			if len(got) != Size || !bytes.Equal(got, clean) {
				t.Fatalf("encoding over a dirty buffer differs:\n%x\n%x", got, clean)
			}
			if !bytes.Equal(dirty[Size:], bytes.Repeat([]byte{0xA5}, 8)) {
				t.Fatal("EncodeCM wrote past Size")
			}

			m, err := Parse(clean)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Fields()
			wantH := HeaderFields{BaseVersion: 1, MgmtClass: ClassCM, ClassVersion: 2, Method: MethodSend,
				TransactionID: 0xDEADBEEF01, AttributeID: want.AttributeID()}
			if h != wantH {
				t.Fatalf("header %+v, want %+v", h, wantH)
			}
			msg := m.CM()
			if msg == nil || msg.AttributeID() != want.AttributeID() {
				t.Fatalf("CM() = %T, want attribute %v", msg, want.AttributeID())
			}
			if got := decodeMessage(msg); !equalFields(got, want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	want := HeaderFields{BaseVersion: 0x81, MgmtClass: 0x82, ClassVersion: 0x83, Method: 0x84,
		Status: 0x8586, ClassSpecific: 0x8788, TransactionID: 0x898A8B8C8D8E8F90,
		AttributeID: 0x9192, AttributeModifier: 0x93949596}
	b := bytes.Repeat([]byte{0xFF}, HeaderSize)
	want.Encode(b)
	if b[18] != 0 || b[19] != 0 {
		t.Errorf("reserved bytes %x, want zero", b[18:20])
	}
	if got := MAD(b).Fields(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// fieldSpec places a numeric field: segments of (byte, bit, width) in the
// IBTA Byte[Bit] notation, bit 0 being the most significant bit of the
// byte; the value's bits fill the segments most significant first.
type fieldSpec struct {
	name string
	size int // length of the buffer the accessors work on
	segs [][3]int
	get  func(b []byte) uint64
	set  func(b []byte, v uint64)
}

func (s fieldSpec) width() int {
	w := 0
	for _, g := range s.segs {
		w += g[2]
	}
	return w
}

func (s fieldSpec) mask() []byte {
	m := make([]byte, s.size)
	for _, g := range s.segs {
		for i := range g[2] {
			bit := g[0]*8 + g[1] + i
			m[bit/8] |= 0x80 >> (bit % 8)
		}
	}
	return m
}

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

func seg(byteOff, bitOff, width int) [][3]int { return [][3]int{{byteOff, bitOff, width}} }

// specs lists every numeric field of every view with its IBTA position.
func specs() []fieldSpec {
	const d = DataSize
	var s []fieldSpec
	add := func(name string, size int, segs [][3]int, get func([]byte) uint64, set func([]byte, uint64)) {
		s = append(s, fieldSpec{name, size, segs, get, set})
	}

	// MAD header.
	add("MAD.BaseVersion", Size, seg(0, 0, 8), func(b []byte) uint64 { return uint64(MAD(b).BaseVersion()) }, func(b []byte, v uint64) { MAD(b).SetBaseVersion(uint8(v)) })
	add("MAD.MgmtClass", Size, seg(1, 0, 8), func(b []byte) uint64 { return uint64(MAD(b).MgmtClass()) }, func(b []byte, v uint64) { MAD(b).SetMgmtClass(Class(v)) })
	add("MAD.ClassVersion", Size, seg(2, 0, 8), func(b []byte) uint64 { return uint64(MAD(b).ClassVersion()) }, func(b []byte, v uint64) { MAD(b).SetClassVersion(uint8(v)) })
	add("MAD.Method", Size, seg(3, 0, 8), func(b []byte) uint64 { return uint64(MAD(b).Method()) }, func(b []byte, v uint64) { MAD(b).SetMethod(Method(v)) })
	add("MAD.Status", Size, seg(4, 0, 16), func(b []byte) uint64 { return uint64(MAD(b).Status()) }, func(b []byte, v uint64) { MAD(b).SetStatus(uint16(v)) })
	add("MAD.ClassSpecific", Size, seg(6, 0, 16), func(b []byte) uint64 { return uint64(MAD(b).ClassSpecific()) }, func(b []byte, v uint64) { MAD(b).SetClassSpecific(uint16(v)) })
	add("MAD.TransactionID", Size, seg(8, 0, 64), func(b []byte) uint64 { return MAD(b).TransactionID() }, func(b []byte, v uint64) { MAD(b).SetTransactionID(v) })
	add("MAD.AttributeID", Size, seg(16, 0, 16), func(b []byte) uint64 { return uint64(MAD(b).AttributeID()) }, func(b []byte, v uint64) { MAD(b).SetAttributeID(AttributeID(v)) })
	add("MAD.AttributeModifier", Size, seg(20, 0, 32), func(b []byte) uint64 { return uint64(MAD(b).AttributeModifier()) }, func(b []byte, v uint64) { MAD(b).SetAttributeModifier(uint32(v)) })

	// REQ (table 106).
	add("REQ.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(REQ(b).LocalCommID()) }, func(b []byte, v uint64) { REQ(b).SetLocalCommID(uint32(v)) })
	add("REQ.VendorID", d, seg(5, 0, 24), func(b []byte) uint64 { return uint64(REQ(b).VendorID()) }, func(b []byte, v uint64) { REQ(b).SetVendorID(uint32(v)) })
	add("REQ.ServiceID", d, seg(8, 0, 64), func(b []byte) uint64 { return REQ(b).ServiceID() }, func(b []byte, v uint64) { REQ(b).SetServiceID(v) })
	add("REQ.LocalCAGUID", d, seg(16, 0, 64), func(b []byte) uint64 { return REQ(b).LocalCAGUID() }, func(b []byte, v uint64) { REQ(b).SetLocalCAGUID(v) })
	add("REQ.LocalQKey", d, seg(28, 0, 32), func(b []byte) uint64 { return uint64(REQ(b).LocalQKey()) }, func(b []byte, v uint64) { REQ(b).SetLocalQKey(wire.QKey(v)) })
	add("REQ.LocalQPN", d, seg(32, 0, 24), func(b []byte) uint64 { return uint64(REQ(b).LocalQPN()) }, func(b []byte, v uint64) { REQ(b).SetLocalQPN(wire.QPN(v)) })
	add("REQ.ResponderResources", d, seg(35, 0, 8), func(b []byte) uint64 { return uint64(REQ(b).ResponderResources()) }, func(b []byte, v uint64) { REQ(b).SetResponderResources(uint8(v)) })
	add("REQ.LocalEECN", d, seg(36, 0, 24), func(b []byte) uint64 { return uint64(REQ(b).LocalEECN()) }, func(b []byte, v uint64) { REQ(b).SetLocalEECN(uint32(v)) })
	add("REQ.InitiatorDepth", d, seg(39, 0, 8), func(b []byte) uint64 { return uint64(REQ(b).InitiatorDepth()) }, func(b []byte, v uint64) { REQ(b).SetInitiatorDepth(uint8(v)) })
	add("REQ.RemoteEECN", d, seg(40, 0, 24), func(b []byte) uint64 { return uint64(REQ(b).RemoteEECN()) }, func(b []byte, v uint64) { REQ(b).SetRemoteEECN(uint32(v)) })
	add("REQ.RemoteCMResponseTimeout", d, seg(43, 0, 5), func(b []byte) uint64 { return uint64(REQ(b).RemoteCMResponseTimeout()) }, func(b []byte, v uint64) { REQ(b).SetRemoteCMResponseTimeout(uint8(v)) })
	add("REQ.TransportServiceType", d, seg(43, 5, 2), func(b []byte) uint64 { return uint64(REQ(b).TransportServiceType()) }, func(b []byte, v uint64) { REQ(b).SetTransportServiceType(uint8(v)) })
	add("REQ.EndToEndFlowControl", d, seg(43, 7, 1), func(b []byte) uint64 { return b2u(REQ(b).EndToEndFlowControl()) }, func(b []byte, v uint64) { REQ(b).SetEndToEndFlowControl(v&1 != 0) })
	add("REQ.StartingPSN", d, seg(44, 0, 24), func(b []byte) uint64 { return uint64(REQ(b).StartingPSN()) }, func(b []byte, v uint64) { REQ(b).SetStartingPSN(wire.PSN(v)) })
	add("REQ.LocalCMResponseTimeout", d, seg(47, 0, 5), func(b []byte) uint64 { return uint64(REQ(b).LocalCMResponseTimeout()) }, func(b []byte, v uint64) { REQ(b).SetLocalCMResponseTimeout(uint8(v)) })
	add("REQ.RetryCount", d, seg(47, 5, 3), func(b []byte) uint64 { return uint64(REQ(b).RetryCount()) }, func(b []byte, v uint64) { REQ(b).SetRetryCount(uint8(v)) })
	add("REQ.PKey", d, seg(48, 0, 16), func(b []byte) uint64 { return uint64(REQ(b).PKey()) }, func(b []byte, v uint64) { REQ(b).SetPKey(uint16(v)) })
	add("REQ.PathMTU", d, seg(50, 0, 4), func(b []byte) uint64 { return uint64(REQ(b).PathMTU()) }, func(b []byte, v uint64) { REQ(b).SetPathMTU(uint8(v)) })
	add("REQ.RDCExists", d, seg(50, 4, 1), func(b []byte) uint64 { return b2u(REQ(b).RDCExists()) }, func(b []byte, v uint64) { REQ(b).SetRDCExists(v&1 != 0) })
	add("REQ.RNRRetryCount", d, seg(50, 5, 3), func(b []byte) uint64 { return uint64(REQ(b).RNRRetryCount()) }, func(b []byte, v uint64) { REQ(b).SetRNRRetryCount(uint8(v)) })
	add("REQ.MaxCMRetries", d, seg(51, 0, 4), func(b []byte) uint64 { return uint64(REQ(b).MaxCMRetries()) }, func(b []byte, v uint64) { REQ(b).SetMaxCMRetries(uint8(v)) })
	add("REQ.SRQ", d, seg(51, 4, 1), func(b []byte) uint64 { return b2u(REQ(b).SRQ()) }, func(b []byte, v uint64) { REQ(b).SetSRQ(v&1 != 0) })
	add("REQ.ExtendedTransportType", d, seg(51, 5, 3), func(b []byte) uint64 { return uint64(REQ(b).ExtendedTransportType()) }, func(b []byte, v uint64) { REQ(b).SetExtendedTransportType(uint8(v)) })
	for _, p := range []struct {
		name string
		base int
		path func(REQ) REQPath
	}{{"Primary", 52, REQ.PrimaryPath}, {"Alternate", 96, REQ.AlternatePath}} {
		o, path := p.base, p.path
		n := "REQ." + p.name
		add(n+".LocalLID", d, seg(o+0, 0, 16), func(b []byte) uint64 { return uint64(path(b).LocalLID()) }, func(b []byte, v uint64) { path(b).SetLocalLID(uint16(v)) })
		add(n+".RemoteLID", d, seg(o+2, 0, 16), func(b []byte) uint64 { return uint64(path(b).RemoteLID()) }, func(b []byte, v uint64) { path(b).SetRemoteLID(uint16(v)) })
		add(n+".FlowLabel", d, seg(o+36, 0, 20), func(b []byte) uint64 { return uint64(path(b).FlowLabel()) }, func(b []byte, v uint64) { path(b).SetFlowLabel(uint32(v)) })
		add(n+".PacketRate", d, seg(o+39, 2, 6), func(b []byte) uint64 { return uint64(path(b).PacketRate()) }, func(b []byte, v uint64) { path(b).SetPacketRate(uint8(v)) })
		add(n+".TrafficClass", d, seg(o+40, 0, 8), func(b []byte) uint64 { return uint64(path(b).TrafficClass()) }, func(b []byte, v uint64) { path(b).SetTrafficClass(uint8(v)) })
		add(n+".HopLimit", d, seg(o+41, 0, 8), func(b []byte) uint64 { return uint64(path(b).HopLimit()) }, func(b []byte, v uint64) { path(b).SetHopLimit(uint8(v)) })
		add(n+".SL", d, seg(o+42, 0, 4), func(b []byte) uint64 { return uint64(path(b).SL()) }, func(b []byte, v uint64) { path(b).SetSL(uint8(v)) })
		add(n+".SubnetLocal", d, seg(o+42, 4, 1), func(b []byte) uint64 { return b2u(path(b).SubnetLocal()) }, func(b []byte, v uint64) { path(b).SetSubnetLocal(v&1 != 0) })
		add(n+".LocalACKTimeout", d, seg(o+43, 0, 5), func(b []byte) uint64 { return uint64(path(b).LocalACKTimeout()) }, func(b []byte, v uint64) { path(b).SetLocalACKTimeout(uint8(v)) })
	}
	add("REQ.SAPSupported", d, seg(139, 5, 1), func(b []byte) uint64 { return b2u(REQ(b).SAPSupported()) }, func(b []byte, v uint64) { REQ(b).SetSAPSupported(v&1 != 0) })

	// MRA (table 107).
	add("MRA.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(MRA(b).LocalCommID()) }, func(b []byte, v uint64) { MRA(b).SetLocalCommID(uint32(v)) })
	add("MRA.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(MRA(b).RemoteCommID()) }, func(b []byte, v uint64) { MRA(b).SetRemoteCommID(uint32(v)) })
	add("MRA.MessageMRAed", d, seg(8, 0, 2), func(b []byte) uint64 { return uint64(MRA(b).MessageMRAed()) }, func(b []byte, v uint64) { MRA(b).SetMessageMRAed(MsgKind(v)) })
	add("MRA.ServiceTimeout", d, seg(9, 0, 5), func(b []byte) uint64 { return uint64(MRA(b).ServiceTimeout()) }, func(b []byte, v uint64) { MRA(b).SetServiceTimeout(uint8(v)) })

	// REJ (table 108).
	add("REJ.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(REJ(b).LocalCommID()) }, func(b []byte, v uint64) { REJ(b).SetLocalCommID(uint32(v)) })
	add("REJ.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(REJ(b).RemoteCommID()) }, func(b []byte, v uint64) { REJ(b).SetRemoteCommID(uint32(v)) })
	add("REJ.MessageRejected", d, seg(8, 0, 2), func(b []byte) uint64 { return uint64(REJ(b).MessageRejected()) }, func(b []byte, v uint64) { REJ(b).SetMessageRejected(MsgKind(v)) })
	add("REJ.RejectInfoLength", d, seg(9, 0, 7), func(b []byte) uint64 { return uint64(REJ(b).RejectInfoLength()) }, func(b []byte, v uint64) { REJ(b).SetRejectInfoLength(uint8(v)) })
	add("REJ.Reason", d, seg(10, 0, 16), func(b []byte) uint64 { return uint64(REJ(b).Reason()) }, func(b []byte, v uint64) { REJ(b).SetReason(RejectReason(v)) })

	// REP (table 110).
	add("REP.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(REP(b).LocalCommID()) }, func(b []byte, v uint64) { REP(b).SetLocalCommID(uint32(v)) })
	add("REP.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(REP(b).RemoteCommID()) }, func(b []byte, v uint64) { REP(b).SetRemoteCommID(uint32(v)) })
	add("REP.LocalQKey", d, seg(8, 0, 32), func(b []byte) uint64 { return uint64(REP(b).LocalQKey()) }, func(b []byte, v uint64) { REP(b).SetLocalQKey(wire.QKey(v)) })
	add("REP.LocalQPN", d, seg(12, 0, 24), func(b []byte) uint64 { return uint64(REP(b).LocalQPN()) }, func(b []byte, v uint64) { REP(b).SetLocalQPN(wire.QPN(v)) })
	add("REP.VendorID", d, [][3]int{{15, 0, 8}, {19, 0, 8}, {23, 0, 8}}, func(b []byte) uint64 { return uint64(REP(b).VendorID()) }, func(b []byte, v uint64) { REP(b).SetVendorID(uint32(v)) })
	add("REP.LocalEECN", d, seg(16, 0, 24), func(b []byte) uint64 { return uint64(REP(b).LocalEECN()) }, func(b []byte, v uint64) { REP(b).SetLocalEECN(uint32(v)) })
	add("REP.StartingPSN", d, seg(20, 0, 24), func(b []byte) uint64 { return uint64(REP(b).StartingPSN()) }, func(b []byte, v uint64) { REP(b).SetStartingPSN(wire.PSN(v)) })
	add("REP.ResponderResources", d, seg(24, 0, 8), func(b []byte) uint64 { return uint64(REP(b).ResponderResources()) }, func(b []byte, v uint64) { REP(b).SetResponderResources(uint8(v)) })
	add("REP.InitiatorDepth", d, seg(25, 0, 8), func(b []byte) uint64 { return uint64(REP(b).InitiatorDepth()) }, func(b []byte, v uint64) { REP(b).SetInitiatorDepth(uint8(v)) })
	add("REP.TargetACKDelay", d, seg(26, 0, 5), func(b []byte) uint64 { return uint64(REP(b).TargetACKDelay()) }, func(b []byte, v uint64) { REP(b).SetTargetACKDelay(uint8(v)) })
	add("REP.FailoverAccepted", d, seg(26, 5, 2), func(b []byte) uint64 { return uint64(REP(b).FailoverAccepted()) }, func(b []byte, v uint64) { REP(b).SetFailoverAccepted(uint8(v)) })
	add("REP.EndToEndFlowControl", d, seg(26, 7, 1), func(b []byte) uint64 { return b2u(REP(b).EndToEndFlowControl()) }, func(b []byte, v uint64) { REP(b).SetEndToEndFlowControl(v&1 != 0) })
	add("REP.RNRRetryCount", d, seg(27, 0, 3), func(b []byte) uint64 { return uint64(REP(b).RNRRetryCount()) }, func(b []byte, v uint64) { REP(b).SetRNRRetryCount(uint8(v)) })
	add("REP.SRQ", d, seg(27, 3, 1), func(b []byte) uint64 { return b2u(REP(b).SRQ()) }, func(b []byte, v uint64) { REP(b).SetSRQ(v&1 != 0) })
	add("REP.LocalCAGUID", d, seg(28, 0, 64), func(b []byte) uint64 { return REP(b).LocalCAGUID() }, func(b []byte, v uint64) { REP(b).SetLocalCAGUID(v) })

	// RTU (table 111), DREQ (112), DREP (113).
	add("RTU.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(RTU(b).LocalCommID()) }, func(b []byte, v uint64) { RTU(b).SetLocalCommID(uint32(v)) })
	add("RTU.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(RTU(b).RemoteCommID()) }, func(b []byte, v uint64) { RTU(b).SetRemoteCommID(uint32(v)) })
	add("DREQ.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(DREQ(b).LocalCommID()) }, func(b []byte, v uint64) { DREQ(b).SetLocalCommID(uint32(v)) })
	add("DREQ.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(DREQ(b).RemoteCommID()) }, func(b []byte, v uint64) { DREQ(b).SetRemoteCommID(uint32(v)) })
	add("DREQ.RemoteQPN", d, seg(8, 0, 24), func(b []byte) uint64 { return uint64(DREQ(b).RemoteQPN()) }, func(b []byte, v uint64) { DREQ(b).SetRemoteQPN(wire.QPN(v)) })
	add("DREP.LocalCommID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(DREP(b).LocalCommID()) }, func(b []byte, v uint64) { DREP(b).SetLocalCommID(uint32(v)) })
	add("DREP.RemoteCommID", d, seg(4, 0, 32), func(b []byte) uint64 { return uint64(DREP(b).RemoteCommID()) }, func(b []byte, v uint64) { DREP(b).SetRemoteCommID(uint32(v)) })

	// SIDR_REQ (table 119), SIDR_REP (table 120).
	add("SIDRReq.RequestID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(SIDRReq(b).RequestID()) }, func(b []byte, v uint64) { SIDRReq(b).SetRequestID(uint32(v)) })
	add("SIDRReq.PKey", d, seg(4, 0, 16), func(b []byte) uint64 { return uint64(SIDRReq(b).PKey()) }, func(b []byte, v uint64) { SIDRReq(b).SetPKey(uint16(v)) })
	add("SIDRReq.ServiceID", d, seg(8, 0, 64), func(b []byte) uint64 { return SIDRReq(b).ServiceID() }, func(b []byte, v uint64) { SIDRReq(b).SetServiceID(v) })
	add("SIDRRep.RequestID", d, seg(0, 0, 32), func(b []byte) uint64 { return uint64(SIDRRep(b).RequestID()) }, func(b []byte, v uint64) { SIDRRep(b).SetRequestID(uint32(v)) })
	add("SIDRRep.Status", d, seg(4, 0, 8), func(b []byte) uint64 { return uint64(SIDRRep(b).Status()) }, func(b []byte, v uint64) { SIDRRep(b).SetStatus(SIDRStatus(v)) })
	add("SIDRRep.AdditionalInfoLength", d, seg(5, 0, 8), func(b []byte) uint64 { return uint64(SIDRRep(b).AdditionalInfoLength()) }, func(b []byte, v uint64) { SIDRRep(b).SetAdditionalInfoLength(uint8(v)) })
	add("SIDRRep.VendorID", d, [][3]int{{6, 0, 16}, {11, 0, 8}}, func(b []byte) uint64 { return uint64(SIDRRep(b).VendorID()) }, func(b []byte, v uint64) { SIDRRep(b).SetVendorID(uint32(v)) })
	add("SIDRRep.QPN", d, seg(8, 0, 24), func(b []byte) uint64 { return uint64(SIDRRep(b).QPN()) }, func(b []byte, v uint64) { SIDRRep(b).SetQPN(wire.QPN(v)) })
	add("SIDRRep.ServiceID", d, seg(12, 0, 64), func(b []byte) uint64 { return SIDRRep(b).ServiceID() }, func(b []byte, v uint64) { SIDRRep(b).SetServiceID(v) })
	add("SIDRRep.QKey", d, seg(20, 0, 32), func(b []byte) uint64 { return uint64(SIDRRep(b).QKey()) }, func(b []byte, v uint64) { SIDRRep(b).SetQKey(wire.QKey(v)) })

	// rdma_cm header.
	add("CMAHeader.Version", CMAHeaderSize, seg(0, 0, 8), func(b []byte) uint64 { return uint64(CMAHeader(b).Version()) }, func(b []byte, v uint64) { CMAHeader(b).SetVersion(uint8(v)) })
	add("CMAHeader.IPVersion", CMAHeaderSize, seg(1, 0, 4), func(b []byte) uint64 { return uint64(CMAHeader(b).IPVersion()) }, func(b []byte, v uint64) { CMAHeader(b).SetIPVersion(uint8(v)) })
	add("CMAHeader.SrcPort", CMAHeaderSize, seg(2, 0, 16), func(b []byte) uint64 { return uint64(CMAHeader(b).SrcPort()) }, func(b []byte, v uint64) { CMAHeader(b).SetSrcPort(uint16(v)) })
	return s
}

// setBitsOf lists the non-zero bytes of b, for failure messages.
func setBitsOf(b []byte) string {
	var parts []string
	for i, v := range b {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("byte %d: %08b", i, v))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// changed returns the bits that differ between a and b.
func changed(a, b []byte) []byte {
	d := make([]byte, len(a))
	for i := range a {
		d[i] = a[i] ^ b[i]
	}
	return d
}

// TestFieldPlacement checks for every numeric field that its setter touches
// exactly the bits IBTA assigns to it, whatever surrounds them, that values
// wider than the field are cut to its width, and that the getter reads back
// what the setter wrote.
func TestFieldPlacement(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range specs() {
		t.Run(s.name, func(t *testing.T) {
			w := s.width()
			maxv := uint64(1)<<w - 1
			if w == 64 {
				maxv = ^uint64(0)
			}
			mask := s.mask()

			// All ones into zeros: exactly the field's bits turn on.
			b := make([]byte, s.size)
			s.set(b, ^uint64(0))
			if !bytes.Equal(b, mask) {
				t.Fatalf("setting all ones on zeros set %s, want %s", setBitsOf(b), setBitsOf(mask))
			}
			if got := s.get(b); got != maxv {
				t.Fatalf("get after max = %#x, want %#x", got, maxv)
			}

			// Zero into ones: exactly the field's bits turn off.
			b = bytes.Repeat([]byte{0xFF}, s.size)
			s.set(b, 0)
			if d := changed(b, bytes.Repeat([]byte{0xFF}, s.size)); !bytes.Equal(d, mask) {
				t.Fatalf("setting zero on ones changed %s, want %s", setBitsOf(d), setBitsOf(mask))
			}
			if got := s.get(b); got != 0 {
				t.Fatalf("get after zero = %#x", got)
			}

			// Random values over random neighbours.
			for range 50 {
				orig := make([]byte, s.size)
				for i := range orig {
					orig[i] = byte(rng.Uint32())
				}
				b := bytes.Clone(orig)
				v := rng.Uint64()
				s.set(b, v)
				if got := s.get(b); got != v&maxv {
					t.Fatalf("set %#x, get %#x, want %#x", v, got, v&maxv)
				}
				d := changed(b, orig)
				for i := range d {
					if d[i]&^mask[i] != 0 {
						t.Fatalf("set %#x changed bits %08b of byte %d outside the field", v, d[i]&^mask[i], i)
					}
				}
			}
		})
	}
}

// byteSpec places a byte-array field: private data, ARI, GIDs.
type byteSpec struct {
	name     string
	size     int
	off, n   int
	get      func(b []byte) []byte
	set      func(b, p []byte) bool
	aliasing bool // get returns a slice of b, not a copy
}

func byteSpecs() []byteSpec {
	const d = DataSize
	var s []byteSpec
	priv := func(name string, off int, get func([]byte) []byte, set func(b, p []byte) bool) {
		s = append(s, byteSpec{name, d, off, d - off, get, set, true})
	}
	priv("REQ.PrivateData", 140, func(b []byte) []byte { return REQ(b).PrivateData() }, func(b, p []byte) bool { return REQ(b).SetPrivateData(p) })
	priv("MRA.PrivateData", 10, func(b []byte) []byte { return MRA(b).PrivateData() }, func(b, p []byte) bool { return MRA(b).SetPrivateData(p) })
	priv("REJ.PrivateData", 84, func(b []byte) []byte { return REJ(b).PrivateData() }, func(b, p []byte) bool { return REJ(b).SetPrivateData(p) })
	priv("REP.PrivateData", 36, func(b []byte) []byte { return REP(b).PrivateData() }, func(b, p []byte) bool { return REP(b).SetPrivateData(p) })
	priv("RTU.PrivateData", 8, func(b []byte) []byte { return RTU(b).PrivateData() }, func(b, p []byte) bool { return RTU(b).SetPrivateData(p) })
	priv("DREQ.PrivateData", 12, func(b []byte) []byte { return DREQ(b).PrivateData() }, func(b, p []byte) bool { return DREQ(b).SetPrivateData(p) })
	priv("DREP.PrivateData", 8, func(b []byte) []byte { return DREP(b).PrivateData() }, func(b, p []byte) bool { return DREP(b).SetPrivateData(p) })
	priv("SIDRReq.PrivateData", 16, func(b []byte) []byte { return SIDRReq(b).PrivateData() }, func(b, p []byte) bool { return SIDRReq(b).SetPrivateData(p) })
	priv("SIDRRep.PrivateData", 96, func(b []byte) []byte { return SIDRRep(b).PrivateData() }, func(b, p []byte) bool { return SIDRRep(b).SetPrivateData(p) })
	s = append(s,
		byteSpec{"REJ.ARI", d, 12, 72, func(b []byte) []byte { return REJ(b).ARI() }, func(b, p []byte) bool { return REJ(b).SetARI(p) }, true},
		byteSpec{"SIDRRep.AdditionalInfo", d, 24, 72, func(b []byte) []byte { return SIDRRep(b).AdditionalInfo() }, func(b, p []byte) bool { return SIDRRep(b).SetAdditionalInfo(p) }, true},
		byteSpec{"MAD.Data", Size, 24, 232, func(b []byte) []byte { return MAD(b).Data() }, nil, true},
	)
	gidSpec := func(name string, off int, get func([]byte) [16]byte, set func([]byte, [16]byte)) {
		s = append(s, byteSpec{name, d, off, 16,
			func(b []byte) []byte { g := get(b); return g[:] },
			func(b, p []byte) bool { set(b, [16]byte(p)); return true }, false})
	}
	gidSpec("REQ.Primary.LocalGID", 56, func(b []byte) [16]byte { return REQ(b).PrimaryPath().LocalGID() }, func(b []byte, g [16]byte) { REQ(b).PrimaryPath().SetLocalGID(g) })
	gidSpec("REQ.Primary.RemoteGID", 72, func(b []byte) [16]byte { return REQ(b).PrimaryPath().RemoteGID() }, func(b []byte, g [16]byte) { REQ(b).PrimaryPath().SetRemoteGID(g) })
	gidSpec("REQ.Alternate.LocalGID", 100, func(b []byte) [16]byte { return REQ(b).AlternatePath().LocalGID() }, func(b []byte, g [16]byte) { REQ(b).AlternatePath().SetLocalGID(g) })
	gidSpec("REQ.Alternate.RemoteGID", 116, func(b []byte) [16]byte { return REQ(b).AlternatePath().RemoteGID() }, func(b []byte, g [16]byte) { REQ(b).AlternatePath().SetRemoteGID(g) })
	return s
}

func TestBytePlacement(t *testing.T) {
	for _, s := range byteSpecs() {
		t.Run(s.name, func(t *testing.T) {
			b := pattern(s.size, 1)
			got := s.get(b)
			if !bytes.Equal(got, b[s.off:s.off+s.n]) {
				t.Fatalf("get returned %x, want bytes %d..%d", got, s.off, s.off+s.n)
			}
			if s.aliasing && &got[0] != &b[s.off] {
				t.Fatal("get does not alias the message")
			}
			if s.set == nil {
				return
			}
			// A full-length value lands exactly in the field.
			b = make([]byte, s.size)
			if !s.set(b, bytes.Repeat([]byte{0xFF}, s.n)) {
				t.Fatal("set of a full-length value failed")
			}
			want := make([]byte, s.size)
			for i := s.off; i < s.off+s.n; i++ {
				want[i] = 0xFF
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("set wrote\n%x\nwant\n%x", b, want)
			}
			if !s.aliasing {
				return
			}
			// A shorter value zeroes the rest of the field and nothing else.
			b = bytes.Repeat([]byte{0xEE}, s.size)
			if !s.set(b, []byte{1, 2, 3}) {
				t.Fatal("set of a short value failed")
			}
			want = bytes.Repeat([]byte{0xEE}, s.size)
			clear(want[s.off : s.off+s.n])
			copy(want[s.off:], []byte{1, 2, 3})
			if !bytes.Equal(b, want) {
				t.Fatalf("short set wrote\n%x\nwant\n%x", b, want)
			}
			// A value that does not fit changes nothing.
			before := bytes.Clone(b)
			if s.set(b, make([]byte, s.n+1)) {
				t.Fatal("set of an oversized value succeeded")
			}
			if !bytes.Equal(b, before) {
				t.Fatal("failed set changed the message")
			}
		})
	}
}

// TestAlternatePathKeepsSAP checks that writing the alternate path leaves
// the SAP supported bit, which shares its last byte, alone.
func TestAlternatePathKeepsSAP(t *testing.T) {
	b := REQ(make([]byte, DataSize))
	b.SetSAPSupported(true)
	f := sampleREQ().AlternatePath
	f.Encode(b.AlternatePath())
	if !b.SAPSupported() {
		t.Fatal("encoding the alternate path cleared SAP supported")
	}
	if got := b.AlternatePath().Fields(); got != f {
		t.Fatalf("alternate path %+v, want %+v", got, f)
	}
	b.AlternatePath().SetLocalACKTimeout(0)
	if !b.SAPSupported() {
		t.Fatal("SetLocalACKTimeout cleared SAP supported")
	}
}

// TestTruncated feeds every proper prefix of every sample MAD, and the MAD
// with a byte more, to Parse: each must fail with an error that says so.
func TestTruncated(t *testing.T) {
	for _, full := range sampleMADs() {
		for n := range len(full) {
			m, err := Parse(full[:n])
			if err == nil || m != nil {
				t.Fatalf("Parse of %d bytes: %v, %v", n, m, err)
			}
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("Parse of %d bytes: %v, want ErrTruncated", n, err)
			}
			if !strings.Contains(err.Error(), "truncated") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
			// A view that did not go through Parse must not panic CM().
			if MAD(full[:n]).CM() != nil {
				t.Fatalf("CM() of a %d-byte view is not nil", n)
			}
		}
		long := append(bytes.Clone(full), 0)
		if _, err := Parse(long); !errors.Is(err, ErrTooLong) {
			t.Fatalf("Parse of %d bytes: %v, want ErrTooLong", len(long), err)
		}
	}
}

func TestParseVersions(t *testing.T) {
	good := sampleMADs()[0]

	b := bytes.Clone(good)
	MAD(b).SetBaseVersion(2)
	if _, err := Parse(b); !errors.Is(err, ErrBaseVersion) {
		t.Errorf("base version 2: %v", err)
	}

	b = bytes.Clone(good)
	MAD(b).SetClassVersion(1)
	if _, err := Parse(b); !errors.Is(err, ErrClassVersion) {
		t.Errorf("CM class version 1: %v", err)
	}

	// Another class passes with its own class version, but is no CM message.
	b = bytes.Clone(good)
	MAD(b).SetMgmtClass(0x04)
	MAD(b).SetClassVersion(1)
	m, err := Parse(b)
	if err != nil {
		t.Fatalf("class 0x04: %v", err)
	}
	if m.CM() != nil {
		t.Error("CM() of a class 0x04 MAD is not nil")
	}

	for _, a := range []AttributeID{AttrClassPortInfo, 0x0020, 0xFFFF} {
		b = bytes.Clone(good)
		MAD(b).SetAttributeID(a)
		m, err := Parse(b)
		if err != nil {
			t.Fatalf("attribute %v: %v", a, err)
		}
		if m.CM() != nil {
			t.Errorf("CM() for attribute %v is not nil", a)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{AttrREQ.String(), "REQ"},
		{AttrSIDRRep.String(), "SIDR_REP"},
		{AttrClassPortInfo.String(), "ClassPortInfo"},
		{AttributeID(0x99).String(), "AttributeID(0x0099)"},
		{RejectNoQP.String(), "no QP"},
		{RejectConsumer.String(), "consumer reject"},
		{RejectInvalidServiceID.String(), "invalid service ID"},
		{RejectReason(34).String(), "RejectReason(34)"},
		{SIDRSuccess.String(), "success"},
		{SIDRUnsupportedVersion.String(), "class version not supported"},
		{SIDRStatus(6).String(), "SIDRStatus(6)"},
		{MsgREP.String(), "REP"},
		{MsgKind(3).String(), "MsgKind(3)"},
		{MethodSend.String(), "Send"},
		{MethodGetResp.String(), "GetResp"},
		{Method(0x7F).String(), "Method(0x7f)"},
		{ClassCM.String(), "CM"},
		{Class(4).String(), "Perf"},
		{Class(0x0A).String(), "Class(0x0a)"},
		{ClassSubnDirected.String(), "SubnDirected"},
		{MethodTrapRepress.String(), "TrapRepress"},
		{PortSpaceTCP.String(), "TCP"},
		{PortSpaceUDP.String(), "UDP"},
		{PortSpaceIB.String(), "IB"},
		{PortSpaceIPoIB.String(), "IPoIB"},
		{MsgREQ.String(), "REQ"},
		{MsgOther.String(), "other"},
		{MethodGet.String(), "Get"},
		{MethodSet.String(), "Set"},
		{PortSpace(7).String(), "PortSpace(0x0007)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// Every reason from 1 to 33, and 35, has a name.
	for r := RejectReason(1); r <= 35; r++ {
		if r != 34 && strings.HasPrefix(r.String(), "RejectReason(") {
			t.Errorf("reason %d has no name", r)
		}
	}
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   PortSpace
		port uint16
		id   uint64
	}{
		{PortSpaceTCP, 7174, 0x0000000001061c06}, // rping's port, as captured
		{PortSpaceUDP, 7174, 0x0000000001111c06}, // udaddy's
		{PortSpaceIB, 0xFFFF, 0x00000000013FFFFF},
		{PortSpaceIPoIB, 1, 0x0000000000020001},
	} {
		if got := ServiceID(c.ps, c.port); got != c.id {
			t.Errorf("ServiceID(%v, %d) = %#x, want %#x", c.ps, c.port, got, c.id)
		}
		ps, port, ok := SplitServiceID(c.id)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("SplitServiceID(%#x) = %v, %d, %v", c.id, ps, port, ok)
		}
	}
	for _, id := range []uint64{0x0000000100010000 | 0x01060000, 0x0000000001070001, 0x1000000001061c06} {
		if _, _, ok := SplitServiceID(id); ok {
			t.Errorf("SplitServiceID(%#x) accepted", id)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, f := range []CMAHeaderFields{
		{Version: 0, IPVersion: 4, SrcPort: 0x9f86,
			SrcAddr: netip.MustParseAddr("198.18.0.2"), DstAddr: netip.MustParseAddr("198.18.0.3")},
		{Version: 0, IPVersion: 6, SrcPort: 65535,
			SrcAddr: netip.MustParseAddr("fd00:198:18::2"), DstAddr: netip.MustParseAddr("fe80::5054:ff:fe12:3457")},
		{Version: 0, IPVersion: 6, SrcPort: 1,
			SrcAddr: netip.MustParseAddr("::ffff:198.18.0.2"), DstAddr: netip.MustParseAddr("::ffff:198.18.0.3")},
	} {
		b := bytes.Repeat([]byte{0xCC}, CMAHeaderSize+4)
		f.Encode(b)
		if !bytes.Equal(b[CMAHeaderSize:], []byte{0xCC, 0xCC, 0xCC, 0xCC}) {
			t.Fatal("Encode wrote past the header")
		}
		h, err := ParseCMAHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != CMAHeaderSize {
			t.Fatalf("view is %d bytes", len(h))
		}
		if got := h.Fields(); got != f {
			t.Errorf("got %+v, want %+v", got, f)
		}
		if f.IPVersion == 4 {
			want := append(make([]byte, 12), 198, 18, 0, 2)
			if !bytes.Equal(b[4:20], want) {
				t.Errorf("IPv4 source field %x, want %x", b[4:20], want)
			}
		}
	}

	// The zero Addr clears the field.
	b := bytes.Repeat([]byte{0xCC}, CMAHeaderSize)
	h := CMAHeader(b)
	h.SetDstAddr(netip.Addr{})
	if !bytes.Equal(b[20:36], make([]byte, 16)) {
		t.Errorf("zero Addr wrote %x", b[20:36])
	}

	clear(b)
	b[1] = 0x0F
	h.SetIPVersion(6)
	if b[1] != 0x6F {
		t.Errorf("SetIPVersion changed the low nibble: %#x", b[1])
	}

	if _, err := ParseCMAHeader(b[:35]); !errors.Is(err, ErrCMAHeaderTruncated) {
		t.Errorf("35 bytes: %v", err)
	}
	b[1] = 0x50
	if _, err := ParseCMAHeader(b); !errors.Is(err, ErrCMAIPVersion) {
		t.Errorf("IP version 5: %v", err)
	}
	if h.SrcAddr().IsValid() {
		t.Error("address of an IP version 5 header is valid")
	}
	b[1] = 0x40
	b[0] = 1
	if _, err := ParseCMAHeader(b); !errors.Is(err, ErrCMAVersion) {
		t.Errorf("version 1: %v", err)
	}
}
