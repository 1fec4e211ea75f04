package verbs

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

func TestRCSmoke(t *testing.T) {
	p := newPair(t, pairOpts{})
	ma, mb := p.reg(p.pa, 1<<20), p.reg(p.pb, 1<<20)
	for i := range ma.Buf() {
		ma.Buf()[i] = byte(i * 7)
	}
	// SEND of 5000 bytes (5 packets at MTU 1024).
	if err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mb.SGE(0, 8192)}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 5000)}}}); err != nil {
		t.Fatal(err)
	}
	wa := waitWC(t, p.ca, 1, 5*time.Second)
	wb := waitWC(t, p.cb, 1, 5*time.Second)
	if wa[0].Status != Success || wb[0].Status != Success || wb[0].ByteLen != 5000 {
		t.Fatalf("send: %+v / %+v", wa[0], wb[0])
	}
	if !bytes.Equal(ma.Buf()[:5000], mb.Buf()[:5000]) {
		t.Fatal("send data differs")
	}
	// WRITE 100000 bytes, then READ it back elsewhere.
	if err := p.qa.PostSend([]SendWR{{ID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 100000)},
		RemoteAddr: mb.Addr() + 200000, RKey: mb.RKey()}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, p.ca, 1, 5*time.Second)
	if !bytes.Equal(ma.Buf()[:100000], mb.Buf()[200000:300000]) {
		t.Fatal("write data differs")
	}
	if err := p.qa.PostSend([]SendWR{{ID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(500000, 100000)},
		RemoteAddr: mb.Addr() + 200000, RKey: mb.RKey()}}); err != nil {
		t.Fatal(err)
	}
	w := waitWC(t, p.ca, 1, 5*time.Second)
	if w[0].Status != Success || w[0].Opcode != WCRDMARead || w[0].ByteLen != 100000 {
		t.Fatalf("read: %+v", w[0])
	}
	if !bytes.Equal(ma.Buf()[:100000], ma.Buf()[500000:600000]) {
		t.Fatal("read data differs")
	}
	// Atomics.
	binary.NativeEndian.PutUint64(mb.Buf()[8:], 41)
	if err := p.qa.PostSend([]SendWR{
		{ID: 5, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{ma.SGE(1000, 8)}, RemoteAddr: mb.Addr() + 8, RKey: mb.RKey(), CompareAdd: 1},
		{ID: 6, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{ma.SGE(1008, 8)}, RemoteAddr: mb.Addr() + 8, RKey: mb.RKey(), CompareAdd: 42, Swap: 7},
	}); err != nil {
		t.Fatal(err)
	}
	ws := waitWC(t, p.ca, 2, 5*time.Second)
	if ws[0].Status != Success || ws[1].Status != Success {
		t.Fatalf("atomics: %+v", ws)
	}
	if got := binary.NativeEndian.Uint64(ma.Buf()[1000:]); got != 41 {
		t.Fatalf("FAA orig %d", got)
	}
	if got := binary.NativeEndian.Uint64(ma.Buf()[1008:]); got != 42 {
		t.Fatalf("CAS orig %d", got)
	}
	if got := binary.NativeEndian.Uint64(mb.Buf()[8:]); got != 7 {
		t.Fatalf("target %d", got)
	}
}
