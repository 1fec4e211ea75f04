// Work queues: SendWR and RecvWR as the application posts them, the fixed
// slots they are copied into, and the post calls with libibverbs' bad_wr
// contract (everything before the bad request is posted, nothing after).

package verbs

import (
	"github.com/softrdma/softrdma/link"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/wire"
)

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline, when not nil, is the message itself: it is copied into the
	// work request at post time, as libibverbs copies inline data from
	// plain pointers, so it needs no registered memory and no lkey. SGL
	// must then be empty; SendInline is implied, and the QP's
	// MaxInlineData bounds its length.
	Inline []byte
	// Imm is the immediate data of *_WITH_IMM, in host order.
	Imm uint32
	// RDMA and atomic operations: the remote address and key.
	RemoteAddr uint64
	RKey       wire.RKey
	// Atomics: CompareAdd is the compare value (CMP_AND_SWP) or the addend
	// (FETCH_AND_ADD); Swap is the swap value.
	CompareAdd uint64
	Swap       uint64
	// FLUSH: what to flush at RemoteAddr (flush.go). ATOMIC_WRITE takes
	// its 8 bytes from Inline (see AtomicWriteValue) or from one 8-byte
	// SGE, copied when it is posted.
	Flush FlushSpec
	// UD: the destination.
	AH         *AH
	RemoteQPN  wire.QPN
	RemoteQKey wire.QKey
	// InvRKey is the R_Key that LOCAL_INV invalidates, or that the
	// receiver of a SEND_WITH_INV invalidates (ibv_send_wr's
	// invalidate_rkey).
	InvRKey wire.RKey
	// BIND_MW: the window and what to bind it to; RKey's low byte is the
	// window's new key byte (ibv_send_wr's bind_mw).
	MW   *MW
	Bind MWBindInfo
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// swqe is a send queue slot.
type swqe struct {
	id       uint64
	op       WROpcode
	info     *wrInfo // wrTable's entry for op
	flags    SendFlags
	sgl      []mem.SGE // capacity max_send_sge
	inline   []byte    // capacity max_inline_data
	isInline bool
	length   int
	imm      uint32
	raddr    uint64
	rkey     wire.RKey
	cmpAdd   uint64
	swap     uint64
	flush    FlushSpec // FLUSH
	aw       [8]byte   // ATOMIC_WRITE's data
	src      netip.Addr
	dst      netip.AddrPort
	ib       link.IBAddr // UD: the AH's InfiniBand addressing
	tclass   uint8       // UD: the AH's traffic class
	rqpn     wire.QPN
	qkey     wire.QKey
	signaled bool
	invRKey  wire.RKey  // LOCAL_INV, SEND_WITH_INV
	mw       *MW        // BIND_MW
	bind     MWBindInfo // BIND_MW
}

// sendQueue holds the send work requests' data, slot i for the requester
// core's sequence numbers i, i+depth, ... (the core keeps their order and
// progress). Its slots are allocated by the first post (ensure): a QP
// that never sends costs none of them, and creating many QPs stays quick.
type sendQueue struct {
	slots           []swqe
	n, nsge, inline int // the slots' shape, for ensure
	drainNotified   bool
}

// init shapes the queue: n slots of nsge SGEs and inline bytes each.
func (q *sendQueue) init(n, nsge, inline int) {
	q.n, q.nsge, q.inline = n, nsge, inline
}

// ensure allocates the slots if they are not yet.
func (q *sendQueue) ensure() {
	if q.slots != nil {
		return
	}
	n, nsge, inline := q.n, q.nsge, q.inline
	// One backing array for all the slots' SGLs, and one for their inline
	// data: three allocations per queue, whatever its depth.
	q.slots = make([]swqe, n)
	sgls := make([]mem.SGE, n*nsge)
	var in []byte
	if inline > 0 {
		in = make([]byte, n*inline)
	}
	for i := range q.slots {
		q.slots[i].sgl = sgls[i*nsge : i*nsge : (i+1)*nsge]
		if inline > 0 {
			q.slots[i].inline = in[i*inline : i*inline : (i+1)*inline]
		}
	}
}

func (q *sendQueue) at(i uint64) *swqe { return &q.slots[i%uint64(len(q.slots))] }

type rwqe struct {
	id     uint64
	sgl    []mem.SGE
	length int
}

// recvQueue is a receive queue (a QP's or an SRQ's). A QP's slots are
// allocated by its first post (ensure), as a send queue's.
type recvQueue struct {
	slots      []rwqe
	head, tail uint64
	n, nsge    int // the slots' shape, for ensure
}

// init shapes the queue: n slots of nsge SGEs each.
func (q *recvQueue) init(n, nsge int) { q.n, q.nsge = n, nsge }

// ensure allocates the slots if they are not yet.
func (q *recvQueue) ensure() {
	if q.slots != nil {
		return
	}
	n, nsge := q.n, q.nsge
	q.slots = make([]rwqe, n)
	sgls := make([]mem.SGE, n*nsge)
	for i := range q.slots {
		q.slots[i].sgl = sgls[i*nsge : i*nsge : (i+1)*nsge]
	}
}

func (q *recvQueue) reset()      { q.head, q.tail = 0, 0 }
func (q *recvQueue) count() int  { return int(q.tail - q.head) }
func (q *recvQueue) full() bool  { return q.count() == q.n }
func (q *recvQueue) peek() *rwqe { return &q.slots[q.head%uint64(len(q.slots))] }

