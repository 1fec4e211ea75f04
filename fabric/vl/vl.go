// Package vl models the link level of one direction of an InfiniBand link
// (IBTA vol. 1 chapter 7): virtual lanes with their receive buffers,
// credit-based flow control, SL-to-VL mapping and VL arbitration. It knows
// nothing of the fabric around it; a port's transmitter and the receiver at
// the other end of the wire are the two sides of a Link.
//
// # Lanes and credits
//
// A Link carries data VLs 0..n-1 and VL15, the management lane. The receiver
// has a buffer for each data VL, sized in credits of 64 bytes; a packet
// takes as many credits as it has 64-byte blocks (rounded up). The
// transmitter sends a packet on a data VL only when the receiver's buffer
// for that VL has room for all of it, so no data packet is ever dropped for
// lack of buffer: a full buffer stops its lane, the lane's send queue fills,
// and Send blocks (or fails with its context's error) until the receiver
// reads. That is backpressure, as on real IB.
//
// The IBTA returns credits with flow-control packets that carry a running
// total of blocks received (FCTBS) and a credit limit (FCCL), sent at least
// every 65,536 symbol times. This model replaces them with an internal
// credit update: when the receiver takes a packet out of its buffer (Recv)
// the credits are back at the sender at once. What the receiver sees is the
// same: the sender never overruns a buffer, and a lane stalls exactly when
// its buffer is full.
//
// VL15 bypasses flow control: its packets go whenever the wire is free,
// before any data packet, and a receiver whose VL15 buffer (counted in
// packets) is full drops them, as hardware does; subnet management retries.
// Send on VL15 never blocks: if VL15's send queue is full the packet is
// dropped there, and counted.
//
// # Arbitration and the wire
//
// Each time the wire is free the transmitter sends the next packet: VL15
// first, then the data VL the Arbiter picks among the lanes that have a
// packet and credits for it (high- and low-priority tables of weighted
// entries and the limit of high priority, IBTA 7.6.9). With Config.Rate
// set, a packet holds the wire for its length over the rate, so lanes
// compete for the wire as on a real link; with Rate 0 the wire takes no
// time and lanes compete only while the link is paused or their buffers
// are full. Delivery.Seq numbers packets in the order they crossed the wire.
//
// A Link runs one goroutine, the transmitter; Close stops it and fails the
// blocked Send and Recv calls with ErrClosed.
package vl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CreditSize is the size of a flow-control credit: 64 bytes of buffer.
const CreditSize = 64

// MaxDataVLs is the most data VLs a port has (VL0-VL14).
const MaxDataVLs = 15

// VL15 is the management lane.
const VL15 = 15

// Errors wrapped by the errors of this package.
var (
	ErrClosed = errors.New("vl: link closed")
	ErrConfig = errors.New("vl: bad configuration")
	ErrVL     = errors.New("vl: no such virtual lane")
	ErrSize   = errors.New("vl: packet larger than the lane's receive buffer")
)

// Credits returns the number of credits a packet of n bytes takes.
func Credits(n int) int { return (n + CreditSize - 1) / CreditSize }

// SL2VL is a port's SL-to-VL mapping table: the VL of each of the 16
// service levels. An entry of VL15 means packets of that SL are dropped
// (IBTA 7.6.6: data packets never travel on VL15).
type SL2VL [16]uint8

// SL2VLModulo maps service level s to VL s mod n, a common default for a
// port with n data VLs.
func SL2VLModulo(n int) SL2VL {
	var t SL2VL
	for s := range t {
		t[s] = uint8(s % max(n, 1))
	}
	return t
}

