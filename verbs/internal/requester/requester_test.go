package requester

import (
	"slices"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

const (
	mtu     = 256
	timeout = int64(1_000_000)   // the ACK timeout of these tests, 1 ms
	psn0    = wire.PSN(0xFFFFF0) // close to the wrap, so PSN arithmetic is exercised
)

var ack = wire.ACKSyndrome(0)

func rcConfig() Config {
	return Config{Transport: RC, MTU: mtu, MaxRdAtomic: 2, RetryCnt: 3, RNRRetry: 2, ACKTimeout: timeout}
}

func newRC(t *testing.T) *rec {
	r := newRec(t, 16, rcConfig())
	r.c.SetPSN(psn0)
	return r
}

func wantPSNs(t *testing.T, got []Packet, first wire.PSN, n int) {
	t.Helper()
	want := make([]wire.PSN, n)
	for i := range want {
		want[i] = first.Add(i)
	}
	if g := psns(got); !slices.Equal(g, want) {
		t.Fatalf("sent PSNs %v, want %v", g, want)
	}
}

func wantRetired(t *testing.T, r *rec, want ...retirement) {
	t.Helper()
	if !slices.Equal(r.ret, want) {
		t.Fatalf("retired %v, want %v", r.ret, want)
	}
}

// TestSendAcked: a three-packet SEND goes out FIRST, MIDDLE, LAST with an
// ACK request on the last; its ACK completes it and stops the deadline.
func TestSendAcked(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, 3*mtu-10, false)
	r.c.Progress(100, Run)
	pkts := r.take()
	wantPSNs(t, pkts, psn0, 3)
	for i, p := range pkts {
		if p.First != (i == 0) || p.Last != (i == 2) || p.AckReq != (i == 2) || p.Off != i*mtu {
			t.Errorf("packet %d: %+v", i, p)
		}
	}
	if pkts[2].N != mtu-10 {
		t.Errorf("last packet carries %d bytes, want %d", pkts[2].N, mtu-10)
	}
	if r.c.Deadline() != 100+timeout || r.armAt != 100+timeout {
		t.Errorf("deadline %d, armed %d; want %d", r.c.Deadline(), r.armAt, 100+timeout)
	}
	r.c.Ack(200, Run, ack, psn0.Add(1)) // partly acknowledged
	wantRetired(t, r)
	if r.c.AckedPSN() != psn0.Add(2) {
		t.Errorf("acked PSN %v", r.c.AckedPSN())
	}
	r.c.Ack(300, Run, ack, psn0.Add(2))
	wantRetired(t, r, retirement{0, Success})
	if r.c.Deadline() != 0 || r.c.Outstanding() != 0 {
		t.Errorf("deadline %d, outstanding %d after the last ACK", r.c.Deadline(), r.c.Outstanding())
	}
}

// TestWindow: no more than MaxUnacked packets are in flight; an ACK opens
// the window again.
func TestWindow(t *testing.T) {
	r := newRec(t, 4, rcConfig())
	r.c.Post(Write, 200*mtu, false)
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), 0, MaxUnacked)
	r.c.Ack(1, Run, ack, 9)
	wantPSNs(t, r.take(), MaxUnacked, 10)
	r.c.Ack(2, Run, ack, 199) // not sent yet: stale
	if len(r.pkts) != 0 || r.counts[Duplicate] != 1 {
		t.Fatalf("an ACK for a PSN not sent was acted on")
	}
	r.c.Ack(2, Run, ack, MaxUnacked+9)
	wantPSNs(t, r.take(), MaxUnacked+10, 200-MaxUnacked-10)
	r.c.Ack(3, Run, ack, 199)
	wantRetired(t, r, retirement{0, Success})
}

// TestAckEvery: a long message asks for an ACK at least every AckEvery
// packets.
func TestAckEvery(t *testing.T) {
	r := newRec(t, 4, rcConfig())
	r.c.Post(Send, 100*mtu, false)
	r.c.Progress(0, Run)
	var at []int
	for i, p := range r.take() {
		if p.AckReq {
			at = append(at, i)
		}
	}
	if want := []int{AckEvery - 1, 99}; !slices.Equal(at, want) {
		t.Errorf("AckReq on packets %v, want %v", at, want)
	}
}

