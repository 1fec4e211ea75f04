package ib

import (
	"testing"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// wirePort hands what it is sent straight to the receiving link's checks,
// on the sender's goroutine: the benchmark measures the framing and the
// checks alone.
type wirePort struct {
	fakePort
	to *fakePort
}

func (p *wirePort) Send(pkts [][]byte) error { p.to.recv(pkts); return nil }

// BenchmarkSendReceive frames transport packets of a 4096-byte payload
// (local, or global with a GRH) on one link and checks and delivers them on
// another: per packet, an LRH, the ICRC and VCRC computed on send and both
// checked on receive.
func BenchmarkSendReceive(b *testing.B) {
	for _, global := range []bool{false, true} {
		name := "local"
		if global {
			name = "global"
		}
		b.Run(name, func(b *testing.B) {
			rx := &fakePort{attr: testAttr()}
			lb, _ := New(rx)
			defer lb.Close()
			delivered := 0
			if err := lb.Start(link.HandlerFunc(func(batch []*link.Packet) { delivered += len(batch) })); err != nil {
				b.Fatal(err)
			}
			la, _ := New(&wirePort{fakePort: fakePort{attr: DefaultAttr(0x50, 1)}, to: rx})
			defer la.Close()
			h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xFFFF, DestQP: 9},
				RETH: wire.RETHFields{DMALen: 4096}}
			p := link.Get()
			defer link.Put(p)
			n, err := wire.Build(p.Buf, &h, make([]byte, 4096))
			if err != nil {
				b.Fatal(err)
			}
			p.N = n
			p.IB = link.IBAddr{DLID: 0x40, Global: global}
			batch := []*link.Packet{p}
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				if err := la.Send(batch); err != nil {
					b.Fatal(err)
				}
			}
			if delivered != b.N {
				b.Fatalf("%d of %d delivered: %+v", delivered, b.N, lb.Stats())
			}
		})
	}
}

// TestNoAllocs: framing a packet, checking it and delivering it allocate
// nothing once the pools are warm.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	rx := &fakePort{attr: testAttr()}
	lb, _ := New(rx)
	defer lb.Close()
	if err := lb.Start(link.HandlerFunc(func([]*link.Packet) {})); err != nil {
		t.Fatal(err)
	}
	la, _ := New(&wirePort{fakePort: fakePort{attr: DefaultAttr(0x50, 1)}, to: rx})
	defer la.Close()
	p := link.Get()
	defer link.Put(p)
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 9}}
	n, err := wire.Build(p.Buf, &h, make([]byte, 1024))
	if err != nil {
		t.Fatal(err)
	}
	p.N, p.IB = n, link.IBAddr{DLID: 0x40}
	batch := []*link.Packet{p}
	if a := testing.AllocsPerRun(1000, func() {
		if err := la.Send(batch); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%v allocations per packet", a)
	}
	if rx, tx := lb.Stats().RxPackets, la.Stats().TxPackets; rx != tx || rx < 1000 {
		t.Errorf("%d packets sent, %d received", tx, rx)
	}
}
