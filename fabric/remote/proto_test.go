package remote

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/softrdma/softrdma/link/ib"
)

func sampleAttr() ib.PortAttr {
	a := ib.PortAttr{LID: 0x1234, SMLID: 7, LMC: 2, SMSL: 3, State: ib.StateActive, PhysState: ib.PhysLinkUp,
		MTU: 2048, OperVLs: 4, GIDPrefix: 0xfe80_0000_0000_0000, PortGUID: 0x0002_c903_0000_0101,
		PKeys: []uint16{0xFFFF, 0x8001, 0x7FFF}}
	for i := range a.SL2VL {
		a.SL2VL[i] = uint8(i % 4)
	}
	return a
}

func TestAttrRoundTrip(t *testing.T) {
	a := sampleAttr()
	b := appendAttr(nil, &a)
	if len(b) != attrFixedLen+2*len(a.PKeys) {
		t.Fatalf("encoded %d bytes", len(b))
	}
	got, err := parseAttr(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, a)
	}
	// Every truncation fails with ErrTruncated.
	for n := range len(b) {
		if _, err := parseAttr(b[:n]); !errors.Is(err, ErrTruncated) {
			t.Errorf("attr cut to %d: %v", n, err)
		}
	}
	// Trailing bytes and out-of-range fields are malformed.
	if _, err := parseAttr(append(bytes.Clone(b), 0)); !errors.Is(err, ErrBadFrame) {
		t.Errorf("trailing byte: %v", err)
	}
	bad := bytes.Clone(b)
	bad[6] = 9 // state
	if _, err := parseAttr(bad); !errors.Is(err, ErrBadFrame) {
		t.Errorf("state 9: %v", err)
	}
}

func TestAttachRoundTrip(t *testing.T) {
	for _, req := range []attachReq{{"Hca1", 1}, {"0x0002c90300000101", 254}} {
		b, err := req.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseAttach(b)
		if err != nil || got != req {
			t.Errorf("%+v: got %+v, %v", req, got, err)
		}
		for n := range len(b) {
			if _, err := parseAttach(b[:n]); !errors.Is(err, ErrTruncated) {
				t.Errorf("attach cut to %d: %v", n, err)
			}
		}
	}
	for _, req := range []attachReq{{"", 1}, {"Hca1", 0}, {"Hca1", 255}, {string(make([]byte, 256)), 1}} {
		if _, err := req.encode(); !errors.Is(err, ErrBadFrame) {
			t.Errorf("encode %q port %d: %v", req.Node, req.Port, err)
		}
	}
	b, _ := attachReq{"Hca1", 1}.encode()
	for i, mutate := range []func([]byte){
		func(b []byte) { b[0] = 'X' }, // magic
		func(b []byte) { b[4] = 1 },   // version 1 (no credits)
		func(b []byte) { b[5] = 0 },   // port
	} {
		c := bytes.Clone(b)
		mutate(c)
		if _, err := parseAttach(c); !errors.Is(err, ErrBadFrame) {
			t.Errorf("mutation %d: %v", i, err)
		}
	}
}

func TestRefusalRoundTrip(t *testing.T) {
	r := refusal{Code: refuseInUse, Msg: "in use"}
	got, err := parseRefusal(r.encode())
	if err != nil || got != r {
		t.Errorf("got %+v, %v", got, err)
	}
	if _, err := parseRefusal(nil); !errors.Is(err, ErrTruncated) {
		t.Errorf("empty: %v", err)
	}
	if _, err := parseRefusal([]byte{0}); !errors.Is(err, ErrBadFrame) {
		t.Errorf("code 0: %v", err)
	}
}