// TestReadCreditsAndFence: READs beyond max_rd_atomic wait for a credit; a
// fenced request waits until no READ or atomic is outstanding.
func TestReadCreditsAndFence(t *testing.T) {
	r := newRC(t)
	r.c.Post(Read, 2*mtu, false) // PSNs 0-1
	r.c.Post(Atomic, 8, false)   // 2
	r.c.Post(Read, mtu, false)   // no credit (MaxRdAtomic 2)
	r.c.Progress(0, Run)
	pkts := r.take()
	if got := psns(pkts); !slices.Equal(got, []wire.PSN{psn0, psn0.Add(2)}) {
		t.Fatalf("sent %v: want the READ (two PSNs) and the atomic", got)
	}
	if p := pkts[0]; p.ReadOff != 0 || p.ReadLen != 2*mtu || !p.AckReq {
		t.Errorf("READ request %+v", p)
	}
	r.c.AtomicAck(1, Run, psn0.Add(2), 42) // completes the atomic, not the READ before it
	if r.orig[1] != 42 {
		t.Errorf("atomic result %v", r.orig)
	}
	wantRetired(t, r)
	// The atomic keeps its credit until it retires: the READ before it
	// may still be asked for again, and a responder keeping only
	// max_dest_rd_atomic (2) answers could not replay it after a third.
	if got := psns(r.take()); len(got) != 0 {
		t.Fatalf("sent %v while the first READ is unanswered, want nothing", got)
	}
	r.c.ReadResponse(2, Run, psn0, make([]byte, mtu), false)
	r.c.ReadResponse(2, Run, psn0.Add(1), make([]byte, mtu), true)
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
	// Both retired: their credits let the third request go.
	if got := psns(r.take()); !slices.Equal(got, []wire.PSN{psn0.Add(3)}) {
		t.Fatalf("sent %v, want the next READ", got)
	}
}

// TestFence: a fenced SEND waits for the READ before it to complete.
func TestFence(t *testing.T) {
	r := newRC(t)
	r.c.Post(Read, mtu, false)
	r.c.Post(Send, 10, true)
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), psn0, 1)
	r.c.ReadResponse(1, Run, psn0, make([]byte, mtu), true)
	wantRetired(t, r, retirement{0, Success})
	wantPSNs(t, r.take(), psn0.Add(1), 1)
}

// TestSequenceNAK: a PSN sequence NAK rewinds to its PSN and starts a
// recovery with the short deadline; a copy of the same NAK is ignored.
func TestSequenceNAK(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, 4*mtu, false)
	r.c.Progress(0, Run)
	r.take()
	r.c.Ack(10, Run, wire.NAKSyndrome(wire.NAKPSNSequence), psn0.Add(2))
	pkts := r.take()
	wantPSNs(t, pkts, psn0.Add(2), 2)
	if !pkts[0].AckReq {
		t.Errorf("the first packet sent again does not ask for an ACK")
	}
	if r.c.Mode() != Recovering || r.c.Deadline() != 10+timeout/RecoveryDivisor {
		t.Errorf("mode %v, deadline %d; want Recovering, %d", r.c.Mode(), r.c.Deadline(), 10+timeout/RecoveryDivisor)
	}
	r.c.Ack(11, Run, wire.NAKSyndrome(wire.NAKPSNSequence), psn0.Add(2))
	if len(r.take()) != 0 || r.counts[Duplicate] != 1 {
		t.Errorf("a copy of the NAK was acted on (duplicates %d)", r.counts[Duplicate])
	}
	r.c.Ack(12, Run, ack, psn0.Add(3))
	wantRetired(t, r, retirement{0, Success})
	if r.c.Mode() != Steady {
		t.Errorf("mode %v after the recovery, want Steady", r.c.Mode())
	}
}

// TestNAKStatuses: the other NAK codes fail the request with their status,
// and everything after it is flushed.
func TestNAKStatuses(t *testing.T) {
	for code, st := range map[wire.NAKCode]Status{
		wire.NAKInvalidReq: RemoteInvalid, wire.NAKRemoteAccess: RemoteAccess, wire.NAKRemoteOp: RemoteOperation,
	} {
		r := newRC(t)
		r.c.Post(Write, mtu, false)
		r.c.Post(Send, mtu, false)
		r.c.Post(Send, mtu, false)
		r.c.Progress(0, Run)
		r.c.Ack(1, Run, wire.NAKSyndrome(code), psn0.Add(1))
		wantRetired(t, r, retirement{0, Success}, retirement{1, st}, retirement{2, Flushed})
		if r.fatal != 1 {
			t.Errorf("%v: %d Fatal calls", code, r.fatal)
		}
	}
}