// Config describes one direction of a link. Zero values take the defaults
// given.
type Config struct {
	// DataVLs is the number of data VLs, 1-15 (default 1).
	DataVLs int
	// Credits is each data VL's receive buffer in 64-byte credits
	// (default 132: two packets of a 4096-byte MTU with LRH, GRH,
	// transport headers and CRCs, 66 credits each).
	Credits int
	// VLCredits, if set, gives each data VL its own buffer size; it has
	// DataVLs entries and overrides Credits.
	VLCredits []int
	// VL15Packets is how many packets VL15's receive buffer holds
	// (default 2).
	VL15Packets int
	// QueueLen is how many packets each VL's send queue holds before Send
	// blocks (default 16).
	QueueLen int
	// Rate is the wire's speed in bytes per second; 0 makes the wire take
	// no time.
	Rate int64
	// SL2VL maps service levels for VLOf (default SL2VLModulo(DataVLs)).
	SL2VL *SL2VL
	// Arbitration is the VL arbitration (default DefaultArbitration).
	Arbitration *Arbitration
	// Paused starts the link with its data VLs held (see Pause).
	Paused bool
}

// Delivery is a packet as the receiver gets it.
type Delivery struct {
	VL   uint8
	Seq  uint64 // order on the wire, from 1
	Data []byte
}

// Stats counts what a Link did. Per-lane arrays are indexed by VL; VL15 is
// index 15.
type Stats struct {
	Sent      [16]uint64 // packets that crossed the wire
	Received  [16]uint64 // packets the receiver took (Recv)
	Dropped   [16]uint64 // VL15 only: send queue or receive buffer full
	SendWaits uint64     // Send calls that had to wait for queue room
	// MaxQueued and MaxBuffered are the high-water marks of each lane's
	// send queue (packets) and receive buffer (credits for data VLs,
	// packets for VL15).
	MaxQueued   [16]int
	MaxBuffered [16]int
}

type lane struct {
	queue    [][]byte // send queue
	rx       []Delivery
	capacity int // receive buffer: credits, or packets for VL15
	used     int // credits (packets for VL15) in the receive buffer or on the wire
}

// Link is one direction of an IB link. Its methods are safe for
// concurrent use.
type Link struct {
	n        int
	queueLen int
	rate     int64

	mu      sync.Mutex
	changed chan struct{} // made by a waiter, closed on the next change of state
	lanes   [16]lane
	sl2vl   SL2VL
	arb     *Arbiter
	paused  bool
	closed  bool
	seq     uint64
	stats   Stats
	rxNext  int // where RecvAny starts looking

	quit chan struct{}
	done chan struct{}
}

