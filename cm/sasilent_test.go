package cm

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSASilent: a query whose deadline passed while it waited is the SA's
// silence (ErrNoSA) and the deadline's error; a cancelled one only the
// cancellation.
func TestSASilent(t *testing.T) {
	late, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-late.Done()
	if err := saSilent(late, 1, 3); !errors.Is(err, ErrNoSA) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past the deadline: %v, want ErrNoSA and DeadlineExceeded", err)
	}
	gone, stop := context.WithCancel(context.Background())
	stop()
	if err := saSilent(gone, 1, 1); errors.Is(err, ErrNoSA) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled only", err)
	}
}