// TestTimeouts: each ACK timeout without progress resends from the oldest
// unacknowledged PSN and uses a retry; after retry_cnt of them the request
// fails with RetryExceeded. A timer firing early only re-arms. After a
// timeout the congestion window is MinWindow packets.
func TestTimeouts(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, 2*mtu, false)
	r.c.Progress(0, Run)
	r.take()
	r.c.Timer(timeout/2, Run)
	if len(r.take()) != 0 || r.armAt != timeout {
		t.Fatalf("an early timer resent or did not re-arm for %d (armed %d)", timeout, r.armAt)
	}
	now := int64(0)
	for i := range 3 {
		now += timeout
		r.c.Timer(now, Run)
		wantPSNs(t, r.take(), psn0, 2)
		if r.c.Window() != MinWindow {
			t.Fatalf("window %d after a timeout", r.c.Window())
		}
		if r.counts[RetryTimeout] != i+1 {
			t.Fatalf("timeouts counted %d", r.counts[RetryTimeout])
		}
	}
	now += timeout
	r.c.Timer(now, Run)
	wantRetired(t, r, retirement{0, RetryExceeded})
	// Progress restarts the count.
	r = newRC(t)
	r.c.Post(Send, 2*mtu, false)
	r.c.Progress(0, Run)
	for i := range 10 {
		now := int64(i+1) * timeout
		r.c.Timer(now, Run)
		if i == 5 {
			r.c.Ack(now, Run, ack, psn0) // half the message
		}
	}
	if len(r.ret) != 1 || r.ret[0].st != RetryExceeded {
		t.Fatalf("retired %v", r.ret)
	}
}

// TestRecoveryDeadline: in a recovery the first expiry of the short
// deadline resends without using a retry (RecoveringFired); the next one
// falls back to Steady and uses one.
func TestRecoveryDeadline(t *testing.T) {
	r := newRC(t)
	r.c.SetRetry(1)
	r.c.Post(Send, 3*mtu, false)
	r.c.Progress(0, Run)
	r.c.Ack(0, Run, wire.NAKSyndrome(wire.NAKPSNSequence), psn0.Add(1))
	r.take()
	short := timeout / RecoveryDivisor
	r.c.Timer(short, Run)
	wantPSNs(t, r.take(), psn0.Add(1), 2)
	if r.c.Mode() != RecoveringFired || r.counts[RetryTimeout] != 0 {
		t.Fatalf("mode %v, retries used %d", r.c.Mode(), r.counts[RetryTimeout])
	}
	r.c.Timer(2*short, Run)
	wantPSNs(t, r.take(), psn0.Add(1), 2)
	if r.c.Mode() != Steady || r.counts[RetryTimeout] != 1 {
		t.Fatalf("mode %v, retries used %d", r.c.Mode(), r.counts[RetryTimeout])
	}
	r.c.Timer(2*short+timeout, Run)
	wantRetired(t, r, retirement{0, RetryExceeded})
}

// TestRNR: an RNR NAK pauses the requester for its timer, which resends
// from the NAK's PSN; RNR retries run out unless rnr_retry is 7.
func TestRNR(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, mtu, false)
	r.c.Post(Send, mtu, false)
	r.c.Progress(0, Run)
	r.take()
	rnr := wire.RNRSyndrome(14)
	r.c.Ack(1, Run, rnr, psn0.Add(1))
	wantRetired(t, r, retirement{0, Success})
	if r.c.Mode() != RNRWait || r.rnr != int64(rnr.RNRTimer()) || r.c.Deadline() != 0 {
		t.Fatalf("mode %v, RNR wait %d, deadline %d", r.c.Mode(), r.rnr, r.c.Deadline())
	}
	r.c.Post(Send, mtu, false)
	r.c.Progress(2, Run)
	r.c.Timer(2*timeout, Run)
	if len(r.take()) != 0 {
		t.Fatal("sent while waiting for the RNR timer")
	}
	r.c.RNRTimer(3, Run)
	wantPSNs(t, r.take(), psn0.Add(1), 2)
	r.c.Ack(4, Run, rnr, psn0.Add(1))
	r.c.RNRTimer(5, Run)
	r.take()
	r.c.Ack(6, Run, rnr, psn0.Add(1)) // the third: rnr_retry is 2
	wantRetired(t, r, retirement{0, Success}, retirement{1, RNRRetryExceeded}, retirement{2, Flushed})

	r = newRC(t)
	r.c.SetRNRRetry(7)
	r.c.Post(Send, mtu, false)
	r.c.Progress(0, Run)
	for i := range 20 {
		r.c.Ack(int64(i), Run, rnr, psn0)
		r.c.RNRTimer(int64(i), Run)
	}
	wantRetired(t, r)
	if r.rnrs != 20 {
		t.Errorf("%d RNR waits, want 20", r.rnrs)
	}
}

