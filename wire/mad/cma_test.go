package mad

import "testing"

// TestRoCEFlowLabel checks the rdma_cm flow label against values worked
// out by hand from Linux's cma_get_roce_udp_flow_label (sport*31 + dport,
// 20 bits).
func TestRoCEFlowLabel(t *testing.T) {
	for _, c := range []struct {
		sport, dport uint16
		want         uint32
	}{
		{0x1234, 7174, 0x25052},
		{0, 7471, 7471},
		{0xFFFF, 0xFFFF, 0x1FFFE0 & 0xFFFFF},
	} {
		if got := RoCEFlowLabel(c.sport, c.dport); got != c.want {
			t.Errorf("RoCEFlowLabel(%d, %d) = %#x, want %#x", c.sport, c.dport, got, c.want)
		}
	}
}
