// Fuzz targets for the two parsers, Parse and ParseCMAHeader, seeded from
// the sample encodings and the captured MADs. Besides not panicking, a
// message that parses must decode, re-encode and decode to the same values.

package mad

import (
	"bytes"
	"net/netip"
	"testing"
)

// capturedMADs returns the MADs of the golden captures.
func capturedMADs(t testing.TB) [][]byte {
	var out [][]byte
	for _, gf := range goldenFiles {
		for _, g := range gsiPackets(readPcap(t, "testdata/"+gf.name+".pcap")) {
			out = append(out, g.mad)
		}
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, b := range sampleMADs() {
		f.Add(b)
	}
	for _, b := range capturedMADs(f) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		m, err := Parse(b)
		if err != nil {
			if m != nil {
				t.Fatal("Parse returned a MAD with an error")
			}
			return
		}
		if len(m) != Size || len(m.Data()) != DataSize {
			t.Fatalf("parsed MAD of %d bytes", len(m))
		}
		h := m.Fields()
		hb := make([]byte, HeaderSize)
		h.Encode(hb)
		if got := MAD(hb).Fields(); got != h {
			t.Fatalf("header round trip: %+v != %+v", got, h)
		}
		_ = h.AttributeID.String() + h.Method.String() + h.MgmtClass.String()

		msg := m.CM()
		if msg == nil {
			return
		}
		if msg.AttributeID() != m.AttributeID() {
			t.Fatalf("CM() gave %v for attribute %v", msg.AttributeID(), m.AttributeID())
		}
		dec := decodeMessage(msg)
		buf := make([]byte, DataSize)
		dec.Encode(buf)
		again := decodeMessage(wrapCM(t, m.AttributeID(), buf))
		if !equalFields(dec, again) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", dec, again)
		}
		// Re-encoding may only clear reserved bits, never set any.
		for i := range buf {
			if buf[i]&^m.Data()[i] != 0 {
				t.Fatalf("re-encoding set bits %08b in byte %d", buf[i]&^m.Data()[i], i)
			}
		}
		switch v := msg.(type) {
		case REJ:
			_ = v.Reason().String() + v.MessageRejected().String()
		case SIDRRep:
			_ = v.Status().String()
		case REQ:
			if hdr, err := ParseCMAHeader(v.PrivateData()); err == nil {
				_ = hdr.Fields()
			}
			_, _, _ = SplitServiceID(v.ServiceID())
		case SIDRReq:
			if hdr, err := ParseCMAHeader(v.PrivateData()); err == nil {
				_ = hdr.Fields()
			}
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("parsing and decoding changed the input")
		}
	})
}

// wrapCM wraps message bytes in a CM MAD with the given attribute and
// returns the typed message.
func wrapCM(t *testing.T, a AttributeID, data []byte) Message {
	t.Helper()
	b := make([]byte, Size)
	h := HeaderFields{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, AttributeID: a}
	h.Encode(b)
	copy(b[HeaderSize:], data)
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m.CM()
}

func FuzzCMAHeader(f *testing.F) {
	for _, hf := range []CMAHeaderFields{
		{IPVersion: 4, SrcPort: 1, SrcAddr: netip.MustParseAddr("198.18.0.2"), DstAddr: netip.MustParseAddr("198.18.0.3")},
		{IPVersion: 6, SrcPort: 2, SrcAddr: netip.MustParseAddr("fd00::2"), DstAddr: netip.MustParseAddr("fd00::3")},
	} {
		b := make([]byte, CMAHeaderSize)
		hf.Encode(b)
		f.Add(b)
	}
	for _, b := range capturedMADs(f) {
		if m, err := Parse(b); err == nil {
			switch v := m.CM().(type) {
			case REQ:
				f.Add([]byte(v.PrivateData()))
			case SIDRReq:
				f.Add([]byte(v.PrivateData()))
			}
		}
	}
	f.Add([]byte{0, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseCMAHeader(b)
		if err != nil {
			return
		}
		if len(h) != CMAHeaderSize {
			t.Fatalf("view of %d bytes", len(h))
		}
		hf := h.Fields()
		if !hf.SrcAddr.IsValid() || !hf.DstAddr.IsValid() {
			t.Fatalf("invalid address from a valid header: %+v", hf)
		}
		if (hf.IPVersion == 4) != hf.SrcAddr.Is4() {
			t.Fatalf("IP version %d with address %v", hf.IPVersion, hf.SrcAddr)
		}
		out := make([]byte, CMAHeaderSize)
		hf.Encode(out)
		h2, err := ParseCMAHeader(out)
		if err != nil {
			t.Fatal(err)
		}
		if got := h2.Fields(); got != hf {
			t.Fatalf("round trip: %+v != %+v", got, hf)
		}
	})
}
