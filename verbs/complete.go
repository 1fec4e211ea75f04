// The completer's shell: responses and timers go to the QP's requester
// core (internal/requester), which decides what they complete and what is
// sent again.

package verbs

import (
	"time"

	"github.com/softrdma/softrdma/verbs/internal/requester"
	"github.com/softrdma/softrdma/wire"
)

// handleResponseLocked processes a response packet at the requester,
// received at now.
func (qp *QP) handleResponseLocked(pkt wire.Packet, now int64) {
	if qp.state == StateErr {
		return
	}
	g, psn := qp.gate(), pkt.BTH().PSN()
	switch pkt.Opcode() {
	case wire.RCAcknowledge:
		syn := pkt.AETH().Syndrome()
		switch {
		case syn.IsRNR():
			qp.count(cntRcvdRNR, 1)
		case syn.IsNAK() && syn.NAKCode() == wire.NAKPSNSequence:
			qp.count(cntRcvdSeqErr, 1)
		}
		qp.req.Ack(now, g, syn, psn)
	case wire.RCAtomicAcknowledge:
		qp.req.AtomicAck(now, g, psn, pkt.AtomicAckETH().Orig())
	default:
		qp.req.ReadResponse(now, g, psn, pkt.Payload(), pkt.Info().Is(wire.FlagComplete))
	}
}

// ArmRetry arms the retransmit timer to fire in nanoseconds from now
// (requester.Sink). The timer is re-armed lazily: one set to fire before
// the deadline stays, and the core asks again when it fires.
func (s *reqSink) ArmRetry(at, in int64) {
	qp := (*QP)(s)
	if qp.retryT != nil {
		if qp.retryAt <= at {
			return
		}
		qp.retryT.Stop()
	}
	qp.retryAt = at
	qp.retryT = time.AfterFunc(time.Duration(in), qp.onRetryTimer)
}

// WaitRNR arms the RNR timer (requester.Sink).
func (s *reqSink) WaitRNR(d int64) {
	qp := (*QP)(s)
	if qp.rnrT != nil {
		qp.rnrT.Stop()
	}
	qp.rnrT = time.AfterFunc(time.Duration(d), qp.onRNRTimer)
}

// WaitBudget waits for room in the device's in-flight bound
// (requester.Sink).
func (s *reqSink) WaitBudget() {
	qp := (*QP)(s)
	qp.dev.budget.waitFor(qp)
}

func (qp *QP) onRetryTimer() {
	qp.mu.Lock()
	defer qp.unlockSend()
	qp.retryT = nil
	if qp.dead {
		return
	}
	qp.req.Timer(qp.now(), qp.gate())
}

func (qp *QP) onRNRTimer() {
	qp.mu.Lock()
	defer qp.unlockSend()
	qp.rnrT = nil
	if qp.dead {
		return
	}
	qp.req.RNRTimer(qp.now(), qp.gate())
}

// reqConfig is what the requester core follows of the QP's attributes.
func (qp *QP) reqConfig() requester.Config {
	t := requester.RC
	switch qp.typ {
	case UC:
		t = requester.UC
	case UD:
		t = requester.UD
	}
	c := requester.Config{Transport: t, MTU: qp.mtu, MaxRdAtomic: int(qp.attr.MaxRdAtomic),
		RetryCnt: int(qp.attr.RetryCnt), RNRRetry: int(qp.attr.RNRRetry),
		ACKTimeout: int64(wire.ACKTimeout(qp.attr.Timeout))}
	if qp.dev.budget != nil && t == requester.RC {
		qp.budgetH = qpBudget{txBudget: qp.dev.budget, qp: qp}
		c.Budget = &qp.budgetH // not a nil *txBudget in the interface
	}
	return c
}
