// Package perftestrace runs a pair of perftest programs with -R (rdma_cm)
// again when Debian's perftest (4.5-0.17) client loses the race with its
// server's listen. It serves the tests that run perftest against the C
// library (capi/ibverbs, -tags capi) and against Linux rxe (interop, -tags
// interop), and has no code of the stack.
//
// The race: perftest connects its test QP right after the handshake over
// its first connection, while the server may still be creating the
// listening ID for it. The server's CM then rejects the REQ with reason 8
// (no listener), and the client prints RDMA_CM_EVENT_REJECTED with that
// reason. perftest's own retry (rdma_cm_client_connection) reuses the IDs,
// nodes and address information it has just destroyed and freed in that
// version (later versions allocate them again), so the client dies on a
// signal instead of retrying, and the server is left waiting. The only
// remedy from outside is to run both sides again.
package perftestrace

import (
	"strings"
	"testing"
)

// rejected is what perftest's client prints when the server's CM rejected
// its REQ because nothing listened on the port (IBTA reason 8).
const rejected = "RDMA_CM_EVENT_REJECTED; error: 8"

// Lost reports whether a perftest client's output (its standard error, or
// both streams) shows that it lost the race with its server's listen.
func Lost(clientOutput string) bool {
	return strings.Contains(clientOutput, rejected)
}

// Rerun calls pair, which runs a server and its client once and returns
// the client's output and the pair's error, until it succeeds, fails
// otherwise than by the client losing the race (see Lost), or has run
// runs times. Each lost run that is followed by another is logged to tb.
// Rerun returns the last run's error.
func Rerun(tb testing.TB, runs int, pair func() (clientOutput string, err error)) error {
	tb.Helper()
	for run := 1; ; run++ {
		out, err := pair()
		if err == nil || !Lost(out) || run >= runs {
			return err
		}
		tb.Logf("run %d: the server rejected the test QP's REQ (no listener yet: perftest's handshake race); running the pair again", run)
	}
}
