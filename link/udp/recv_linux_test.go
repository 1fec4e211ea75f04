package udp

import "testing"

// TestReceiverAdapt: a receiver asks for as many messages as it last
// found, twice as many when it filled them, within its headers.
func TestReceiverAdapt(t *testing.T) {
	r := &receiver{hdrs: make([]mmsghdr, 8)}
	steps := []struct{ got, want int }{
		{0, 8}, // first call: every header
		{8, 8}, // filled, at the most already
		{1, 1}, // drained at one
		{1, 2}, // filled one: two
		{2, 4},
		{3, 3}, // drained at three
		{3, 6},
		{6, 8},
		{0, 1}, // an error: one
	}
	if got := r.want(); got != 8 {
		t.Fatalf("first want %d, want 8", got)
	}
	for i, s := range steps[1:] {
		r.adapt(s.got)
		if got := r.want(); got != s.want {
			t.Errorf("step %d: after %d received, want() = %d, want %d", i+1, s.got, got, s.want)
		}
	}
}
