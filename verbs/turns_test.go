package verbs

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/loop"
)

// counter returns the device counter named name.
func counter(t *testing.T, d *Device, name string) uint64 {
	t.Helper()
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("no counter %q", name)
	return 0
}

// TestBoundTurns: 128 QPs of a device bounded to 256 packets in flight
// (turns of 8) each WRITE 64 KiB in 1 KiB packets at once, twice. They
// share the bound in turns: each sends a run of packets and asks for one
// acknowledgement for it, so the responder sends an ACK per 4 packets at
// most (before turns, a QP holding one or two packets of the bound sent
// one more asking for an ACK at each refusal, and a QP holding none always
// sent: the bound was overdrawn and every other packet was acknowledged).
// Every message completes, no QP waits for an ACK timeout on a link that
// loses nothing, and the bound is all given back.
func TestBoundTurns(t *testing.T) {
	// A 10 ms latency each way: the QPs posted first still hold the bound
	// when the last are posted, however slow the machine (without it,
	// under the race detector on a loaded machine, each QP had finished
	// before the next was posted, and none waited).
	o := pairOpts{devOpts: &Options{MaxInflight: 256}, mtu: MTU1024, timeout: 19, wr: 4,
		faults: loop.Faults{Delay: 10 * time.Millisecond}}
	n, da, db := newDevicesLoop(t, &o)
	const size, qps = 64 << 10, 128
	type side struct {
		p      *pair
		ma, mb *MR
	}
	sides := make([]side, qps)
	for i := range sides {
		p := &pair{t: t, net: n, da: da, db: db}
		p.connect(o)
		sides[i] = side{p: p, ma: p.reg(p.pa, size), mb: p.reg(p.pb, size)}
	}
	for _, s := range sides {
		for id := range uint64(2) {
			post(t, s.p.qa, SendWR{ID: id, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{s.ma.SGE(0, size)},
				RemoteAddr: s.mb.Addr(), RKey: s.mb.RKey()})
		}
	}
	for _, s := range sides {
		for _, wc := range waitWC(t, s.p.ca, 2, 30*time.Second) {
			checkWC(t, wc, wc.WRID, Success, WCRDMAWrite)
		}
	}
	sent, acks := counter(t, da, "sent_pkts"), counter(t, db, "sent_pkts")
	t.Logf("%d packets, %d ACKs, %d waits", sent, acks, da.Stats().TxBudgetWaits.Load())
	if want := uint64(qps * 2 * size / 1024); sent < want {
		t.Fatalf("%d packets sent, want %d at least", sent, want)
	}
	if acks*4 > sent {
		t.Errorf("%d ACKs for %d packets: more than one per 4", acks, sent)
	}
	if n := da.Stats().TxRetryTimeouts.Load(); n != 0 {
		t.Errorf("%d ACK timeouts on a link that loses nothing", n)
	}
	if w := da.Stats().TxBudgetWaits.Load(); w == 0 {
		t.Error("no QP waited for the bound")
	}
	if a := da.budget.avail.Load(); a != 256 {
		t.Errorf("bound %d after everything completed, want 256 back", a)
	}
}
