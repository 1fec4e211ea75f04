package requester

import (
	"slices"
	"testing"
)

// TestLocalInOrder: a Local work request runs when the requester reaches
// it (after the SEND before it is sent, before that SEND is acknowledged),
// takes no PSN, and retires in posting order once the SEND completes.
func TestLocalInOrder(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, 10, false)
	r.c.Post(Local, 0, false)
	r.c.Post(Send, 10, false)
	r.c.Progress(100, Run)
	wantPSNs(t, r.take(), psn0, 2) // the two SENDs, back to back
	if !slices.Equal(r.locals, []uint64{1}) {
		t.Fatalf("Local calls %v", r.locals)
	}
	wantRetired(t, r) // nothing before the first SEND's ACK
	r.c.Ack(200, Run, ack, psn0)
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
	r.c.Ack(300, Run, ack, psn0.Add(1))
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success}, retirement{2, Success})
	if r.c.Outstanding() != 0 || r.c.AckedPSN() != psn0.Add(2) {
		t.Fatalf("outstanding %d, acked PSN %v", r.c.Outstanding(), r.c.AckedPSN())
	}
}

// TestLocalAlone: a Local work request with nothing before it completes at
// once.
func TestLocalAlone(t *testing.T) {
	r := newRC(t)
	r.c.Post(Local, 0, false)
	r.c.Progress(100, Run)
	wantRetired(t, r, retirement{0, Success})
	if len(r.take()) != 0 || r.c.Deadline() != 0 {
		t.Fatal("a Local request sent a packet or armed the timer")
	}
	r.c.Post(Send, 1, false)
	r.c.Progress(200, Run)
	wantPSNs(t, r.take(), psn0, 1)
}

// TestLocalFails: a failed Local request retires with its status, and the
// QP fails: the requests after it are flushed.
func TestLocalFails(t *testing.T) {
	r := newRC(t)
	r.failLocal = map[uint64]Status{0: MWBindError}
	r.c.Post(Local, 0, false)
	r.c.Post(Send, 10, false)
	r.c.Progress(100, Run)
	if r.fatal != 1 {
		t.Fatalf("Fatal called %d times", r.fatal)
	}
	wantRetired(t, r, retirement{0, MWBindError}, retirement{1, Flushed})
	if len(r.take()) != 0 {
		t.Fatal("sent a packet after the failure")
	}
}

// TestLocalFence: a fenced Local request waits for the READ before it.
func TestLocalFence(t *testing.T) {
	r := newRC(t)
	r.c.Post(Read, 10, false)
	r.c.Post(Local, 0, true)
	r.c.Progress(100, Run)
	wantPSNs(t, r.take(), psn0, 1)
	if len(r.locals) != 0 {
		t.Fatal("fenced Local ran before the READ completed")
	}
	r.c.ReadResponse(200, Run, psn0, make([]byte, 10), true)
	if !slices.Equal(r.locals, []uint64{1}) {
		t.Fatalf("Local calls %v", r.locals)
	}
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
}

// TestLocalUC: on UC a Local request runs and completes in order too.
func TestLocalUC(t *testing.T) {
	cfg := rcConfig()
	cfg.Transport = UC
	r := newRec(t, 4, cfg)
	r.c.Post(Send, 10, false)
	r.c.Post(Local, 0, false)
	r.c.Progress(100, Run)
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
}