// TestReadResponses: responses are placed at the offset their PSN gives,
// in any order; a response ReadReorder past a missing one asks for the
// missing part again, up to the first response already in.
func TestReadResponses(t *testing.T) {
	r := newRC(t)
	n := 40
	r.c.Post(Read, n*mtu, false)
	r.c.Progress(0, Run)
	r.take()
	pl := make([]byte, mtu)
	r.c.ReadResponse(1, Run, psn0, pl, false)
	for i := 2; i < 2+ReadReorder; i++ { // response 1 is lost
		r.c.ReadResponse(1, Run, psn0.Add(i), pl, false)
		if i < 1+ReadReorder && len(r.pkts) != 0 {
			t.Fatalf("asked again after %d responses past the gap", i-1)
		}
	}
	pkts := r.take()
	if len(pkts) != 1 {
		t.Fatalf("%d requests, want 1", len(pkts))
	}
	if p := pkts[0]; p.PSN != psn0.Add(1) || p.ReadOff != mtu || p.ReadLen != 2*mtu {
		t.Fatalf("re-request %+v, want PSN %v, offset %d, 2 packets", p, psn0.Add(1), mtu)
	}
	if r.c.Mode() != Recovering || r.counts[OutOfOrder] != 1 {
		t.Fatalf("mode %v, out of order %d", r.c.Mode(), r.counts[OutOfOrder])
	}
	r.c.ReadResponse(2, Run, psn0.Add(1), pl, false)
	for i := 2 + ReadReorder; i < n; i++ {
		r.c.ReadResponse(3, Run, psn0.Add(i), pl, i == n-1)
	}
	wantRetired(t, r, retirement{0, Success})
	got := slices.Sorted(slices.Values(r.placed[0]))
	for i := range n {
		if got[i] != i*mtu {
			t.Fatalf("placed at %v", got)
		}
	}
}

// TestBadReadResponse: a response of the wrong length where one is expected
// fails the READ.
func TestBadReadResponse(t *testing.T) {
	r := newRC(t)
	r.c.Post(Read, 2*mtu, false)
	r.c.Post(Send, 1, false)
	r.c.Progress(0, Run)
	r.c.ReadResponse(1, Run, psn0, make([]byte, mtu-1), false)
	wantRetired(t, r, retirement{0, BadResponse}, retirement{1, Flushed})
}

// TestLocalFailures: a request the Sink cannot build, or a response it
// cannot place, fails the request with the Sink's status.
func TestLocalFailures(t *testing.T) {
	r := newRC(t)
	r.failTransmit = map[uint64]Status{1: LocalProtection}
	r.c.Post(Send, 1, false)
	r.c.Post(Send, 1, false)
	r.c.Post(Send, 1, false)
	r.c.Progress(0, Run)
	wantRetired(t, r, retirement{0, Flushed}, retirement{1, LocalProtection}, retirement{2, Flushed})

	r = newRC(t)
	r.failPlace = LocalProtection
	r.c.Post(Read, mtu, false)
	r.c.Progress(0, Run)
	r.c.ReadResponse(1, Run, psn0, make([]byte, mtu), true)
	wantRetired(t, r, retirement{0, LocalProtection})

	r = newRC(t)
	r.failDeliver = LocalProtection
	r.c.Post(Atomic, 8, false)
	r.c.Progress(0, Run)
	r.c.AtomicAck(1, Run, psn0, 1)
	wantRetired(t, r, retirement{0, LocalProtection})
}

// TestStaleResponses: responses for PSNs outside the outstanding requests
// are counted and change nothing.
func TestStaleResponses(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, 2*mtu, false)
	r.c.Progress(0, Run)
	r.take()
	for _, p := range []wire.PSN{psn0.Add(-2), psn0.Add(2), psn0.Add(1000)} {
		r.c.Ack(1, Run, ack, p)
		r.c.AtomicAck(1, Run, p, 1)
		r.c.ReadResponse(1, Run, p, nil, true)
	}
	if r.counts[Duplicate] != 9 || len(r.ret) != 0 || len(r.pkts) != 0 || r.c.AckedPSN() != psn0 {
		t.Fatalf("duplicates %d, retired %v, sent %d, acked %v", r.counts[Duplicate], r.ret, len(r.pkts), r.c.AckedPSN())
	}
}

