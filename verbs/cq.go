// Completion queues and completion channels: the engine pushes work
// completions into a fixed ring; Poll copies them out without allocating; an
// armed CQ signals its channel once when the next (solicited) completion
// arrives.

package verbs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// WC is a work completion (ibv_wc).
type WC struct {
	WRID      uint64
	Status    Status
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // valid with WCWithImm, in host order
	QPNum     wire.QPN
	SrcQP     wire.QPN
	Flags     WCFlags
	PKeyIndex uint16
	SLID      uint16
	SL        uint8
	DLIDPath  uint8

	// InvalidatedRKey is the R_Key a received SEND_WITH_INV invalidated,
	// valid with WCWithInv (ibv_wc's invalidated_rkey).
	InvalidatedRKey wire.RKey
	// Timestamp is the device clock when the completion was generated, in
	// nanoseconds (see DeviceClock), if the CQ was created with
	// WCWithCompletionTimestamp; zero otherwise.
	Timestamp uint64
	// WallclockNS is the wall clock when the completion was generated, in
	// nanoseconds since the Unix epoch, if the CQ was created with
	// WCWithCompletionTimestampWallclock; zero otherwise.
	WallclockNS uint64
}

// CompChannel delivers completion events of the CQs attached to it.
type CompChannel struct {
	dev *Device
	c   chan *CQ
}

// CreateCompChannel creates a completion channel.
func (d *Device) CreateCompChannel() *CompChannel {
	return &CompChannel{dev: d, c: make(chan *CQ, 1024)}
}

// C returns the channel on which armed CQs are delivered, for use in select.
func (ch *CompChannel) C() <-chan *CQ { return ch.c }

// Get waits for the next CQ event (ibv_get_cq_event). The CQ must be re-armed
// with ReqNotify to get another.
func (ch *CompChannel) Get(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.c:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

const (
	notifyNone = iota
	notifyNext
	notifySolicited
)

// CQ is a completion queue.
type CQ struct {
	dev *Device
	ch  *CompChannel

	mu       sync.Mutex
	ring     []WC
	head, n  int
	armed    int
	overflow bool
	dead     bool
	waiters  int // goroutines blocked in Wait
	// inline counts the waiters receiving on their own goroutine
	// (link.Waiter.PollWait): a completion made elsewhere wakes them.
	inline atomic.Int32
	ready  func() bool   // the PollWait condition: a completion, or destroyed
	wake   chan struct{} // one token: a completion arrived for a waiter
	gone   chan struct{} // closed by Destroy
	refs   int           // QPs and SRQs using it
	ts     WCTimestamps  // clocks stamped on completions (CreateCQEx)
	// Context is free for the application's use (cq_context).
	Context any
}

// CreateCQ creates a completion queue with room for at least cqe
// completions; ch may be nil.
func (d *Device) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, errf(ErrInvalid, "CQ depth %d (1..%d)", cqe, MaxCQE)
	}
	if ch != nil && ch.dev != d {
		return nil, errf(ErrInvalid, "completion channel of another device")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errf(ErrClosed, "device %s", d.name)
	}
	if d.nCQ >= MaxCQ {
		return nil, errf(ErrLimit, "%d CQs", MaxCQ)
	}
	d.nCQ++
	cq := &CQ{dev: d, ch: ch, ring: make([]WC, cqe), wake: make(chan struct{}, 1), gone: make(chan struct{})}
	cq.ready = func() bool {
		cq.mu.Lock()
		r := cq.n > 0 || cq.dead
		cq.mu.Unlock()
		return r
	}
	return cq, nil
}