// New starts a link configured by c.
func New(c Config) (*Link, error) {
	n := c.DataVLs
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxDataVLs {
		return nil, fmt.Errorf("%w: %d data VLs (1-%d)", ErrConfig, c.DataVLs, MaxDataVLs)
	}
	credits := c.Credits
	if credits == 0 {
		credits = 132
	}
	if c.VLCredits != nil && len(c.VLCredits) != n {
		return nil, fmt.Errorf("%w: %d VLCredits for %d data VLs", ErrConfig, len(c.VLCredits), n)
	}
	l := &Link{n: n, queueLen: c.QueueLen, rate: c.Rate, paused: c.Paused,
		quit: make(chan struct{}), done: make(chan struct{})}
	if l.queueLen == 0 {
		l.queueLen = 16
	}
	if l.queueLen < 1 || credits < 1 || c.Rate < 0 || c.VL15Packets < 0 {
		return nil, fmt.Errorf("%w: queue %d, credits %d, rate %d, VL15 buffer %d", ErrConfig, c.QueueLen, credits, c.Rate, c.VL15Packets)
	}
	for v := range n {
		l.lanes[v].capacity = credits
		if c.VLCredits != nil {
			l.lanes[v].capacity = c.VLCredits[v]
			if c.VLCredits[v] < 1 {
				return nil, fmt.Errorf("%w: VL%d buffer of %d credits", ErrConfig, v, c.VLCredits[v])
			}
		}
	}
	l.lanes[VL15].capacity = c.VL15Packets
	if l.lanes[VL15].capacity == 0 {
		l.lanes[VL15].capacity = 2
	}
	l.sl2vl = SL2VLModulo(n)
	if c.SL2VL != nil {
		if err := l.checkSL2VL(*c.SL2VL); err != nil {
			return nil, err
		}
		l.sl2vl = *c.SL2VL
	}
	a := DefaultArbitration(n)
	if c.Arbitration != nil {
		a = *c.Arbitration
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	l.arb = NewArbiter(a)
	go l.transmit()
	return l, nil
}

func (l *Link) checkSL2VL(t SL2VL) error {
	for s, v := range t {
		if int(v) >= l.n && v != VL15 {
			return fmt.Errorf("%w: SL%d maps to VL%d on a link of %d data VLs", ErrConfig, s, v, l.n)
		}
	}
	return nil
}

// DataVLs returns the number of data VLs.
func (l *Link) DataVLs() int { return l.n }

// notifyLocked wakes everyone waiting for a change.
func (l *Link) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// changedLocked returns the channel the next change closes.
func (l *Link) changedLocked() chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// wait releases the lock until the state changes or ctx is done, and
// takes it again.
func (l *Link) wait(ctx context.Context) error {
	ch := l.changedLocked()
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Link) validVL(vl uint8) bool { return int(vl) < l.n || vl == VL15 }

// Send queues data for transmission on vl (a data VL or VL15) and returns
// once it is queued. On a data VL it blocks while the lane's send queue is
// full, which it stays while the receiver does not free buffer: it returns
// ctx's error if ctx ends first. On VL15 it never blocks: a packet that
// finds the queue full is dropped and counted. The link keeps data until
// the receiver takes it; the caller must not change it.
func (l *Link) Send(ctx context.Context, vl uint8, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.validVL(vl) {
		return fmt.Errorf("%w: VL%d on a link of %d data VLs", ErrVL, vl, l.n)
	}
	ln := &l.lanes[vl]
	if vl != VL15 && Credits(len(data)) > ln.capacity {
		return fmt.Errorf("%w: %d bytes (%d credits) on VL%d of %d credits", ErrSize, len(data), Credits(len(data)), vl, ln.capacity)
	}
	waited := false
	for {
		if l.closed {
			return ErrClosed
		}
		if len(ln.queue) < l.queueLen {
			break
		}
		if vl == VL15 {
			l.stats.Dropped[VL15]++
			return nil
		}
		if !waited {
			waited = true
			l.stats.SendWaits++
		}
		if err := l.wait(ctx); err != nil {
			return err
		}
	}
	ln.queue = append(ln.queue, data)
	l.stats.MaxQueued[vl] = max(l.stats.MaxQueued[vl], len(ln.queue))
	l.notifyLocked()
	return nil
}

// VLOf returns the VL that service level sl maps to, and false if the
// SL2VL table maps it to VL15 (such packets are dropped) or sl is out of
// range.
func (l *Link) VLOf(sl uint8) (uint8, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sl >= 16 || l.sl2vl[sl] == VL15 {
		return 0, false
	}
	return l.sl2vl[sl], true
}

// SetSL2VL replaces the SL-to-VL table, as an SM's Set(SLtoVLMappingTable)
// does.
func (l *Link) SetSL2VL(t SL2VL) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkSL2VL(t); err != nil {
		return err
	}
	l.sl2vl = t
	return nil
}

// SetArbitration replaces the VL arbitration configuration; the round
// robin starts again from the first entries.
func (l *Link) SetArbitration(a Arbitration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := a.validate(); err != nil {
		return err
	}
	l.arb = NewArbiter(a)
	l.notifyLocked()
	return nil
}

// Pause holds the data VLs: nothing more is sent on them until Resume, and
// Send blocks once their queues fill. VL15 still flows, as on a port that
// the SM has not yet made Active.
func (l *Link) Pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = true
}

// Resume lets the data VLs send again.
func (l *Link) Resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = false
	l.notifyLocked()
}

// Recv takes the next packet out of vl's receive buffer, waiting for one
// until ctx ends. Taking it frees its credits, which the sender may then use.
func (l *Link) Recv(ctx context.Context, vl uint8) (Delivery, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.validVL(vl) {
		return Delivery{}, fmt.Errorf("%w: VL%d on a link of %d data VLs", ErrVL, vl, l.n)
	}
	for {
		if len(l.lanes[vl].rx) > 0 {
			return l.takeLocked(vl), nil
		}
		if l.closed {
			return Delivery{}, ErrClosed
		}
		if err := l.wait(ctx); err != nil {
			return Delivery{}, err
		}
	}
}

