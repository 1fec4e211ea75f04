// Fuzz targets for the SM and PMA attribute parsers: one target runs every
// codec on the same input. Besides not panicking, an attribute that parses
// must encode and parse to the same value, and encoding may only clear
// reserved bits of the input, never set any.

package mad

import (
	"bytes"
	"reflect"
	"testing"
)

func FuzzSMAttr(f *testing.F) {
	for _, c := range codecs() {
		b := make([]byte, c.full)
		c.encode(c.sample, b)
		f.Add(uint8(0), b)
	}
	f.Add(uint8(0), []byte{})
	f.Add(uint8(3), bytes.Repeat([]byte{0xff}, PortCountersExtFullSize))
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		orig := bytes.Clone(b)
		for i, c := range codecs() {
			// which selects a codec to feed a cut-down input, so that
			// short inputs reach every parser's length check.
			in := b
			if int(which)%len(codecs()) == i && len(b) > 0 {
				in = b[:len(b)-1]
			}
			v, err := c.parse(in)
			if err != nil {
				if len(in) >= c.size {
					t.Fatalf("%s: %d bytes rejected: %v", c.name, len(in), err)
				}
				continue
			}
			out := make([]byte, min(len(in), c.full))
			copy(out, in)
			c.encode(v, out)
			again, err := c.parse(out)
			if err != nil || !reflect.DeepEqual(v, again) {
				t.Fatalf("%s: round trip changed %+v to %+v (%v)", c.name, v, again, err)
			}
			for j := range out {
				if out[j]&^in[j] != 0 {
					t.Fatalf("%s: re-encoding set bits %08b in byte %d", c.name, out[j]&^in[j], j)
				}
			}
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("parsing changed the input")
		}
	})
}
