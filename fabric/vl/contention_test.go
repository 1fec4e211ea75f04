package vl_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/fabric/vl"
)

// TestWireContention: with a wire rate, three senders keep their lanes
// backlogged while the receiver reads at once; the wire, not credits, is
// the bottleneck, and while every lane has packets waiting the shares are
// the weights' 1:2:4.
func TestWireContention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		arb := vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 1}, {VL: 1, Weight: 2}, {VL: 2, Weight: 4}}}
		l := newLink(t, vl.Config{DataVLs: 3, Credits: 64, QueueLen: 8, Rate: 64e6, Arbitration: &arb, Paused: true})
		const per = 200
		var wg sync.WaitGroup
		for v := range uint8(3) {
			wg.Go(func() {
				for i := range per {
					if err := l.Send(t.Context(), v, packet(i, 64)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		synctest.Wait() // every queue full
		l.Resume()
		order := make([]uint8, 3*per+1)
		next := [3]int{}
		for range 3 * per {
			d, err := l.RecvAny(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if number(d.Data) != next[d.VL] {
				t.Fatalf("VL%d: packet %d, want %d", d.VL, number(d.Data), next[d.VL])
			}
			next[d.VL]++
			order[d.Seq] = d.VL
		}
		wg.Wait()
		// VL2 runs out after 200 of its packets, at about 350 on the wire.
		count := [3]int{}
		for _, v := range order[1 : 7*40+1] {
			count[v]++
		}
		if count != [3]int{40, 80, 160} {
			t.Errorf("first 280 packets on the wire: %v, want [40 80 160]", count)
		}
		if s := l.Stats(); s.SendWaits < 3 {
			t.Errorf("senders waited %d times: the lanes were not backlogged", s.SendWaits)
		}
	})
}

// TestRandomTraffic: four lanes, random sizes, receivers that pause at
// random: per lane every packet arrives once, in order; no receive buffer
// ever held more than its credits; nothing is dropped.
func TestRandomTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lanes, per = 4, 300
		credits := []int{8, 16, 70, 4}
		l := newLink(t, vl.Config{DataVLs: lanes, VLCredits: credits, QueueLen: 3, Rate: 1e9})
		var wg sync.WaitGroup
		for v := range uint8(lanes) {
			rng := rand.New(rand.NewPCG(uint64(v), 1))
			sizes := make([]int, per)
			for i := range sizes {
				sizes[i] = 8 + rng.IntN(credits[v]*vl.CreditSize-8+1)
			}
			wg.Go(func() {
				for i, n := range sizes {
					if err := l.Send(t.Context(), v, packet(i, n)); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				for i, n := range sizes {
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					}
					d, err := l.Recv(t.Context(), v)
					if err != nil {
						t.Error(err)
						return
					}
					if number(d.Data) != i || len(d.Data) != n {
						t.Errorf("VL%d packet %d: number %d, %d bytes (want %d)", v, i, number(d.Data), len(d.Data), n)
						return
					}
				}
			})
		}
		wg.Wait()
		s := l.Stats()
		for v := range lanes {
			if s.Sent[v] != per || s.Received[v] != per || s.Dropped[v] != 0 {
				t.Errorf("VL%d: sent %d received %d dropped %d", v, s.Sent[v], s.Received[v], s.Dropped[v])
			}
			if s.MaxBuffered[v] > credits[v] || s.MaxQueued[v] > 3 {
				t.Errorf("VL%d: buffer high-water %d credits of %d, queue %d of 3", v, s.MaxBuffered[v], credits[v], s.MaxQueued[v])
			}
		}
	})
}
