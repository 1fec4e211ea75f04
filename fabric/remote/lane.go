package remote

// The server's side of per-VL flow control: a lane per data VL between a
// session's stream reader and the fabric.

import (
	"sync"
	"sync/atomic"
)

// lane holds packets of one data VL that the session's reader has taken
// off the stream, until the lane's goroutine hands them to the fabric
// (ib.Port.Send, which waits while the VL has no credits in the fabric).
// It is a ring of laneCredits frame buffers reused packet after packet:
// the reader reads a frame straight into the free slot at the tail, so a
// packet costs no allocation and no copy here. The client never sends
// more than the ring holds (it has a credit per free slot), so the reader
// never waits for a lane.
type lane struct {
	ss   *session
	v    uint8
	wake chan struct{} // cap 1: the reader added packets

	mu   sync.Mutex
	head int // first queued slot
	n    int // slots queued: head .. head+n-1 (mod laneCredits)
	bufs [laneCredits][]byte
	pkts [laneCredits][]byte // the packet in bufs[i] (its frame body)
}

// laneFor returns the session's lane for data VL v, starting it on the
// VL's first packet. Only the reader calls it.
func (ss *session) laneFor(v uint8) *lane {
	if l := ss.lanes[v]; l != nil {
		return l
	}
	l := &lane{ss: ss, v: v, wake: make(chan struct{}, 1)}
	ss.lanes[v] = l
	ss.lw.Add(1)
	go l.run()
	return l
}

// tail returns the free slot at the tail and its buffer, or false if the
// ring is full (the client sent beyond its credits). Only the reader
// calls it; the slot stays the reader's until commit.
func (l *lane) tail() (int, []byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == laneCredits {
		return 0, nil, false
	}
	i := (l.head + l.n) % laneCredits
	return i, l.bufs[i], true
}

// commit queues the packet the reader read into slot i (buf is the slot's
// buffer, perhaps grown, and pkt its body). The lane is woken by the
// reader once per batch (kick).
func (l *lane) commit(i int, buf, pkt []byte) {
	l.mu.Lock()
	l.bufs[i], l.pkts[i] = buf, pkt
	l.n++
	l.mu.Unlock()
}

func (l *lane) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run hands the lane's packets to the fabric in order, in batches of up
// to rxBatch, and returns a credit to the client for each. It ends when
// the reader has ended and the ring is empty, or when the fabric's port
// is closed (Send fails).
func (l *lane) run() {
	ss := l.ss
	defer ss.lw.Done()
	for {
		l.mu.Lock()
		for l.n == 0 {
			l.mu.Unlock()
			select {
			case <-l.wake:
			case <-ss.inDone:
				l.mu.Lock()
				if l.n == 0 {
					l.mu.Unlock()
					return
				}
				l.mu.Unlock()
			}
			l.mu.Lock()
		}
		k := min(l.n, laneCredits-l.head, rxBatch)
		batch := l.pkts[l.head : l.head+k]
		l.mu.Unlock()
		err := ss.hca.Send(batch) // the fabric copies them
		l.mu.Lock()
		clear(batch)
		l.head = (l.head + k) % laneCredits
		l.n -= k
		l.mu.Unlock()
		if err != nil {
			return
		}
		ss.s.pktsIn.Add(uint64(k))
		ss.returnCredits(l.v, k)
	}
}

// sessionCredits are the credits a session's lanes have freed and not yet
// sent to the client, per VL, with a mask of the VLs that have some.
type sessionCredits struct {
	n    [dataVLs]atomic.Uint32
	mask atomic.Uint32
	// ready (cap 1) tells the session's control writer that a VL has
	// collected creditReturn credits.
	ready chan struct{}
}

// returnCredits records k credits freed on VL v; once the VL has
// creditReturn of them the control writer sends them.
func (ss *session) returnCredits(v uint8, k int) {
	c := &ss.credits
	n := c.n[v].Add(uint32(k))
	c.mask.Or(1 << v)
	if n >= creditReturn {
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
}

// appendCreditFrame appends a credit frame with the credits collected so
// far to dst, if there are any. It runs under wmu, so that credit frames
// go out in the order they are taken.
func (ss *session) appendCreditFrame(dst []byte) []byte {
	c := &ss.credits
	m := c.mask.Swap(0)
	if m == 0 {
		return dst
	}
	var grant [dataVLs]uint16
	some := false
	for v := range dataVLs {
		if m&(1<<v) != 0 {
			// At most laneCredits are outstanding, so the count fits.
			if k := c.n[v].Swap(0); k != 0 {
				grant[v], some = uint16(k), true
			}
		}
	}
	if !some {
		return dst
	}
	var body [dataVLs * creditEntryLen]byte
	return appendFrame(dst, frameCredit, appendCredits(body[:0], &grant))
}

// initialCredits is the body of the credit frame a session starts with:
// laneCredits on every data VL.
var initialCredits = func() []byte {
	var c [dataVLs]uint16
	for v := range c {
		c[v] = laneCredits
	}
	return appendCredits(nil, &c)
}()
