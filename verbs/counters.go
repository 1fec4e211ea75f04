package verbs

import (
	"slices"
	"sync/atomic"
)

// Counter is a named count kept by a device or a QP.
type Counter struct {
	Name  string
	Value uint64
}

// hwCounter indexes the counters a device and each of its QPs keep under
// Linux rxe's names for its hardware counters (rdma statistic show), in
// rxe's order.
type hwCounter int

const (
	// cntSentPkts: packets the device or QP sent (requests, responses and
	// acknowledgements).
	cntSentPkts hwCounter = iota
	// cntRcvdPkts: packets received and taken by a QP, past the checks of
	// its state, transport and P_Key.
	cntRcvdPkts
	// cntDupReq: request packets the responder saw again (PSN before the
	// one expected).
	cntDupReq
	// cntOutOfSeqReq: request packets past the PSN the responder expected
	// (a gap: NAKed once with a PSN sequence error).
	cntOutOfSeqReq
	// cntRcvdRNR: RNR NAKs the requester received.
	cntRcvdRNR
	// cntSendRNR: RNR NAKs the responder sent.
	cntSendRNR
	// cntRcvdSeqErr: PSN sequence error NAKs the requester received.
	cntRcvdSeqErr
	// ack_deferred: responses the completer queued to handle later
	// (rxe's completer task). softrdma's requester handles every
	// response as it arrives, so this stays 0; it is listed so that
	// tools reading rxe's set find it.
	_
	// cntRetryExceeded: send work requests completed with RETRY_EXC_ERR.
	cntRetryExceeded
	// cntRNRRetryExceeded: send work requests completed with
	// RNR_RETRY_EXC_ERR.
	cntRNRRetryExceeded
	// cntCompRetry: ACK timeouts: the requester sent the oldest
	// unacknowledged packets again, using one of its retry_cnt.
	cntCompRetry
	// cntSendErr: packets the link failed to send.
	cntSendErr
	// cntLinkDowned: the times the port went down (device only).
	cntLinkDowned
	// cntRDMASends: SEND work requests (with immediate or invalidate too)
	// completed successfully.
	cntRDMASends
	// cntRDMARecvs: receive work requests completed successfully (a SEND,
	// or a WRITE with immediate data, received).
	cntRDMARecvs
	numHWCounters
)

var hwCounterNames = [numHWCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
	"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "link_downed", "rdma_sends", "rdma_recvs",
}

// RxeCounterNames returns the names of the counters Device.Counters lists
// first: Linux rxe's hardware counters, in rxe's order.
func RxeCounterNames() []string { return slices.Clone(hwCounterNames[:]) }

// hwCounters is a set of counters under rxe's names.
type hwCounters [numHWCounters]atomic.Uint64

// count adds n to counter c of qp and of its device.
func (qp *QP) count(c hwCounter, n uint64) {
	qp.cnt[c].Add(n)
	qp.dev.cnt[c].Add(n)
}

// Counters returns the device's counters: first those of Linux rxe's
// hardware counters (the names `rdma statistic show link DEV/1` prints for
// an rxe device, in its order, counting the same events), then softrdma's
// own: DeviceStats under snake_case names and the link's packet, drop and
// batching counts (link.Stats, "link_" and the field's name).
func (d *Device) Counters() []Counter {
	cs := make([]Counter, 0, int(numHWCounters)+32)
	for i := range numHWCounters {
		cs = append(cs, Counter{hwCounterNames[i], d.cnt[i].Load()})
	}
	s := &d.stats
	for _, c := range []struct {
		name string
		v    *atomic.Uint64
	}{
		{"rx_malformed", &s.RxMalformed}, {"rx_unknown_qp", &s.RxUnknownQP},
		{"rx_bad_state", &s.RxBadState}, {"rx_bad_transport", &s.RxBadTransport},
		{"rx_pkey_drop", &s.RxPKeyDrop}, {"rx_qkey_drop", &s.RxQKeyDrop},
		{"rx_duplicate", &s.RxDuplicate}, {"rx_out_of_seq", &s.RxOutOfSeq},
		{"rx_duplicate_dropped", &s.RxDuplicateDropped}, {"rx_resp_queue_full", &s.RxRespQueueFull},
		{"tx_deferred", &s.TxDeferred}, {"tx_from_mr", &s.TxFromMR}, {"tx_budget_waits", &s.TxBudgetWaits},
		{"tx_retry_timeouts", &s.TxRetryTimeouts},
	} {
		cs = append(cs, Counter{c.name, c.v.Load()})
	}
	l := d.link.Stats()
	for _, c := range []struct {
		name string
		v    uint64
	}{
		{"link_tx_packets", l.TxPackets}, {"link_tx_bytes", l.TxBytes},
		{"link_rx_packets", l.RxPackets}, {"link_rx_bytes", l.RxBytes},
		{"link_tx_errors", l.TxErrors}, {"link_rx_bad_icrc", l.RxBadICRC},
		{"link_rx_malformed", l.RxMalformed}, {"link_rx_icrc_unchecked", l.RxICRCUnchecked},
		{"link_rx_icrc_any_id", l.RxICRCAnyID}, {"link_dropped", l.Dropped},
		{"link_tx_source_port_fallback", l.TxSourcePortFallback},
		{"link_tx_id_mismatch", l.TxIDMismatch},
		{"link_tx_gso_batches", l.TxGSOBatches}, {"link_rx_gro_batches", l.RxGROBatches},
		{"link_tx_calls", l.TxCalls}, {"link_rx_calls", l.RxCalls},
	} {
		cs = append(cs, Counter{c.name, c.v})
	}
	return cs
}

// Counters returns the QP's counters under Linux rxe's names, as Device.Counters
// lists them but link_downed (a port's), counting this QP's events only
// (what `rdma statistic show qp` prints for a counter bound to one QP).
func (qp *QP) Counters() []Counter {
	cs := make([]Counter, 0, numHWCounters-1)
	for i := range numHWCounters {
		if i != cntLinkDowned {
			cs = append(cs, Counter{hwCounterNames[i], qp.cnt[i].Load()})
		}
	}
	return cs
}
