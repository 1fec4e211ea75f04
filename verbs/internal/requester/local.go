package requester

// startLocal executes a Local work request when the requester reaches it,
// as rxe's rxe_do_local_ops: in posting order, after every request before
// it has been sent (a fence also waits for the READs and atomics before it,
// in start), taking no PSN. It completes at once and retires in order with
// the requests before it. A failure fails the QP like a failed Transmit.
func (c *Core) startLocal(seq uint64, w *wqe) bool {
	// No PSN: the requests after it start where it would have; loops over
	// the queue (ackedTo) see a done request at the next PSN.
	w.firstPSN, w.lastPSN, w.npkts = c.next, c.next, 0
	if st := c.sink.Local(seq); st != Success {
		c.fail(w, st)
		return true
	}
	c.complete(w, Success)
	return true
}