// TestStaleResponseDefersTimeout: a response to a request already
// complete moves the ACK timeout on (the responder is busy answering in
// PSN order), without resending or spending a retry; silence after it
// times out as usual. A response to nothing sent does not count.
func TestStaleResponseDefersTimeout(t *testing.T) {
	r := newRC(t)
	r.c.Post(Send, mtu, false)
	r.c.Post(Send, mtu, false)
	r.c.Progress(0, Run)
	r.c.Ack(0, Run, ack, psn0.Add(1))
	r.take()
	r.c.Post(Send, mtu, false) // psn0+2
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), psn0.Add(2), 1)
	r.c.ReadResponse(timeout/2, Run, psn0, make([]byte, mtu), false) // stale: psn0 < ackedPSN-1
	r.c.Ack(timeout/2, Run, ack, psn0.Add(1000))                     // answers nothing sent
	r.c.Timer(timeout, Run)
	if got := r.take(); len(got) != 0 || r.counts[RetryTimeout] != 0 || r.armAt != timeout/2+timeout {
		t.Fatalf("after a stale response: resent %v, %d timeouts, armed for %d (want %d)", psns(got), r.counts[RetryTimeout], r.armAt, timeout/2+timeout)
	}
	r.c.Timer(timeout/2+timeout, Run)
	wantPSNs(t, r.take(), psn0.Add(2), 1)
	if r.counts[RetryTimeout] != 1 || r.counts[Duplicate] != 2 {
		t.Fatalf("%d timeouts, %d duplicates; want 1 and 2", r.counts[RetryTimeout], r.counts[Duplicate])
	}
}

// TestAckBehindRead: an ACK past a READ still without its response
// completes nothing behind it and asks for the READ again, alone; the
// requests behind complete from that ACK once the READ's response is in.
func TestAckBehindRead(t *testing.T) {
	r := newRC(t)
	r.c.Post(Read, mtu, false)
	r.c.Post(Send, 1, false)
	r.c.Progress(0, Run)
	r.take()
	r.c.Ack(1, Run, ack, psn0.Add(1))
	wantRetired(t, r)
	pkts := r.take()
	if len(pkts) != 1 || pkts[0].PSN != psn0 || pkts[0].ReadLen != mtu {
		t.Fatalf("re-request %+v", pkts)
	}
	r.c.ReadResponse(2, Run, psn0, make([]byte, mtu), true)
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
	if len(r.take()) != 0 {
		t.Error("the SEND was sent again")
	}
}

// TestUnreliable: UC and UD requests complete once sent; a UD message
// longer than the MTU completes without a packet (IBTA C10-93.1.1).
func TestUnreliable(t *testing.T) {
	r := newRec(t, 4, Config{Transport: UC, MTU: mtu})
	r.c.Post(Write, 3*mtu, false)
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), 0, 3)
	wantRetired(t, r, retirement{0, Success})
	if r.arms != 0 {
		t.Error("UC armed a retransmit timer")
	}
	r = newRec(t, 4, Config{Transport: UD, MTU: mtu})
	r.c.Post(Send, mtu+1, false)
	r.c.Post(Send, mtu, false)
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), 0, 1)
	wantRetired(t, r, retirement{0, Success}, retirement{1, Success})
}

// TestGates: Hold sends nothing; Drain finishes what has started and
// starts nothing new.
func TestGates(t *testing.T) {
	r := newRC(t)
	r.c.Post(Write, 200*mtu, false)
	r.c.Post(Send, 1, false)
	r.c.Progress(0, Hold)
	if len(r.pkts) != 0 || !r.c.Drained() {
		t.Fatal("Hold sent")
	}
	r.c.Progress(0, Drain)
	if len(r.pkts) != 0 {
		t.Fatal("Drain started a request")
	}
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), psn0, MaxUnacked)
	if r.c.Drained() {
		t.Fatal("drained with a request in flight")
	}
	r.c.Ack(1, Drain, ack, psn0.Add(MaxUnacked-1))
	wantPSNs(t, r.take(), psn0.Add(MaxUnacked), 200-MaxUnacked)
	r.c.Ack(2, Drain, ack, psn0.Add(199))
	wantRetired(t, r, retirement{0, Success})
	if len(r.take()) != 0 || !r.c.Drained() {
		t.Fatal("Drain started the SEND, or is not drained")
	}
}

// TestResetAndFlush: Flush completes everything outstanding in order;
// Reset forgets the queue and the PSNs.
func TestResetAndFlush(t *testing.T) {
	r := newRC(t)
	for range 3 {
		r.c.Post(Read, mtu, false)
	}
	r.c.Progress(0, Run)
	r.c.Flush()
	wantRetired(t, r, retirement{0, Flushed}, retirement{1, Flushed}, retirement{2, Flushed})
	r.c.Reset()
	if r.c.Outstanding() != 0 || r.c.PSN() != 0 || r.c.Tail() != 0 || r.c.Mode() != Steady {
		t.Fatalf("after Reset: outstanding %d, PSN %v, tail %d", r.c.Outstanding(), r.c.PSN(), r.c.Tail())
	}
}

