package udp

import "testing"

// TestReceiverAdapt: a receiver asks for as many messages as it last
// found, twice as many when it filled them, within its headers; one found
// of one asked for right after an empty socket (a ping-pong) keeps it at
// one.
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

	// A ping-pong: each receive follows polls that found nothing.
	r = &receiver{hdrs: make([]mmsghdr, 8), vlen: 1}
	for i := range 3 {
		r.hot = false // what recvmmsg notes of an empty socket
		r.adapt(1)
		if got := r.want(); got != 1 {
			t.Fatalf("ping-pong receive %d: want() = %d, want 1", i, got)
		}
	}
	// Then a stream: receives one after another grow from the second.
	for _, want := range []int{2, 4, 8, 8} {
		r.adapt(r.want())
		if got := r.want(); got != want {
			t.Fatalf("stream: want() = %d, want %d", got, want)
		}
	}
}