// RecvAny takes the next packet out of any receive buffer, VL15 first and
// then the data VLs in turn, waiting until ctx ends. A stalled lane does not
// hold the others up.
func (l *Link) RecvAny(ctx context.Context) (Delivery, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if len(l.lanes[VL15].rx) > 0 {
			return l.takeLocked(VL15), nil
		}
		for i := range l.n {
			v := (l.rxNext + i) % l.n
			if len(l.lanes[v].rx) > 0 {
				l.rxNext = v + 1
				return l.takeLocked(uint8(v)), nil
			}
		}
		if l.closed {
			return Delivery{}, ErrClosed
		}
		if err := l.wait(ctx); err != nil {
			return Delivery{}, err
		}
	}
}

func (l *Link) takeLocked(vl uint8) Delivery {
	ln := &l.lanes[vl]
	d := ln.rx[0]
	ln.rx[0] = Delivery{}
	ln.rx = ln.rx[1:]
	if vl == VL15 {
		ln.used--
	} else {
		ln.used -= Credits(len(d.Data)) // the credit update
	}
	l.stats.Received[vl]++
	l.notifyLocked()
	return d
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Close stops the transmitter, drops what is queued or on the wire, and
// fails blocked and later Send and Recv calls with ErrClosed (Recv still
// returns what was already received).
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.notifyLocked()
	l.mu.Unlock()
	close(l.quit)
	<-l.done
	return nil
}

// readyLocked is the arbiter's view of a data VL: the head packet's size
// and whether the receiver has credits for it.
func (l *Link) readyLocked(vl uint8) (int, bool) {
	if int(vl) >= l.n {
		return 0, false
	}
	ln := &l.lanes[vl]
	if len(ln.queue) == 0 {
		return 0, false
	}
	size := len(ln.queue[0])
	return size, ln.used+Credits(size) <= ln.capacity
}

// nextLocked takes the packet that goes on the wire next, or returns false.
func (l *Link) nextLocked() (uint8, []byte, bool) {
	var vl uint8
	if len(l.lanes[VL15].queue) > 0 {
		vl = VL15
	} else if l.paused {
		return 0, nil, false
	} else if v, ok := l.arb.Next(l.readyLocked); ok {
		vl = v
	} else {
		return 0, nil, false
	}
	ln := &l.lanes[vl]
	data := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	if vl != VL15 {
		ln.used += Credits(len(data)) // the sender spends its credits
	}
	l.notifyLocked() // queue room for Send
	return vl, data, true
}

// transmit is the transmitter: it sends one packet at a time, holding the
// wire for the packet's time when the link has a rate.
func (l *Link) transmit() {
	defer close(l.done)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return
		}
		vl, data, ok := l.nextLocked()
		if !ok {
			ch := l.changedLocked()
			l.mu.Unlock()
			select {
			case <-ch:
			case <-l.quit:
			}
			l.mu.Lock()
			continue
		}
		if l.rate > 0 {
			l.mu.Unlock()
			d := time.Duration(int64(len(data)) * int64(time.Second) / l.rate)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
			case <-l.quit:
				return
			}
			l.mu.Lock()
		}
		l.deliverLocked(vl, data)
	}
}

func (l *Link) deliverLocked(vl uint8, data []byte) {
	ln := &l.lanes[vl]
	l.seq++
	l.stats.Sent[vl]++
	if vl == VL15 {
		if ln.used >= ln.capacity {
			l.stats.Dropped[VL15]++
			return
		}
		ln.used++
	}
	ln.rx = append(ln.rx, Delivery{VL: vl, Seq: l.seq, Data: data})
	l.stats.MaxBuffered[vl] = max(l.stats.MaxBuffered[vl], ln.used)
	l.notifyLocked()
}