// TestCongestionWindow: a sequence NAK halves the window, a timeout cuts
// it to MinWindow; acknowledgements grow it again, by a packet per packet
// up to half the window before the loss, then by one per window; the
// packet that fills a reduced window asks for an acknowledgement, and at
// MinWindow every packet does.
func TestCongestionWindow(t *testing.T) {
	r := newRC(t)
	r.c.Post(Write, 300*mtu, false)
	r.c.Progress(0, Run)
	wantPSNs(t, r.take(), psn0, MaxUnacked)
	if r.c.Window() != MaxUnacked {
		t.Fatalf("window %d before any loss", r.c.Window())
	}
	r.c.Ack(1, Run, wire.NAKSyndrome(wire.NAKPSNSequence), psn0.Add(10))
	got := r.take()
	wantPSNs(t, got, psn0.Add(10), MaxUnacked/2)
	if !got[len(got)-1].AckReq || r.c.Window() != MaxUnacked/2 {
		t.Fatalf("window %d, last packet AckReq %v", r.c.Window(), got[len(got)-1].AckReq)
	}
	// Everything resent is acknowledged: one more packet (avoidance).
	r.c.Ack(2, Run, ack, psn0.Add(10+MaxUnacked/2-1))
	wantPSNs(t, r.take(), psn0.Add(10+MaxUnacked/2), MaxUnacked/2+1)
	// Nothing more comes back: the recovery's short deadline halves the
	// window and resends; the ACK timeout after it leaves MinWindow.
	r.c.Timer(2+timeout/RecoveryDivisor, Run)
	wantPSNs(t, r.take(), psn0.Add(10+MaxUnacked/2), (MaxUnacked/2+1)/2)
	r.c.Timer(3+timeout+timeout/RecoveryDivisor, Run)
	got = r.take()
	wantPSNs(t, got, psn0.Add(10+MaxUnacked/2), MinWindow)
	for _, p := range got {
		if !p.AckReq {
			t.Fatalf("packet %v at the smallest window without AckReq", p.PSN)
		}
	}
	// Slow start: 4 -> 8 -> 16 up to half the window before the timeout
	// (32/2 = 16), then one per window.
	next, want := psn0.Add(10+MaxUnacked/2), MinWindow
	for _, w := range []int{8, 16, 17} {
		next = next.Add(want)
		r.c.Ack(3, Run, ack, next.Add(-1))
		got = r.take()
		wantPSNs(t, got, next, w)
		if r.c.Window() != w || !got[len(got)-1].AckReq {
			t.Fatalf("window %d, want %d; last AckReq %v", r.c.Window(), w, got[len(got)-1].AckReq)
		}
		want = w
	}
}

// budget is a Budget for tests: a count, without locking. Its turn is
// grant packets (1 if zero); waiting says others wait.
type budget struct {
	avail, expect int
	grant         int
	waiting       bool
}

func (b *budget) Expect(d int) { b.expect += d }

func (b *budget) Expected() int { return b.expect }

func (b *budget) Take(n, want int, force bool) int {
	if force {
		b.avail -= n
		return n
	}
	if b.avail < n || b.avail < want && b.waiting {
		return 0
	}
	t := min(want, b.avail)
	b.avail -= t
	return t
}

func (b *budget) Give(n int) { b.avail += n }

func (b *budget) Grant() int { return max(b.grant, 1) }

func (b *budget) Waiting() bool { return b.waiting }

// budgetPair makes two requesters sharing a budget of avail packets; the
// first has posted a 30-packet WRITE and made progress.
func budgetPair(t *testing.T, avail int) (b *budget, ra, rb *rec) {
	b = &budget{avail: avail}
	cfg := Config{Transport: RC, MTU: mtu, MaxRdAtomic: 2, RetryCnt: 7, RNRRetry: 7, ACKTimeout: timeout, Budget: b}
	ra, rb = newRec(t, 16, cfg), newRec(t, 16, cfg)
	ra.c.SetPSN(psn0)
	rb.c.SetPSN(psn0)
	ra.c.Post(Write, 30*mtu, false)
	ra.c.Progress(0, Run)
	return b, ra, rb
}

