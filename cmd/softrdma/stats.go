package main

import (
	"fmt"
	"io"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/verbs"
)

// runStats is what perf --stats reports of a run: the link's counters and
// the CPU time the process used, both as differences over the run.
type runStats struct {
	link      link.Stats
	user, sys time.Duration
}

// takeStats reads the link's counters and the process's CPU time.
func takeStats(l link.Link) runStats {
	user, sys := cpuTime()
	return runStats{link: l.Stats(), user: user, sys: sys}
}

// report writes the difference between s and an earlier snapshot.
func (s runStats) report(w io.Writer, before runStats) {
	a, b := s.link, before.link
	tx, rx := a.TxPackets-b.TxPackets, a.RxPackets-b.RxPackets
	txc, rxc := a.TxCalls-b.TxCalls, a.RxCalls-b.RxCalls
	fmt.Fprintf(w, " link: sent %d packets in %d calls (%s a call, %d GSO sends), received %d in %d calls (%s a call, %d GRO receives)\n",
		tx, txc, ratio(tx, txc), a.TxGSOBatches-b.TxGSOBatches, rx, rxc, ratio(rx, rxc), a.RxGROBatches-b.RxGROBatches)
	user, sys := s.user-before.user, s.sys-before.sys
	if user+sys == 0 {
		return // no CPU accounting here
	}
	line := fmt.Sprintf(" CPU: %.3f s (user %.3f s, system %.3f s)", (user + sys).Seconds(), user.Seconds(), sys.Seconds())
	if tx+rx > 0 {
		line += fmt.Sprintf(", %.2f us a packet sent or received", float64((user+sys).Microseconds())/float64(tx+rx))
	}
	fmt.Fprintln(w, line)
}

// ratio formats n/d with one decimal, or "-" for d == 0.
func ratio(n, d uint64) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(d))
}

// reportCounters writes the device's counters under Linux rxe's names, as
// `softrdma stat` prints them, since the device opened.
func reportCounters(w io.Writer, d *verbs.Device) {
	line := " counters:"
	for _, c := range d.Counters()[:len(rxeCounters)] {
		line += fmt.Sprintf(" %s %d", c.Name, c.Value)
	}
	fmt.Fprintln(w, line)
}
