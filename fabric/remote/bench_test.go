package remote

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/ib"
)

// benchPair returns Hca1's and Hca2's ports (remote over network, or the
// fabric's own with network "inproc"), ACTIVE, and their LIDs.
func benchPair(b *testing.B, network string) (pa, pb ib.Port, lidA, lidB uint16) {
	cfg := Config{Network: network}
	if network == "unix" {
		cfg.Addr = b.TempDir() + "/fabric.sock"
	}
	if network == "inproc" {
		cfg.Network = "tcp"
	}
	s := serve(b, cfg)
	var ports [2]ib.Port
	for i, name := range []string{"Hca1", "Hca2"} {
		var p ib.Port
		var err error
		if network == "inproc" {
			p, err = s.f.ConnectHCA(s.f.NodeByName(name), 1)
		} else {
			p, err = (&Dialer{Logger: quiet}).Dial(context.Background(), s.addr, name, 1)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		ports[i] = p
	}
	sm := newSM(b, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA = lidOf(b, s.f, sn, "Hca1")
	lidB = lidOf(b, s.f, sn, "Hca2")
	waitFor(b, "both ACTIVE", func() bool {
		return ports[0].Attr().State == ib.StateActive && ports[1].Attr().State == ib.StateActive
	})
	return ports[0], ports[1], lidA, lidB
}

var benchNetworks = []string{"inproc", "tcp", "unix"}

// BenchmarkRemoteStream: packets/s from Hca1 to Hca2 (two switches between
// them), 256-byte payloads, sent in batches of 32 through the remote
// ports ("inproc": the fabric's own ports, for comparison).
func BenchmarkRemoteStream(b *testing.B) {
	for _, network := range benchNetworks {
		b.Run(network, func(b *testing.B) {
			pa, pb, lidA, lidB := benchPair(b, network)
			got := make(chan int, 1024)
			if err := pb.Start(func(pkts [][]byte) { got <- len(pkts) }); err != nil {
				b.Fatal(err)
			}
			if err := pa.Start(func([][]byte) {}); err != nil {
				b.Fatal(err)
			}
			batch := make([][]byte, 32)
			for i := range batch {
				batch[i] = ibPacket(b, lidA, lidB, uint32(i), 256)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				n := 0
				timeout := time.After(60 * time.Second)
				for n < b.N {
					select {
					case k := <-got:
						n += k
					case <-timeout:
						return
					}
				}
			}()
			b.ResetTimer()
			for sent := 0; sent < b.N; sent += len(batch) {
				k := min(len(batch), b.N-sent)
				if err := pa.Send(batch[:k]); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
			b.SetBytes(int64(len(batch[0])))
		})
	}
}

// BenchmarkRemotePingPong: one packet from Hca1 to Hca2 and back (Hca2's
// receive function echoes it with the LIDs swapped): ns/op is the round
// trip; one-way-µs is half of it.
func BenchmarkRemotePingPong(b *testing.B) {
	for _, network := range benchNetworks {
		b.Run(network, func(b *testing.B) {
			pa, pb, lidA, lidB := benchPair(b, network)
			if err := pb.Start(func(pkts [][]byte) {
				for _, p := range pkts {
					swapLIDs(p)
				}
				pb.Send(pkts)
			}); err != nil {
				b.Fatal(err)
			}
			back := make(chan struct{}, 1)
			if err := pa.Start(func(pkts [][]byte) {
				for range pkts {
					back <- struct{}{}
				}
			}); err != nil {
				b.Fatal(err)
			}
			pkt := ibPacket(b, lidA, lidB, 1, 64)
			b.ResetTimer()
			for range b.N {
				if err := pa.Send([][]byte{pkt}); err != nil {
					b.Fatal(err)
				}
				select {
				case <-back:
				case <-time.After(10 * time.Second):
					b.Fatal("no echo")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "one-way-µs")
		})
	}
}