// TestBudget: two requesters share a budget of 10 packets. The first takes
// it all; the second, holding none, may still send one window's worth at
// once (it would otherwise never progress), then waits for the budget;
// acknowledgements give packets back; resent packets take none; Flush
// returns what a requester holds.
func TestBudget(t *testing.T) {
	b, ra, rb := budgetPair(t, 10)
	// Ten packets within the budget; the refusal of the eleventh, with no
	// ACK coming to anyone (none of the ten asked), sends it anyway asking
	// for one (nothing else would give the budget room but the ACK
	// timeout).
	pk := ra.take()
	wantPSNs(t, pk, psn0, 11)
	if !pk[10].AckReq || pk[9].AckReq {
		t.Fatalf("AckReq on packets 9 and 10: %v, %v; want false, true", pk[9].AckReq, pk[10].AckReq)
	}
	if b.avail != -1 || ra.budgetWaits != 1 {
		t.Fatalf("budget %d, waits %d", b.avail, ra.budgetWaits)
	}
	rb.c.Post(Write, mtu, false)
	rb.c.Post(Write, mtu, false)
	rb.c.Progress(0, Run)
	// b holds none, and a's ACK is coming, which will give room: b waits
	// its turn rather than overdraw the bound.
	if n := len(rb.take()); n != 0 || b.avail != -1 || rb.budgetWaits != 1 {
		t.Fatalf("b sent %d packets, budget %d, waits %d", n, b.avail, rb.budgetWaits)
	}
	// A NAK of PSN 5 acknowledges 0-4, giving 5 packets back, and
	// rewinds a: its resent packets (5-10) are held already, so the budget
	// pays for 4 new ones; the first resent asked for an ACK, so the
	// refusal of the next waits for it.
	ra.c.Ack(1, Run, wire.NAKSyndrome(wire.NAKPSNSequence), psn0.Add(5))
	pk = ra.take()
	wantPSNs(t, pk, psn0.Add(5), 10)
	if !pk[0].AckReq || pk[9].AckReq || b.avail != 0 || ra.budgetWaits != 2 {
		t.Fatalf("after a resend: budget %d, waits %d, AckReq first %v last %v", b.avail, ra.budgetWaits, pk[0].AckReq, pk[9].AckReq)
	}
	// a's ACK of PSN 5 gives one back, which a takes at once. Then its
	// own ACK is in and nobody else's is coming: refused, a sends one
	// more, asking for one.
	ra.c.Ack(2, Run, ack, psn0.Add(5))
	pk = ra.take()
	wantPSNs(t, pk, psn0.Add(15), 2)
	if pk[0].AckReq || !pk[1].AckReq || b.avail != -1 || b.expect != 1 {
		t.Fatalf("after the ACK: budget %d, ACKs expected %d, AckReq %v %v", b.avail, b.expect, pk[0].AckReq, pk[1].AckReq)
	}
	rb.c.Progress(2, Run)
	if n := len(rb.take()); n != 0 || b.avail != -1 {
		t.Fatalf("b sent %d packets, budget %d", n, b.avail)
	}
	// a fails: Flush gives back what it held (PSNs 6-16); b goes on.
	ra.c.Flush()
	rb.c.Progress(3, Run)
	wantPSNs(t, rb.take(), psn0, 2)
	rb.c.Ack(3, Run, ack, psn0.Add(1))
	if b.expect != 0 {
		t.Fatalf("%d ACKs expected at the end", b.expect)
	}
	if b.avail != 10 {
		t.Fatalf("budget %d after a's Flush and b's ACK, want 10", b.avail)
	}
}

