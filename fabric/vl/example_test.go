package vl_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/softrdma/softrdma/fabric/vl"
)

// Two data VLs share the wire 1:3 by weight; a management packet on VL15
// goes first. The link starts paused so that every lane has a backlog when
// the transmitter starts.
func Example() {
	arb := vl.Arbitration{Low: []vl.Entry{{VL: 0, Weight: 1}, {VL: 1, Weight: 3}}}
	l, err := vl.New(vl.Config{DataVLs: 2, Credits: 32, Arbitration: &arb, Paused: true})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()

	sl := uint8(5)
	v, _ := l.VLOf(sl) // the default SL2VL maps SL5 to VL1 on two data VLs
	fmt.Printf("SL%d travels on VL%d\n", sl, v)

	// Weights count 64-byte units: packets of 64 bytes make the shares
	// easy to see.
	pkt := func(s string) []byte { return append([]byte(s), make([]byte, 64-len(s))...) }
	for i := range 4 {
		l.Send(ctx, 0, pkt(fmt.Sprintf("a%d", i)))
		l.Send(ctx, 1, pkt(fmt.Sprintf("b%d", i)))
	}
	l.Send(ctx, vl.VL15, pkt("smp"))
	l.Resume()

	var got []vl.Delivery
	for range 9 {
		d, err := l.RecvAny(ctx)
		if err != nil {
			panic(err)
		}
		got = append(got, d)
	}
	slices.SortFunc(got, func(a, b vl.Delivery) int { return int(a.Seq) - int(b.Seq) })
	for _, d := range got {
		fmt.Printf("%d VL%d %s\n", d.Seq, d.VL, bytes.TrimRight(d.Data, "\x00"))
	}
	// Output:
	// SL5 travels on VL1
	// 1 VL15 smp
	// 2 VL0 a0
	// 3 VL1 b0
	// 4 VL1 b1
	// 5 VL1 b2
	// 6 VL0 a1
	// 7 VL1 b3
	// 8 VL0 a2
	// 9 VL0 a3
}
