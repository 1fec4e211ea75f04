package vl_test

import (
	"testing"

	"github.com/softrdma/softrdma/fabric/vl"
)

// backlog is a set of lanes that always have a packet of the given size
// ready, unless blocked.
type backlog struct {
	size    map[uint8]int
	blocked map[uint8]bool
}

func (b *backlog) ready(v uint8) (int, bool) {
	s, ok := b.size[v]
	return s, ok && !b.blocked[v]
}

// run makes n picks and returns how many packets and bytes each VL got and
// the sequence of VLs.
func run(a *vl.Arbiter, b *backlog, n int) (pkts, bytes map[uint8]int, seq []uint8) {
	pkts, bytes = map[uint8]int{}, map[uint8]int{}
	for range n {
		v, ok := a.Next(b.ready)
		if !ok {
			break
		}
		pkts[v]++
		bytes[v] += b.size[v]
		seq = append(seq, v)
	}
	return pkts, bytes, seq
}

// TestArbiterWeights: with every lane backlogged, bytes go in the ratio of
// the weights, whatever the packet sizes.
func TestArbiterWeights(t *testing.T) {
	a := vl.NewArbiter(vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 1}, {VL: 1, Weight: 2}, {VL: 2, Weight: 4}}})
	pkts, _, seq := run(a, &backlog{size: map[uint8]int{0: 64, 1: 64, 2: 64}}, 700)
	if pkts[0] != 100 || pkts[1] != 200 || pkts[2] != 400 {
		t.Errorf("weights 1:2:4 with 64-byte packets: %v", pkts)
	}
	if want := []uint8{0, 1, 1, 2, 2, 2, 2, 0}; string(seq[:8]) != string(want) {
		t.Errorf("order %v, want %v", seq[:8], want)
	}

	// Weights in 64-byte units against 256-byte and 64-byte packets:
	// VL0 (weight 16 = 1 KiB) and VL1 (weight 48 = 3 KiB) share 1:3 in bytes.
	a = vl.NewArbiter(vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 16}, {VL: 1, Weight: 48}}})
	_, bytes, _ := run(a, &backlog{size: map[uint8]int{0: 256, 1: 64}}, 4*(4+48)*10)
	if bytes[1] != 3*bytes[0] {
		t.Errorf("weights 16:48: bytes %v, want 1:3", bytes)
	}

	// A packet larger than the weight left still goes whole; the entry's
	// turn then ends (weight 1 = 64 bytes, 1000-byte packets alternate).
	a = vl.NewArbiter(vl.Arbitration{Low: []vl.Entry{{VL: 3, Weight: 1}, {VL: 4, Weight: 1}}})
	if _, _, seq := run(a, &backlog{size: map[uint8]int{3: 1000, 4: 1000}}, 6); string(seq) != string([]uint8{3, 4, 3, 4, 3, 4}) {
		t.Errorf("overrunning packets: %v", seq)
	}
}

// TestArbiterSkips: a lane without a packet or credits gives its turn to
// the next; entries of weight 0 and lanes in no table are never served.
func TestArbiterSkips(t *testing.T) {
	a := vl.NewArbiter(vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 2}, {VL: 1, Weight: 0}, {VL: 2, Weight: 2}}})
	b := &backlog{size: map[uint8]int{0: 64, 1: 64, 2: 64, 5: 64}, blocked: map[uint8]bool{0: true}}
	pkts, _, _ := run(a, b, 50)
	if pkts[2] != 50 || pkts[0]+pkts[1]+pkts[5] != 0 {
		t.Errorf("VL0 blocked, VL1 weight 0, VL5 in no table: %v", pkts)
	}
	b.blocked[0] = false
	pkts, _, _ = run(a, b, 40)
	if pkts[0] != 20 || pkts[2] != 20 {
		t.Errorf("VL0 unblocked: %v", pkts)
	}
	if _, ok := a.Next((&backlog{}).ready); ok {
		t.Error("Next picked a VL with nothing ready")
	}
	// On a link of two data VLs, entries for VL5 and VL15 stay idle.
	l := newLink(t, vl.Config{DataVLs: 2, Paused: true, QueueLen: 8,
		Arbitration: &vl.Arbitration{Low: []vl.Entry{{VL: 5, Weight: 9}, {VL: 15, Weight: 9}, {VL: 1, Weight: 1}}}})
	for i := range 3 {
		for v := range uint8(2) {
			if err := l.Send(t.Context(), v, packet(i, 64)); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Resume()
	for i := range 3 {
		if d, err := l.Recv(t.Context(), 1); err != nil || number(d.Data) != i {
			t.Fatalf("VL1 packet %d: %v", i, err)
		}
	}
	if s := l.Stats(); s.Sent[0] != 0 || s.Sent[1] != 3 {
		t.Errorf("VL0 in no table sent %d, VL1 %d", s.Sent[0], s.Sent[1])
	}
	if _, ok := vl.NewArbiter(vl.Arbitration{}).Next(b.ready); ok {
		t.Error("empty tables picked a VL")
	}
}

// TestArbiterHighLimit: the high table goes first, but a waiting
// low-priority packet gets the wire after HighLimit x 4 KiB of high traffic.
func TestArbiterHighLimit(t *testing.T) {
	b := &backlog{size: map[uint8]int{0: 256, 1: 256}}
	high := []vl.Entry{{VL: 0, Weight: 255}}
	low := []vl.Entry{{VL: 1, Weight: 255}}
	for _, c := range []struct {
		limit   uint8
		perLow  int // high packets between low ones
		lowPkts int // in 1700 picks
	}{
		{0, 1, 850},                   // one high packet, then a low one
		{1, 16, 100},                  // 4096 bytes = 16 packets of 256
		{2, 32, 1700 / 33},            // 8 KiB
		{vl.HighLimitUnbounded, 0, 0}, // the low table starves
	} {
		a := vl.NewArbiter(vl.Arbitration{High: high, Low: low, HighLimit: c.limit})
		pkts, _, seq := run(a, b, 1700)
		if pkts[1] != c.lowPkts {
			t.Errorf("limit %d: %d low packets in 1700, want %d", c.limit, pkts[1], c.lowPkts)
		}
		if c.perLow > 0 {
			for i, v := range seq {
				if want := uint8(0); (i+1)%(c.perLow+1) == 0 {
					want = 1
					if v != want {
						t.Fatalf("limit %d: pick %d is VL%d, want VL%d", c.limit, i, v, want)
					}
				} else if v != want {
					t.Fatalf("limit %d: pick %d is VL%d, want VL%d", c.limit, i, v, want)
				}
			}
		}
	}
	// With no low packet waiting, the high table goes on past its limit.
	a := vl.NewArbiter(vl.Arbitration{High: high, Low: low, HighLimit: 0})
	if pkts, _, _ := run(a, &backlog{size: map[uint8]int{0: 256}}, 100); pkts[0] != 100 {
		t.Errorf("high alone: %v", pkts)
	}
	// With no high packet, the low table has the wire.
	if pkts, _, _ := run(a, &backlog{size: map[uint8]int{1: 256}}, 100); pkts[1] != 100 {
		t.Errorf("low alone: %v", pkts)
	}
}