// TestBudgetTurns: with others waiting, a requester reserves a turn of
// the budget at a time; the packet ending a turn asks for an ACK, and what
// is left of a turn when the requester stops goes back to the budget.
func TestBudgetTurns(t *testing.T) {
	b := &budget{avail: 20, grant: 4, waiting: true}
	cfg := Config{Transport: RC, MTU: mtu, MaxRdAtomic: 2, RetryCnt: 7, RNRRetry: 7, ACKTimeout: timeout, Budget: b}
	r := newRec(t, 16, cfg)
	r.c.SetPSN(psn0)
	r.c.Post(Write, 10*mtu, false)
	r.c.Progress(0, Run)
	pk := r.take()
	wantPSNs(t, pk, psn0, 10)
	for i, p := range pk {
		// The ends of the turns (packets 3 and 7), and the last.
		if want := i == 3 || i == 7 || i == 9; p.AckReq != want {
			t.Fatalf("packet %d: AckReq %v, want %v", i, p.AckReq, want)
		}
	}
	// Three turns (12 packets) reserved, 10 sent: 2 given back.
	if b.avail != 10 || r.c.held != 10 || r.c.credit != 0 {
		t.Fatalf("budget %d, held %d, credit %d; want 10, 10, 0", b.avail, r.c.held, r.c.credit)
	}
	// Less than a turn left while others wait: refused, with an ACK
	// coming, it waits.
	b.avail = 3
	r.c.Post(Write, 2*mtu, false)
	r.c.Progress(1, Run)
	if n := len(r.take()); n != 0 || r.budgetWaits != 1 || b.avail != 3 {
		t.Fatalf("sent %d, waits %d, budget %d", n, r.budgetWaits, b.avail)
	}
	// Nobody waiting: less than a turn is taken.
	b.waiting = false
	r.c.Progress(2, Run)
	wantPSNs(t, r.take(), psn0.Add(10), 2)
	if b.avail != 1 {
		t.Fatalf("budget %d, want 1", b.avail)
	}
	r.c.Ack(3, Run, ack, psn0.Add(11))
	if b.avail != 13 || b.expect != 0 {
		t.Fatalf("after the ACK: budget %d, ACKs expected %d", b.avail, b.expect)
	}
}

// TestBudgetFewHeld: requesters holding few packets of a scarce budget
// (many share it) do not wait on each other's acknowledgements: refused
// with none of their own coming, each sends one packet more, asking for
// one, so that what they hold comes back without a wake-up per packet.
func TestBudgetFewHeld(t *testing.T) {
	b, ra, rb := budgetPair(t, 3)
	pk := ra.take()
	wantPSNs(t, pk, psn0, 4)
	if pk[2].AckReq || !pk[3].AckReq || b.avail != -1 || b.expect != 1 {
		t.Fatalf("a: AckReq %v %v, budget %d, ACKs expected %d", pk[2].AckReq, pk[3].AckReq, b.avail, b.expect)
	}
	b.avail += 2 // room for one packet of b's
	rb.c.Post(Write, 30*mtu, false)
	rb.c.Progress(0, Run)
	pk = rb.take()
	wantPSNs(t, pk, psn0, 2) // the first within the bound, the second over it
	if pk[0].AckReq || !pk[1].AckReq || b.avail != -1 || b.expect != 2 {
		t.Fatalf("b: AckReq %v %v, budget %d, ACKs expected %d", pk[0].AckReq, pk[1].AckReq, b.avail, b.expect)
	}
	// The ACKs give all back.
	ra.c.Ack(1, Run, ack, psn0.Add(3))
	rb.c.Ack(1, Run, ack, psn0.Add(1))
	ra.take()
	rb.take()
	ra.c.Flush()
	rb.c.Flush()
	if b.avail != 5 || b.expect != 0 {
		t.Fatalf("after the ACKs and Flush: budget %d, ACKs expected %d", b.avail, b.expect)
	}
}

// TestMigrate: when the retries of the current path run out and the Sink
// migrates to an alternate path, nothing fails: the requester sends again
// from the oldest unacknowledged PSN with its retry count and window anew,
// and only when those retries run out too (no alternate left) does the
// request fail with RetryExceeded.
func TestMigrate(t *testing.T) {
	r := newRC(t)
	r.canMigrate = true
	r.c.Post(Send, 3*mtu, false)
	r.c.Progress(0, Run)
	r.c.Ack(0, Run, ack, psn0) // the first packet arrived
	r.take()
	now := int64(0)
	for range 4 { // three retries, then the fourth expiry migrates
		now += timeout
		r.c.Timer(now, Run)
		wantPSNs(t, r.take(), psn0.Add(1), 2)
	}
	if r.migrate != 1 || len(r.ret) != 0 || r.fatal != 0 {
		t.Fatalf("after the retries: %d Migrate calls, retired %v, %d Fatal", r.migrate, r.ret, r.fatal)
	}
	if r.c.Window() != MaxUnacked || r.armAt != now+timeout {
		t.Fatalf("after migrating: window %d, deadline %d (want %d, %d)", r.c.Window(), r.armAt, MaxUnacked, now+timeout)
	}
	for range 3 { // the retries anew on the new path
		now += timeout
		r.c.Timer(now, Run)
		wantPSNs(t, r.take(), psn0.Add(1), 2)
	}
	if len(r.ret) != 0 {
		t.Fatalf("retired %v while retries remained", r.ret)
	}
	now += timeout
	r.c.Timer(now, Run)
	wantRetired(t, r, retirement{0, RetryExceeded})
	if r.migrate != 2 {
		t.Fatalf("%d Migrate calls", r.migrate)
	}
}
