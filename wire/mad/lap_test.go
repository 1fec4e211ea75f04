package mad

import (
	"bytes"
	"testing"
)

// TestLAPAPRLayout checks the LAP's and APR's fields at the byte and bit
// positions of IBTA tables 115 and 116 (as Linux's ibta_vol1_c12.h places
// them too): encoding the samples puts each value where the table says.
func TestLAPAPRLayout(t *testing.T) {
	b := make([]byte, DataSize)
	sampleLAP().Encode(b)
	for _, c := range []struct {
		off  int
		want []byte
	}{
		{0, []byte{1, 2, 3, 4, 5, 6, 7, 8}},  // local, remote comm ID
		{8, []byte{0, 0, 0, 0}},              // reserved
		{12, []byte{0xab, 0xcd, 0xef, 0xa8}}, // remote QPN, CM response timeout 0x15 in bits 7:3
		{16, []byte{0, 0, 0, 0}},             // reserved
		{20, []byte{0x11, 0x12, 0x13, 0x14}}, // alternate local, remote LID
		{24, []byte{0xfe, 0x80}},             // alternate local GID
		{39, []byte{0x21, 0xfe, 0x80}},       // ... its end, the remote GID
		{55, []byte{0x22}},                   // ... its end
		{56, []byte{0xab, 0xcd, 0xe0, 0xb8}}, // flow label 20 bits, reserved 4, traffic class
		{60, []byte{0x40, 0x2a, 0xd8, 0x98}}, // hop limit; rate (6 low bits); SL 7:4, subnet local 3; ACK timeout 7:3
		{64, []byte{0xa0, 0xa1}},             // private data
		{DataSize - 1, []byte{0x47}},         // its last byte: 0xa0 + 167, mod 0x100
	} {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("LAP byte %d: % x, want % x", c.off, got, c.want)
		}
	}
	if f := LAP(b).Fields(); f != *sampleLAP() {
		t.Errorf("LAP decodes to %+v", f)
	}
	sampleAPR().Encode(b)
	for _, c := range []struct {
		off  int
		want []byte
	}{
		{0, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{8, []byte{0x48, 13, 0, 0}}, // info length, AP status, reserved
		{12, []byte{0xb0, 0xb1}},    // additional information
		{83, []byte{0xb0 + 71, 0xc0}},
	} {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("APR byte %d: % x, want % x", c.off, got, c.want)
		}
	}
	if s := APR(b).Status().String(); s != "invalid SL" {
		t.Errorf("status %q", s)
	}
	if s := APStatus(200).String(); s != "APStatus(200)" {
		t.Errorf("unknown status %q", s)
	}
}
