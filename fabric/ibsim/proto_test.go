package ibsim

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The header smpquery -D nodeinfo 0 sent through libumad2sim to Linux ibsim
// (captured with strace on x86-64): DLID and SLID permissive, QPs 0,
// status 0, four bytes umad2sim leaves unset, length 256.
const capturedHdr = "ffff0000ffff0000000000000000000000000000207f00000000000000000100"

func TestRequestCaptured(t *testing.T) {
	if !littleEndianHost() {
		t.Skip("the capture is from a little-endian host")
	}
	b, _ := hex.DecodeString(capturedHdr)
	b = append(b, make([]byte, MADSize)...)
	b[RequestHdrSize+1] = 0x81 // directed route
	r, err := ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Request{DLID: 0xffff, SLID: 0xffff, Length: 256}
	want.MAD[1] = 0x81
	if r != want {
		t.Fatalf("parsed %+v", r)
	}
	// A LID is a big-endian 16-bit value in the first two bytes of its
	// 32-bit field (on a little-endian host), as ntohs(r->dlid) reads it.
	r.DLID, r.SLID, r.DQP, r.SQP, r.Status = 0x0102, 0x0304, 1, 0x00010203, StatusTimeout
	out := r.Append(nil)
	if got, want := hex.EncodeToString(out[:RequestHdrSize]),
		"010200000304000000000001000102030000006e000000000000000000000100"; got != want {
		t.Fatalf("encoded header %s, want %s", got, want)
	}
}

func littleEndianHost() bool {
	var b [2]byte
	host.PutUint16(b[:], 1)
	return b[0] == 1
}

func TestRequestRoundTrip(t *testing.T) {
	r := Request{DLID: 0xbeef, SLID: 7, DQP: 1, SQP: 0x00ffffff, Status: 3, Length: 256}
	for i := range r.MAD {
		r.MAD[i] = byte(i * 7)
	}
	b := r.Append([]byte{0xaa})
	if len(b) != 1+RequestSize || b[0] != 0xaa {
		t.Fatalf("Append gave %d bytes", len(b))
	}
	got, err := ParseRequest(b[1:])
	if err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if !bytes.Equal(got.MAD[:], r.MAD[:]) {
		t.Fatal("MAD changed")
	}
}

func TestRequestTID(t *testing.T) {
	var r Request
	r.SetTID(0x0123456789abcdef)
	if r.TID() != 0x0123456789abcdef || r.MAD[8] != 0x01 || r.MAD[15] != 0xef {
		t.Fatalf("TID %x, bytes %x", r.TID(), r.MAD[8:16])
	}
	if r.IsResponse() {
		t.Fatal("method 0 is a response")
	}
	r.MAD[3] = 0x81
	if !r.IsResponse() {
		t.Fatal("GetResp is not a response")
	}
}

func TestCtlRoundTrip(t *testing.T) {
	c := Ctl{Magic: Magic, ClientID: 3, Type: CtlGetPortInfo, Len: 64}
	c.Data[0] = 2
	c.Data[63] = 9
	b := c.Append(nil)
	if len(b) != CtlSize {
		t.Fatalf("%d bytes", len(b))
	}
	if littleEndianHost() && hex.EncodeToString(b[:16]) != "efbeadde030000000800000040000000" {
		t.Fatalf("header %x", b[:16])
	}
	got, err := ParseCtl(b)
	if err != nil || got != c {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	b[0] ^= 1
	if _, err := ParseCtl(b); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("bad magic: %v", err)
	}
}

