// VL arbitration (IBTA vol. 1 7.6.9): which virtual lane a port transmits
// from next. A pure state machine: the Link asks it for a VL each time the
// wire is free, telling it which lanes have a packet that may go now.

package vl

import "fmt"

// WeightUnit is the unit of an arbitration entry's weight: 64 bytes.
const WeightUnit = 64

// HighLimitUnit is the unit of the limit of high priority: 4096 bytes.
const HighLimitUnit = 4096

// HighLimitUnbounded is the limit of high priority that lets the high
// table starve the low one for as long as it has packets.
const HighLimitUnbounded = 255

// MaxEntries is the number of entries a VL arbitration table holds.
const MaxEntries = 64

// Entry is one entry of a VL arbitration table: a data VL and a weight in
// units of 64 bytes. An entry of weight 0 is skipped, and so is one naming
// a VL the link does not operate (VL15 included): an SM may program a
// port's tables for more VLs than the link runs, and those entries stay
// idle.
type Entry struct {
	VL     uint8
	Weight uint8
}

// Arbitration is a port's VL arbitration configuration, as the SM sets it
// in the VLArbitrationTable and PortInfo attributes.
type Arbitration struct {
	High, Low []Entry // up to MaxEntries each
	// HighLimit is the limit of high priority in units of 4096 bytes: how
	// much the high table may send while a low-priority packet waits. 0
	// lets one high-priority packet through, HighLimitUnbounded no limit.
	HighLimit uint8
}

// DefaultArbitration serves data VLs 0..n-1 round robin from the low table,
// each with weight 64 (4 KiB a turn); the high table is empty. A port uses
// it until the SM configures one.
func DefaultArbitration(n int) Arbitration {
	a := Arbitration{}
	for v := range n {
		a.Low = append(a.Low, Entry{VL: uint8(v), Weight: 64})
	}
	return a
}

func (a *Arbitration) validate() error {
	if len(a.High) > MaxEntries || len(a.Low) > MaxEntries {
		return fmt.Errorf("%w: arbitration tables of %d and %d entries (at most %d)", ErrConfig, len(a.High), len(a.Low), MaxEntries)
	}
	return nil
}

// table is one arbitration table's round-robin state.
type table struct {
	entries []Entry
	cur     int // the entry being served; -1 before the first pick
	left    int // bytes left in its weight
}

// pick returns the VL the table serves next and commits the packet's size
// against its entry's weight, or false if no entry's VL is ready. The
// current entry keeps the wire while its weight lasts and its VL is ready
// (a packet that overruns the weight is still sent whole); otherwise the
// next entry of nonzero weight with a ready VL takes over with its full
// weight.
func (t *table) pick(ready func(vl uint8) (int, bool)) (uint8, bool) {
	n := len(t.entries)
	if n == 0 {
		return 0, false
	}
	if t.cur >= 0 && t.left > 0 {
		e := t.entries[t.cur]
		if size, ok := ready(e.VL); ok {
			t.left -= size
			return e.VL, true
		}
	}
	for i := 1; i <= n; i++ {
		j := (t.cur + i) % n
		if t.cur < 0 {
			j = i - 1
		}
		e := t.entries[j]
		if e.Weight == 0 {
			continue
		}
		if size, ok := ready(e.VL); ok {
			t.cur, t.left = j, int(e.Weight)*WeightUnit-size
			return e.VL, true
		}
	}
	return 0, false
}

// ready reports whether any entry of nonzero weight has a ready VL, without
// changing the state.
func (t *table) ready(ready func(vl uint8) (int, bool)) bool {
	for _, e := range t.entries {
		if e.Weight != 0 {
			if _, ok := ready(e.VL); ok {
				return true
			}
		}
	}
	return false
}

// Arbiter chooses the data VL a port transmits from next. VL15 is not its
// business: management packets go before any data packet. The zero Arbiter
// serves nothing; use NewArbiter.
type Arbiter struct {
	high, low table
	limit     uint8
	highSent  int // bytes the high table sent since a low packet last went
}

// NewArbiter returns an arbiter for configuration a. It keeps its own copy
// of the tables.
func NewArbiter(a Arbitration) *Arbiter {
	return &Arbiter{
		high:  table{entries: append([]Entry(nil), a.High...), cur: -1},
		low:   table{entries: append([]Entry(nil), a.Low...), cur: -1},
		limit: a.HighLimit,
	}
}

// Next returns the VL to transmit from and accounts for the packet. ready
// tells, for a data VL, the size in bytes of the packet at the head of its
// queue and whether it may be sent now (there is one, and the receiver
// has credits for it). Next returns false when no VL in either table is
// ready.
//
// The high table goes first, until it has sent HighLimit x 4096 bytes (one
// packet for a limit of 0) while a low-priority packet is ready; then one
// packet goes from the low table and the count starts again. The count
// also starts again whenever the high table has nothing to send.
func (a *Arbiter) Next(ready func(vl uint8) (int, bool)) (uint8, bool) {
	if a.limit != HighLimitUnbounded && a.highSent >= max(int(a.limit)*HighLimitUnit, 1) && a.low.ready(ready) {
		a.highSent = 0
		return a.low.pick(ready)
	}
	if vl, ok := a.high.pick(ready); ok {
		size, _ := ready(vl)
		a.highSent += size
		return vl, true
	}
	a.highSent = 0
	return a.low.pick(ready)
}
