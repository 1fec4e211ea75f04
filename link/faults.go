// The fault model shared by link/loop (an in-process wire) and link/fault
// (a wrapper around any link, link/udp included): what can happen to a
// packet, and the seeded draws that decide it.

package link

import (
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultReorderTimeout is how long a reordered packet waits for a later
// packet to overtake it when Faults.ReorderTimeout is zero.
const DefaultReorderTimeout = 2 * time.Millisecond

// Faults describes what a faulty network does to packets. The zero value is
// a perfect network. Probabilities are in 0..1 (below 0 means never, above 1
// always) and are drawn independently for each packet sent.
type Faults struct {
	// Loss is the probability that a packet is dropped.
	Loss float64
	// Duplicate is the probability that a packet is delivered twice.
	Duplicate float64
	// Reorder is the probability that a packet is held back and delivered
	// after the next packet (to the same destination link on link/loop,
	// through the same wrapper on link/fault), or after ReorderTimeout if
	// none comes. While one packet is held, others are not.
	Reorder float64
	// Corrupt is the probability that one random bit of a packet is flipped
	// after its ICRC is sealed. BTH byte 4 (FECN/BECN), which the ICRC
	// masks, is never chosen, so the receiver's ICRC check catches every
	// corruption.
	Corrupt float64
	// Delay is a fixed extra latency added to every packet, and Jitter the
	// bound of a uniformly random extra latency in [0, Jitter). Senders
	// never block on it. Jitter reorders packets as a real network would.
	Delay, Jitter time.Duration
	// ReorderTimeout bounds how long a reordered packet is held
	// (DefaultReorderTimeout if zero).
	ReorderTimeout time.Duration
	// Filter, if set, sees every packet before the other faults apply.
	// Returning true drops the packet. Filter may modify the packet (to
	// truncate or corrupt it); it must not keep it. It is called from the
	// sender's goroutine, possibly concurrently, without locks held. What
	// it sees is the link's to document (link/loop: the sealed copy with
	// Src and Dst set; link/fault: the packet as the caller sent it).
	Filter func(p *Packet) (drop bool)
}

// Active reports whether f does anything to packets.
func (f *Faults) Active() bool {
	return f.Loss > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Corrupt > 0 ||
		f.Delay > 0 || f.Jitter > 0 || f.Filter != nil
}

// Verdict is the fate drawn for one packet.
type Verdict struct {
	Lose, Dup, Hold bool
	// Flip is the bit to flip (bit i is byte i/8, mask 1<<(i%8)), or -1.
	Flip int
	// Delay is the extra latency; HoldFor bounds the hold if Hold is set.
	Delay, HoldFor time.Duration
}

// Dice draws Verdicts from a Faults configuration and a PCG generator
// seeded once, so a single sender sees the same faults on every run. It is
// safe for concurrent use; the zero Dice is not usable (NewDice).
type Dice struct {
	mu     sync.Mutex // guards faults and rng
	faults Faults
	rng    *rand.Rand
}

// NewDice returns dice drawing f's faults from a generator seeded by seed.
func NewDice(f Faults, seed uint64) *Dice {
	return &Dice{faults: f, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Set replaces the faults; later draws see the new ones.
func (d *Dice) Set(f Faults) {
	d.mu.Lock()
	d.faults = f
	d.mu.Unlock()
}

// Faults returns the current faults.
func (d *Dice) Faults() Faults {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.faults
}

// Roll draws the faults for a packet of size bytes and returns them with
// the Filter to apply. The generator is consulted only for the faults that
// are enabled, in a fixed order (loss, corruption, duplication, reordering,
// jitter), so a given configuration and send sequence always yield the same
// verdicts.
func (d *Dice) Roll(size int) (Verdict, func(*Packet) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := &d.faults
	v := Verdict{Flip: -1}
	if f.Loss > 0 && d.rng.Float64() < f.Loss {
		v.Lose = true
		return v, f.Filter
	}
	if f.Corrupt > 0 && d.rng.Float64() < f.Corrupt && size > 0 {
		v.Flip = CorruptBit(d.rng, size)
	}
	if f.Duplicate > 0 && d.rng.Float64() < f.Duplicate {
		v.Dup = true
	}
	if f.Reorder > 0 && d.rng.Float64() < f.Reorder {
		v.Hold = true
		v.HoldFor = f.ReorderTimeout
		if v.HoldFor <= 0 {
			v.HoldFor = DefaultReorderTimeout
		}
	}
	if f.Delay > 0 {
		v.Delay = f.Delay
	}
	if f.Jitter > 0 {
		v.Delay += time.Duration(d.rng.Int64N(int64(f.Jitter)))
	}
	return v, f.Filter
}

// CorruptBit picks a bit of a size-byte packet from r, skipping BTH byte 4
// (masked by the ICRC) when the packet has one.
func CorruptBit(r *rand.Rand, size int) int {
	if size <= 4 {
		return r.IntN(size * 8)
	}
	b := r.IntN((size - 1) * 8)
	if b >= 4*8 {
		b += 8
	}
	return b
}

// SealHooker is a link that lets a wrapper see each outgoing packet after
// the link sealed its ICRC and before it leaves: link/fault corrupts
// packets there, where the receiver's ICRC check sees the damage.
type SealHooker interface {
	// SetSealHook makes the link call f (nil: nothing) with the bytes of
	// each packet it sends, BTH through ICRC, right after sealing them, on
	// the goroutine calling Send and before Send returns. f may change the
	// bytes; it must not keep them.
	SetSealHook(f func(b []byte))
}