func TestClientInfo(t *testing.T) {
	ci := ClientInfo{ID: 4242, QP: 0, IsSM: 1, NodeID: "Hca1"}
	var b [CtlDataSize]byte
	ci.Encode(b[:])
	got, err := ParseClientInfo(b[:])
	if err != nil || got != ci {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	long := ClientInfo{NodeID: strings.Repeat("x", 40)}
	long.Encode(b[:])
	got, _ = ParseClientInfo(b[:])
	if got.NodeID != strings.Repeat("x", NodeIDSize-1) || b[12+NodeIDSize-1] != 0 {
		t.Fatalf("long name kept as %q", got.NodeID)
	}
}

func TestVendorAndPort(t *testing.T) {
	v := Vendor{VendorID: 0x2c9, VendorPartID: 0x1003, HWVersion: 0xa1, FWVersion: 1}
	var b [CtlDataSize]byte
	for i := range b {
		b[i] = 0xff
	}
	v.Encode(b[:])
	if got, err := ParseVendor(b[:]); err != nil || got != v {
		t.Fatalf("vendor: %+v, %v", got, err)
	}
	if !bytes.Equal(b[12:16], []byte{0, 0, 0, 0}) {
		t.Fatalf("padding %x", b[12:16])
	}
	p := PortState{LID: 0x1234, State: 4}
	p.Encode(b[:])
	if got, err := ParsePortState(b[:]); err != nil || got != p {
		t.Fatalf("port: %+v, %v", got, err)
	}
}

func TestTruncation(t *testing.T) {
	for n := 0; n < RequestSize; n++ {
		if _, err := ParseRequest(make([]byte, n)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("request of %d bytes: %v", n, err)
		}
	}
	if _, err := ParseRequest(make([]byte, RequestSize+1)); !errors.Is(err, ErrTooLong) {
		t.Fatalf("long request: %v", err)
	}
	good := (&Ctl{Magic: Magic}).Append(nil)
	for n := 0; n < CtlSize; n++ {
		if _, err := ParseCtl(good[:n]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("ctl of %d bytes: %v", n, err)
		}
	}
	if _, err := ParseCtl(append(good, 0)); !errors.Is(err, ErrTooLong) {
		t.Fatalf("long ctl: %v", err)
	}
	for n := 0; n < ClientInfoSize; n++ {
		if _, err := ParseClientInfo(make([]byte, n)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("client info of %d bytes: %v", n, err)
		}
	}
	for n := 0; n < VendorSize; n++ {
		if _, err := ParseVendor(make([]byte, n)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("vendor of %d bytes: %v", n, err)
		}
	}
	for n := 0; n < PortStateSize; n++ {
		if _, err := ParsePortState(make([]byte, n)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("port of %d bytes: %v", n, err)
		}
	}
}

func TestCtlTypeString(t *testing.T) {
	if CtlGetPKeys.String() != "GET_PKEYS" || CtlType(99).String() != "CtlType(99)" {
		t.Fatal(CtlGetPKeys.String(), CtlType(99).String())
	}
}

// FuzzParse feeds arbitrary bytes to every parser: none panics, and what
// parses encodes back to the same bytes (the bytes parsing ignores aside).
func FuzzParse(f *testing.F) {
	b, _ := hex.DecodeString(capturedHdr)
	f.Add(append(b, make([]byte, MADSize)...))
	f.Add((&Ctl{Magic: Magic, Type: CtlConnect}).Append(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseRequest(b); err == nil {
			out := r.Append(nil)
			// Ignored on parsing: the padding, and the upper halves of
			// the LIDs' 32-bit fields (ntohs reads the lower half).
			copy(out[20:24], b[20:24])
			for _, off := range []int{0, 4} {
				if lid16(out[off:]) != lid16(b[off:]) {
					t.Fatalf("LID at %d re-encodes as %x", off, out[off:off+4])
				}
				copy(out[off:off+4], b[off:off+4])
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("request re-encodes as %x", out)
			}
		}
		if c, err := ParseCtl(b); err == nil {
			if out := c.Append(nil); !bytes.Equal(out, b) {
				t.Fatalf("ctl re-encodes as %x", out)
			}
		}
		if ci, err := ParseClientInfo(b); err == nil {
			var out [ClientInfoSize]byte
			ci.Encode(out[:])
			if len(ci.NodeID) > NodeIDSize-1 { // no NUL in the field: Encode cuts it
				ci.NodeID = ci.NodeID[:NodeIDSize-1]
			}
			if ci2, err := ParseClientInfo(out[:]); err != nil || ci2 != ci {
				t.Fatalf("client info %+v re-parses as %+v, %v", ci, ci2, err)
			}
		}
		_, _ = ParseVendor(b)
		_, _ = ParsePortState(b)
	})
}
