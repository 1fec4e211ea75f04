// Resizing a completion queue (ibv_resize_cq).

package verbs

// Resize changes the number of completions the CQ holds to cqe
// (ibv_resize_cq), keeping the completions it holds, in order. As Linux
// rxe, it fails with ErrInvalid for a depth outside 1..MaxCQE or smaller
// than the number of completions the CQ holds now, and with ErrClosed
// after Destroy. A CQ that overflowed stays in error (its QPs do).
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 || cqe > MaxCQE {
		return errf(ErrInvalid, "CQ depth %d (1..%d)", cqe, MaxCQE)
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return errf(ErrClosed, "CQ destroyed")
	}
	if cqe < cq.n {
		return errf(ErrInvalid, "CQ depth %d below the %d completions it holds", cqe, cq.n)
	}
	ring := make([]WC, cqe)
	for i := range cq.n {
		j := cq.head + i
		if j >= len(cq.ring) {
			j -= len(cq.ring)
		}
		ring[i] = cq.ring[j]
	}
	cq.ring, cq.head = ring, 0
	return nil
}
