package vl_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/softrdma/softrdma/fabric/vl"
)

// BenchmarkLink moves packets through a link with an instantaneous wire,
// one sender and one receiver goroutine, on 1 and 4 data VLs: the cost of
// queueing, arbitration and credit accounting per packet.
func BenchmarkLink(b *testing.B) {
	for _, lanes := range []int{1, 4} {
		b.Run(fmt.Sprintf("%dVL/256B", lanes), func(b *testing.B) {
			l, err := vl.New(vl.Config{DataVLs: lanes, Credits: 64, QueueLen: 32})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pkt := make([]byte, 256)
			n := b.N
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range n {
					if l.Send(ctx, uint8(i%lanes), pkt) != nil {
						return
					}
				}
			}()
			b.SetBytes(256)
			b.ReportAllocs()
			b.ResetTimer()
			for range n {
				if _, err := l.RecvAny(ctx); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}