// Cap returns the number of completions the CQ holds.
func (cq *CQ) Cap() int {
	cq.mu.Lock() // Resize replaces the ring
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// Poll moves up to len(wc) completions into wc and returns how many. It does
// not allocate. If the CQ is empty it first receives what the link holds,
// on the calling goroutine (Device.Poll), unless the device was opened with
// Options.NoPollReceive.
func (cq *CQ) Poll(wc []WC) int { return cq.pollRecv(wc, true) }

// pollRecv is Poll; hold says whether the ACKs its receive calls for are
// held for the caller's next move (ackdefer.go), as they are for an
// application's poll, or sent at once, as for a Wait about to sleep. Held
// ACKs of earlier polls go out first.
func (cq *CQ) pollRecv(wc []WC, hold bool) int {
	d := cq.dev
	flushAcks()
	answerHolds.poll()
	n := cq.poll(wc)
	if n == 0 && d.pollRecv && len(wc) > 0 {
		var k int
		if hold {
			k = d.pollHolding()
		} else if d.poller != nil {
			k = d.poller.Poll()
		}
		if k > 0 {
			n = cq.poll(wc)
		}
	}
	return n
}

// poll moves up to len(wc) completions into wc.
func (cq *CQ) poll(wc []WC) int {
	cq.mu.Lock()
	n := 0
	for n < len(wc) && cq.n > 0 {
		wc[n] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		n++
	}
	cq.mu.Unlock()
	return n
}

// Wait blocks until the CQ holds a completion, then polls as Poll does
// and returns how many it moved into wc (at least one). It returns early
// with ctx's error when ctx ends and with an error wrapping ErrClosed
// when the CQ is destroyed, and ErrInvalid for an empty wc.
//
// Wait needs no completion channel and does not arm the CQ, so it serves
// queue pairs whose CQ was created without one (rdmacm's Dial and Listen
// create theirs so) and mixes freely with Poll. Several goroutines may
// wait on one CQ; each completion goes to one of them.
func (cq *CQ) Wait(ctx context.Context, wc []WC) (int, error) {
	if len(wc) == 0 {
		return 0, errf(ErrInvalid, "Wait with an empty slice")
	}
	for {
		if n := cq.pollRecv(wc, false); n > 0 {
			cq.passWake()
			return n, nil
		}
		cq.mu.Lock()
		if cq.dead {
			cq.mu.Unlock()
			return 0, errf(ErrClosed, "CQ destroyed")
		}
		if cq.n > 0 {
			cq.mu.Unlock()
			continue
		}
		cq.waiters++
		cq.mu.Unlock()
		var err error
		if cq.waitReceive(ctx) {
			err = ctx.Err()
		} else {
			select {
			case <-cq.wake:
			case <-cq.gone:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		cq.mu.Lock()
		cq.waiters--
		cq.mu.Unlock()
		if err != nil {
			cq.passWake() // a token taken by nobody would be lost
			return 0, err
		}
	}
}

// Slices of a Wait that receives on its own goroutine: it looks at its
// context between them (so a cancellation ends it within waitSliceCtx).
const (
	waitSlice    = time.Second
	waitSliceCtx = 10 * time.Millisecond
)

// waitReceive waits for a completion by receiving on the calling goroutine
// (Options.NoWaitReceive), for one slice, and reports whether it could: if
// not (another goroutine is receiving or waiting so), the caller waits on
// the wake-up channel.
func (cq *CQ) waitReceive(ctx context.Context) bool {
	w := cq.dev.waiter
	if w == nil {
		return false
	}
	d := waitSlice
	if ctx.Done() != nil {
		d = waitSliceCtx
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	cq.inline.Add(1)
	_, ok := w.PollWait(d, cq.ready)
	cq.inline.Add(-1)
	return ok
}

// passWake hands the wake-up on when completions are left over for
// another waiter.
func (cq *CQ) passWake() {
	cq.mu.Lock()
	more := cq.n > 0 && cq.waiters > 0
	cq.mu.Unlock()
	if more {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
	}
}

// ReqNotify arms the CQ: the next completion (or, with solicitedOnly, the
// next solicited or error completion) posts one event to the channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return errf(ErrClosed, "CQ destroyed")
	}
	if cq.ch == nil {
		return errf(ErrInvalid, "CQ has no completion channel")
	}
	if solicitedOnly {
		if cq.armed != notifyNext {
			cq.armed = notifySolicited
		}
	} else {
		cq.armed = notifyNext
	}
	return nil
}

// Destroy frees the CQ. It fails with ErrBusy while QPs use it.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return errf(ErrClosed, "CQ already destroyed")
	}
	if cq.refs > 0 {
		return errf(ErrBusy, "CQ used by %d QPs/SRQs", cq.refs)
	}
	cq.dead = true
	close(cq.gone)
	if cq.inline.Load() > 0 {
		cq.dev.waiter.Wake()
	}
	cq.dev.mu.Lock()
	cq.dev.nCQ--
	cq.dev.mu.Unlock()
	return nil
}

func (cq *CQ) hold() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return errf(ErrClosed, "CQ destroyed")
	}
	cq.refs++
	return nil
}

func (cq *CQ) release() {
	cq.mu.Lock()
	cq.refs--
	cq.mu.Unlock()
}

// push adds a completion. It reports false on overflow, after raising the
// CQ error event; the completion is lost, as on hardware.
func (cq *CQ) push(wc *WC, solicited bool) bool {
	cq.mu.Lock()
	if cq.n == len(cq.ring) {
		first := !cq.overflow
		cq.overflow = true
		cq.mu.Unlock()
		if first {
			cq.dev.postEvent(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		return false
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	if cq.ts != 0 {
		cq.stamp(&cq.ring[i])
	}
	cq.n++
	fire := cq.armed == notifyNext || (cq.armed == notifySolicited && (solicited || wc.Status != Success))
	if fire {
		cq.armed = notifyNone
	}
	waiter := cq.waiters > 0
	cq.mu.Unlock()
	if waiter {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
		if cq.inline.Load() > 0 {
			cq.dev.waiter.Wake()
		}
	}
	if fire {
		select {
		case cq.ch.c <- cq:
		default:
			cq.dev.log.Warn("completion event dropped: channel full")
		}
	}
	return true
}