func (q *recvQueue) push(wr *RecvWR) {
	s := &q.slots[q.tail%uint64(len(q.slots))]
	s.id = wr.ID
	s.sgl = appendSGL(s.sgl[:0], wr.SGL)
	s.length = int(sglLen(wr.SGL))
	q.tail++
}

// PostRecv posts receive work requests. On error the returned *WRError says
// which request failed; the ones before it were posted.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	if qp.srq != nil {
		return &WRError{Index: 0, WRID: firstRecvID(wrs), Err: errf(ErrInvalid, "QP uses an SRQ; post to the SRQ")}
	}
	qp.mu.Lock()
	defer qp.unlockSend()
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.checkRecvLocked(wr); err != nil {
			return &WRError{Index: i, WRID: wr.ID, Err: err}
		}
		qp.rq.ensure()
		qp.rq.push(wr)
		if qp.state == StateErr {
			qp.flushRecvLocked()
		}
	}
	// A receive may unblock a responder waiting after an RNR NAK; nothing to
	// do here: the requester retries after its RNR timer.
	return nil
}

func firstRecvID(wrs []RecvWR) uint64 {
	if len(wrs) > 0 {
		return wrs[0].ID
	}
	return 0
}

func (qp *QP) checkRecvLocked(wr *RecvWR) error {
	if qp.dead {
		return errf(ErrClosed, "QP destroyed")
	}
	if qp.state == StateReset {
		return errf(ErrState, "post receive in state RESET")
	}
	if len(wr.SGL) > qp.attr.Cap.MaxRecvSGE {
		return errf(ErrInvalid, "%d SGEs, QP allows %d", len(wr.SGL), qp.attr.Cap.MaxRecvSGE)
	}
	if qp.rq.full() {
		return errf(ErrQueueFull, "receive queue holds %d", qp.rq.n)
	}
	return nil
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd     *PD
	mu     sync.Mutex
	rq     recvQueue
	maxSGE int
	limit  int
	dead   bool
	refs   atomic.Int32
	// Context is free for the application's use (srq_context).
	Context any
}

// SRQAttr are an SRQ's attributes (ibv_srq_attr).
type SRQAttr struct {
	MaxWR    int
	MaxSGE   int
	SRQLimit int
}

// SRQAttrMask selects what SRQ.Modify changes (ibv_srq_attr_mask).
type SRQAttrMask int

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0
	SRQLimit SRQAttrMask = 1 << 1
)

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > MaxSRQWR {
		return nil, errf(ErrInvalid, "SRQ max_wr %d (1..%d)", attr.MaxWR, MaxSRQWR)
	}
	if attr.MaxSGE < 1 || attr.MaxSGE > MaxSGE {
		return nil, errf(ErrInvalid, "SRQ max_sge %d (1..%d)", attr.MaxSGE, MaxSGE)
	}
	if attr.SRQLimit < 0 || attr.SRQLimit > attr.MaxWR {
		return nil, errf(ErrInvalid, "SRQ limit %d", attr.SRQLimit)
	}
	if err := pd.hold(); err != nil {
		return nil, err
	}
	s := &SRQ{pd: pd, maxSGE: attr.MaxSGE, limit: attr.SRQLimit}
	s.rq.init(attr.MaxWR, attr.MaxSGE)
	s.rq.ensure()
	return s, nil
}

// Modify changes the SRQ limit (arming the limit event) or fails for resizing.
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return errf(ErrClosed, "SRQ destroyed")
	}
	if mask&SRQMaxWR != 0 {
		return errf(ErrNotSupported, "resizing an SRQ")
	}
	if mask&SRQLimit != 0 {
		if attr.SRQLimit < 0 || attr.SRQLimit > len(s.rq.slots) {
			return errf(ErrInvalid, "SRQ limit %d", attr.SRQLimit)
		}
		s.limit = attr.SRQLimit
	}
	return nil
}

// Query returns the SRQ's attributes.
func (s *SRQ) Query() SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SRQAttr{MaxWR: len(s.rq.slots), MaxSGE: s.maxSGE, SRQLimit: s.limit}
}

// Destroy frees the SRQ; it fails with ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return errf(ErrClosed, "SRQ already destroyed")
	}
	if n := s.refs.Load(); n > 0 {
		return errf(ErrBusy, "SRQ used by %d QPs", n)
	}
	s.dead = true
	s.pd.release()
	return nil
}

// PostRecv posts receive work requests to the SRQ.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		switch {
		case s.dead:
			return &WRError{Index: i, WRID: wr.ID, Err: errf(ErrClosed, "SRQ destroyed")}
		case len(wr.SGL) > s.maxSGE:
			return &WRError{Index: i, WRID: wr.ID, Err: errf(ErrInvalid, "%d SGEs, SRQ allows %d", len(wr.SGL), s.maxSGE)}
		case s.rq.full():
			return &WRError{Index: i, WRID: wr.ID, Err: errf(ErrQueueFull, "SRQ holds %d", len(s.rq.slots))}
		}
		s.rq.push(wr)
	}
	return nil
}

// take removes the oldest receive WQE into dst, reporting false if empty. It
// raises the limit event when the count falls below an armed limit.
func (s *SRQ) take(dst *rwqe) bool {
	s.mu.Lock()
	if s.rq.count() == 0 {
		s.mu.Unlock()
		return false
	}
	w := s.rq.peek()
	dst.id, dst.length = w.id, w.length
	dst.sgl = append(dst.sgl[:0], w.sgl...)
	s.rq.head++
	fire := s.limit > 0 && s.rq.count() < s.limit
	if fire {
		s.limit = 0 // the event disarms the limit
	}
	s.mu.Unlock()
	if fire {
		s.pd.dev.postEvent(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return true
}