func TestCreditsRoundTrip(t *testing.T) {
	var c [dataVLs]uint16
	c[0], c[3], c[14] = laneCredits, 1, 0xFFFF
	b := appendCredits(nil, &c)
	if len(b) != 3*creditEntryLen {
		t.Fatalf("encoded %d bytes", len(b))
	}
	got, err := parseCredits(b)
	if err != nil || got != c {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	if got, err := parseCredits(initialCredits); err != nil || got[0] != laneCredits || got[dataVLs-1] != laneCredits {
		t.Errorf("initial credits: %v, %v", got, err)
	}
	// A cut that is not a whole number of entries, or none, is malformed.
	for n := range len(b) {
		if n%creditEntryLen == 0 && n > 0 {
			continue
		}
		if _, err := parseCredits(b[:n]); !errors.Is(err, ErrBadFrame) {
			t.Errorf("credits cut to %d: %v", n, err)
		}
	}
	for _, bad := range [][]byte{
		{15, 0, 1},         // VL15 has no credits
		{2, 0, 0},          // a zero count
		{1, 0, 1, 1, 0, 2}, // a VL twice
		{0xF0, 0x12, 0x34}, // VL out of range
	} {
		if _, err := parseCredits(bad); !errors.Is(err, ErrBadFrame) {
			t.Errorf("credits %x: %v", bad, err)
		}
	}
}

func TestReadFrame(t *testing.T) {
	var s []byte
	s = appendFrame(s, framePacket, bytes.Repeat([]byte{0xAB}, maxPacket))
	s = appendFrame(s, frameKeepAlive, nil)
	r := bytes.NewReader(s)
	typ, body, buf, err := readFrame(r, nil)
	if err != nil || typ != framePacket || len(body) != maxPacket {
		t.Fatalf("first: %d %d %v", typ, len(body), err)
	}
	typ, body, _, err = readFrame(r, buf)
	if err != nil || typ != frameKeepAlive || len(body) != 0 {
		t.Fatalf("second: %d %d %v", typ, len(body), err)
	}
	if _, _, _, err := readFrame(r, buf); err != io.EOF {
		t.Errorf("at the end: %v", err)
	}
	// A frame cut anywhere after its first byte is an unexpected EOF.
	one := appendFrame(nil, framePacket, make([]byte, 20))
	for n := 1; n < len(one); n++ {
		if _, _, _, err := readFrame(bytes.NewReader(one[:n]), nil); err != io.ErrUnexpectedEOF {
			t.Errorf("frame cut to %d: %v", n, err)
		}
	}
	// Lengths out of range.
	for _, h := range [][]byte{{0, 0, 0, 0}, {0, 0, 0x10, 0xB5}, {0xFF, 0xFF, 0xFF, 0xFF}} {
		if _, _, _, err := readFrame(bytes.NewReader(append(h, make([]byte, 8)...)), nil); !errors.Is(err, ErrBadFrame) {
			t.Errorf("length %x: %v", h, err)
		}
	}
	if err := checkPacket(make([]byte, 9)); !errors.Is(err, ErrTruncated) {
		t.Errorf("9-byte packet: %v", err)
	}
}

// FuzzFrames feeds arbitrary bytes to the frame reader and every body
// parser: no panic, and what parses re-encodes to the same bytes.
func FuzzFrames(f *testing.F) {
	a := sampleAttr()
	att, _ := attachReq{"Hca1", 1}.encode()
	f.Add(appendFrame(nil, frameAttr, appendAttr(nil, &a)))
	f.Add(appendFrame(nil, frameAttach, att))
	f.Add(appendFrame(nil, frameRefused, refusal{Code: 2, Msg: "no"}.encode()))
	f.Add(appendFrame(appendFrame(nil, framePacket, make([]byte, 30)), frameKeepAlive, nil))
	f.Add(appendFrame(nil, frameCredit, initialCredits))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var buf []byte
		for {
			typ, body, nb, err := readFrame(r, buf)
			buf = nb
			if err != nil {
				return
			}
			if len(body) > maxPacket {
				t.Fatalf("body of %d bytes", len(body))
			}
			switch typ {
			case frameAttr, frameAttached:
				if a, err := parseAttr(body); err == nil && !bytes.Equal(appendAttr(nil, &a), body[:attrFixedLen+2*len(a.PKeys)]) {
					// Byte 11 is reserved: compare all but it.
					e := appendAttr(nil, &a)
					if !bytes.Equal(e[:11], body[:11]) || !bytes.Equal(e[12:], body[12:]) {
						t.Fatalf("attr does not re-encode")
					}
				}
			case frameAttach:
				if req, err := parseAttach(body); err == nil {
					if e, err := req.encode(); err != nil || !bytes.Equal(e, body) {
						t.Fatalf("attach does not re-encode: %v", err)
					}
				}
			case frameRefused:
				if rf, err := parseRefusal(body); err == nil && len(body) <= 1025 && !bytes.Equal(rf.encode(), body) {
					t.Fatalf("refusal does not re-encode")
				}
			case frameCredit:
				if c, err := parseCredits(body); err == nil {
					// Entries re-encode in VL order.
					if e := appendCredits(nil, &c); len(e) != len(body) {
						t.Fatalf("credits re-encode to %d bytes, from %d", len(e), len(body))
					}
				}
			case framePacket:
				_ = checkPacket(body)
			}
		}
	})
}
