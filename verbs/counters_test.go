package verbs

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/wire"
)

// counters returns cs as a map by name.
func counters(cs []Counter) map[string]uint64 {
	m := make(map[string]uint64, len(cs))
	for _, c := range cs {
		m[c.Name] = c.Value
	}
	return m
}

// checkCounters compares the named counters of a QP (and of its device,
// which has no other QP) with want; names not in want must be 0.
func checkCounters(t *testing.T, who string, qp *QP, want map[string]uint64) {
	t.Helper()
	q, d := counters(qp.Counters()), counters(qp.dev.Counters())
	for _, name := range hwCounterNames {
		if name == "link_downed" {
			continue
		}
		if q[name] != want[name] {
			t.Errorf("%s: QP %s = %d, want %d", who, name, q[name], want[name])
		}
		if d[name] != q[name] {
			t.Errorf("%s: device %s = %d, its only QP's %d", who, name, d[name], q[name])
		}
	}
}

// TestCountersNames: a device lists rxe's hardware counters first, by
// rxe's names and in its order, then softrdma's own; a QP the same but
// link_downed.
func TestCountersNames(t *testing.T) {
	p := newPair(t, pairOpts{})
	rxe := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
		"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
		"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs"}
	var names []string
	for _, c := range p.da.Counters() {
		names = append(names, c.Name)
	}
	if len(names) <= len(rxe) || !slices.Equal(names[:len(rxe)], rxe) {
		t.Fatalf("device counters %q, want rxe's %q first", names, rxe)
	}
	for _, want := range []string{"rx_malformed", "tx_retry_timeouts", "link_rx_bad_icrc", "link_tx_gso_batches"} {
		if !slices.Contains(names, want) {
			t.Errorf("device counters lack %s", want)
		}
	}
	names = names[:0]
	for _, c := range p.qa.Counters() {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, slices.DeleteFunc(slices.Clone(rxe), func(s string) bool { return s == "link_downed" })) {
		t.Fatalf("QP counters %q", names)
	}
}

// TestCounters drives each of rxe's counters over the loop link and checks
// both sides' counts, per QP and per device: SEND and receive completions,
// a gap (a request packet dropped once: out_of_seq_request and
// rcvd_seq_err), a lost ACK (completer_retry_err and duplicate_request),
// RNR NAKs to exhaustion, and retries to exhaustion.
func TestCounters(t *testing.T) {
	t.Run("traffic", func(t *testing.T) {
		// The counts below are exact, so no retransmission may come from
		// a timer firing early on a loaded machine: local ACK timeout 15
		// (134 ms) instead of the default 12 (16.8 ms, which a -race run
		// at load 12 overran once: "A sent 9 packets, B received 8"). Only
		// the lost ACK waits for it.
		p := newPair(t, pairOpts{timeout: 15})
		ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
		var dropWrite, dropAck atomic.Int32
		var dropped atomic.Int32
		p.net.SetFaults(loop.Faults{Filter: func(lp *link.Packet) bool {
			pkt, err := wire.Parse(lp.Data())
			if err != nil {
				return false
			}
			switch {
			case pkt.Opcode() == wire.RCWriteMiddle && dropWrite.CompareAndSwap(1, 0),
				pkt.Opcode() == wire.RCAcknowledge && dropAck.CompareAndSwap(1, 0):
				dropped.Add(1)
				return true
			}
			return false
		}})
		// A SEND into a posted receive.
		postRecv(t, p.qb, RecvWR{ID: 1, SGL: []SGE{mb.SGE(0, 64)}})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
		waitWC(t, p.ca, 1, waitFor)
		waitWC(t, p.cb, 1, waitFor)
		// A 3-packet WRITE whose middle packet is lost once: the last
		// shows the gap, B NAKs it, A resends from the middle.
		dropWrite.Store(1)
		post(t, p.qa, SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 3000)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		waitWC(t, p.ca, 1, waitFor)
		// A WRITE whose ACK is lost: A times out and resends, B sees a
		// duplicate and acknowledges it again.
		dropAck.Store(1)
		post(t, p.qa, SendWR{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		waitWC(t, p.ca, 1, waitFor)
		if dropped.Load() != 2 {
			t.Fatalf("%d packets dropped, want 2", dropped.Load())
		}
		qa, qb := counters(p.qa.Counters()), counters(p.qb.Counters())
		// Sent: SEND 1 + WRITE 3 + resent 2 + WRITE 1 + resent 1 = 8; B
		// received all but the dropped middle. B sent: ACK of the SEND,
		// the NAK, the WRITE's ACK, the lost ACK and its repeat = 5 at
		// least (ACKs are coalesced, so no more than that either).
		if qa["sent_pkts"] != 8 || qb["rcvd_pkts"] != 7 {
			t.Errorf("A sent %d packets, B received %d: want 8 and 7", qa["sent_pkts"], qb["rcvd_pkts"])
		}
		if qb["sent_pkts"] != qa["rcvd_pkts"]+1 || qb["sent_pkts"] < 4 {
			t.Errorf("B sent %d packets, A received %d (one ACK dropped)", qb["sent_pkts"], qa["rcvd_pkts"])
		}
		checkCounters(t, "A", p.qa, map[string]uint64{"sent_pkts": qa["sent_pkts"], "rcvd_pkts": qa["rcvd_pkts"],
			"rcvd_seq_err": 1, "completer_retry_err": 1, "rdma_sends": 1})
		checkCounters(t, "B", p.qb, map[string]uint64{"sent_pkts": qb["sent_pkts"], "rcvd_pkts": qb["rcvd_pkts"],
			"out_of_seq_request": 1, "duplicate_request": 1, "rdma_recvs": 1})
	})
	t.Run("rnr", func(t *testing.T) {
		// rnr_retry 1: the SEND finds no receive twice.
		p := newPair(t, pairOpts{rnr: 1})
		ma := p.reg(p.pa, 4096)
		post(t, p.qa, SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
		if wc := waitWC(t, p.ca, 1, waitFor); wc[0].Status != RNRRetryExcErr {
			t.Fatalf("completion %v, want RNR_RETRY_EXC_ERR", wc[0].Status)
		}
		checkCounters(t, "A", p.qa, map[string]uint64{"sent_pkts": 2, "rcvd_pkts": 2, "rcvd_rnr_err": 2, "retry_rnr_exceeded_err": 1})
		checkCounters(t, "B", p.qb, map[string]uint64{"sent_pkts": 2, "rcvd_pkts": 2, "send_rnr_err": 2})
	})
	t.Run("retry", func(t *testing.T) {
		// retry_cnt 1: every packet A sends is lost; the first timeout
		// resends, the second fails the WRITE.
		p := newPair(t, pairOpts{retry: 1, timeout: 8})
		ma, mb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
		p.net.SetFaults(loop.Faults{Filter: func(*link.Packet) bool { return true }})
		post(t, p.qa, SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)},
			RemoteAddr: mb.Addr(), RKey: mb.RKey()})
		if wc := waitWC(t, p.ca, 1, waitFor); wc[0].Status != RetryExcErr {
			t.Fatalf("completion %v, want RETRY_EXC_ERR", wc[0].Status)
		}
		checkCounters(t, "A", p.qa, map[string]uint64{"sent_pkts": 2, "completer_retry_err": 1, "retry_exceeded_err": 1})
		checkCounters(t, "B", p.qb, nil)
	})
}
