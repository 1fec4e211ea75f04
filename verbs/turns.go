// Turns in the device's in-flight bound (txBudget): when many QPs share it,
// each sends a run of packets in its turn.
//
// With a QP's every packet taken from the bound one at a time, 1,000 QPs
// streaming into a bound of 1,024 packets each held a packet or two: a QP
// refused with nothing of its own acknowledgement coming sent one packet
// more asking for one, and a QP holding none always sent. The bound was
// always overdrawn and the responder acknowledged every other packet, each
// ACK a system call of its own on either side. A requester now reserves a
// turn's worth of packets (grant) at a time; a QP refused waits in line,
// and room given back wakes the oldest waiter only once there is a turn's
// worth, set aside for it (QP.budgetGrant) so that the QPs whose
// acknowledgements gave it cannot take it back first. The packet that ends
// a turn while others wait asks for an acknowledgement.

package verbs

// grantFor is the turn of a bound of n packets: a 32nd of it, 1 to 32
// packets (a bound of 1,024 lets 32 QPs send at once, a turn each).
func grantFor(n int) int {
	return min(max(n/32, 1), 32)
}

// wakeTurns wakes the oldest waiters, a turn's room set aside for each
// while there is room, and returns how many it woke. The caller holds b.mu.
func (b *txBudget) wakeTurns() int {
	g := int64(b.grant)
	k := 0
	for k < len(b.wait) {
		a := b.avail.Load()
		if a < g {
			break
		}
		if !b.avail.CompareAndSwap(a, a-g) {
			continue
		}
		qp := b.wait[k]
		qp.budgetGrant.Add(int32(g))
		b.dev.pacer.add(qp)
		k++
	}
	return k
}

// take reserves n packets of the shared room, and up to want if there is
// room: a QP that is not waiting takes less than a turn only when nobody
// waits. It returns how many it reserved, or 0.
func (b *txBudget) take(n, want int) int {
	for {
		a := b.avail.Load()
		t := int64(want)
		if a < t {
			if a < int64(n) || b.nwait.Load() > 0 {
				return 0
			}
			t = a
		}
		// Compare-and-swap, not subtract-and-undo: between the two, a
		// Give would see the room it returned as taken and wake nobody,
		// and the waiters would stay listed with the room free.
		if b.avail.CompareAndSwap(a, a-t) {
			return int(t)
		}
	}
}

// Grant returns a turn (requester.Budget).
func (b *txBudget) Grant() int { return b.grant }

// Waiting reports whether QPs wait for room (requester.Budget).
func (b *txBudget) Waiting() bool { return b.nwait.Load() > 0 }

// qpBudget is a QP's handle on its device's bound: the requester's
// requester.Budget, taking first the turn set aside for the QP.
type qpBudget struct {
	*txBudget
	qp *QP
}

// Take reserves n packets, up to want, the QP's turn first
// (requester.Budget).
func (h *qpBudget) Take(n, want int, force bool) int {
	g := int(h.qp.budgetGrant.Swap(0))
	if g >= n {
		return g
	}
	if force {
		h.avail.Add(int64(g - n))
		return n
	}
	got := h.take(n-g, max(want-g, n-g))
	if got == 0 {
		if g > 0 {
			h.Give(g)
		}
		return 0
	}
	return g + got
}
