package mad

import (
	"bytes"
	"testing"
)

// TestKeyViolation: the data details of traps 257 and 258 at the offsets
// of IBTA's layout (and infiniband-diags' ntc_257_258): LID1 at 2, LID2 at
// 4, the key at 6, SL and QP1 at 10, QP2 at 14, GID1 at 18, GID2 at 34.
func TestKeyViolation(t *testing.T) {
	k := KeyViolation{LID1: 0x0102, LID2: 0x0304, Key: 0x00008003, SL: 0xA, QP1: 0xABCDEF, QP2: 0x000001}
	for i := range k.GID1 {
		k.GID1[i], k.GID2[i] = byte(i), byte(0x80+i)
	}
	var n Notice
	n.DataDetails[53] = 0xFF // cleared
	n.SetKeyViolation(k)
	d := n.DataDetails[:]
	want := []byte{0, 0, 0x01, 0x02, 0x03, 0x04, 0, 0, 0x80, 0x03, 0xA0, 0xAB, 0xCD, 0xEF, 0, 0, 0, 1}
	if !bytes.Equal(d[:18], want) || d[18] != 0 || d[33] != 15 || d[34] != 0x80 || d[49] != 0x8F || d[50] != 0 || d[53] != 0 {
		t.Fatalf("details % x", d)
	}
	if got := n.KeyViolation(); got != k {
		t.Fatalf("round trip %+v, want %+v", got, k)
	}
	// Out-of-range fields are cut to their widths.
	n.SetKeyViolation(KeyViolation{SL: 0xF, QP1: 0xFF123456, QP2: 0xFF000002})
	if got := n.KeyViolation(); got.SL != 0xF || got.QP1 != 0x123456 || got.QP2 != 2 || n.DataDetails[14] != 0 {
		t.Fatalf("cut: %+v", got)
	}
}
