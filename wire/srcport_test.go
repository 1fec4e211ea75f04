package wire

import "testing"

// The expected ports were worked out by hand from Linux's definitions
// (rdma_calc_flow_label, rdma_flow_label_to_udp_sport and hash_32 with
// GOLDEN_RATIO_32), not from this package.
func TestSourcePorts(t *testing.T) {
	for _, c := range []struct {
		l, r QPN
		fl   uint32
		port uint16
	}{
		{0x11, 0x12, 0x132, 0xC132},
		{2, 3, 6, 0xC006},
		{0xFFFFFF, 0xFFFFFE, 0xFFF2D, 0xFF12},
		{0x1234, 0xABCDEF, 0x61FA, 0xE1FB},
		{1, 1, 1, 0xC001},
	} {
		if fl := FlowLabel(c.l, c.r); fl != c.fl {
			t.Errorf("FlowLabel(%#x, %#x) = %#x, want %#x", c.l, c.r, fl, c.fl)
		}
		if fl := FlowLabel(c.r, c.l); fl != c.fl {
			t.Errorf("FlowLabel(%#x, %#x) = %#x: not symmetric", c.r, c.l, fl)
		}
		if p := ConnectedSourcePort(0, c.l, c.r); p != c.port {
			t.Errorf("ConnectedSourcePort(0, %#x, %#x) = %#x, want %#x", c.l, c.r, p, c.port)
		}
	}
	// A flow label, when set, decides alone.
	if p := ConnectedSourcePort(0x12345, 7, 9); p != FlowSourcePort(0x12345) || p != 0xC000|(0x2345^0x4) {
		t.Errorf("ConnectedSourcePort with flow label 0x12345: %#x", p)
	}
	for _, c := range []struct {
		qpn  QPN
		port uint16
	}{{0, 0xC000}, {1, 0xD872}, {2, 0xF0E4}, {0x11, 0xDF94}, {0xFFFFFF, 0xF94D}} {
		if p := QPSourcePort(c.qpn); p != c.port {
			t.Errorf("QPSourcePort(%#x) = %#x, want %#x", c.qpn, p, c.port)
		}
	}
	for fl := uint32(0); fl < 1<<20; fl += 997 {
		if p := FlowSourcePort(fl); p < SourcePortBase {
			t.Fatalf("FlowSourcePort(%#x) = %#x, below the dynamic range", fl, p)
		}
	}
}
