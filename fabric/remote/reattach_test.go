package remote

import (
	"context"
	"testing"
	"time"
)

// TestReattachAtOnce: a port whose client detached (Close returned) can be
// attached again at once, as a tool run right after another on the same
// port does: the server releases the port before the client sees the
// connection end.
func TestReattachAtOnce(t *testing.T) {
	s := serve(t, Config{})
	for i := range 30 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := (&Dialer{Logger: quiet}).Dial(ctx, s.addr, "Hca1", 1)
		cancel()
		if err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.srv.Stats(); st.Refused != 0 || st.Attached != 30 {
		t.Errorf("stats %+v", st)
	}
}
