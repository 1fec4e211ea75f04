package mad

import "testing"

// TestBadMKey: trap 256's details round-trip and sit where Linux's
// ntc_256 puts them (LID at byte 2, M_Key at 14, the DR byte at 23).
func TestBadMKey(t *testing.T) {
	in := BadMKey{LID: 0x0102, DrSLID: 0xffff, Method: MethodSet, AttributeID: SMAttrPortInfo, AttributeModifier: 0x01020304,
		MKey: 0x1122334455667788, DRNotice: true, DRPathTruncated: true, DRHopCount: 0x3f}
	for i := range in.DRReturnPath {
		in.DRReturnPath[i] = byte(i + 1)
	}
	var n Notice
	n.SetBadMKey(in)
	if got := n.BadMKey(); got != in {
		t.Fatalf("round trip %+v, want %+v", got, in)
	}
	d := n.DataDetails
	if d[2] != 1 || d[3] != 2 || d[6] != byte(MethodSet) || d[14] != 0x11 || d[21] != 0x88 || d[23] != 0xff || d[24] != 1 || d[53] != 30 {
		t.Errorf("layout % x", d)
	}
	b := make([]byte, NoticeSize)
	n.Encode(b)
	back, err := ParseNotice(b)
	if err != nil || back.BadMKey() != in {
		t.Errorf("through Encode/ParseNotice: %+v %v", back.BadMKey(), err)
	}
}
