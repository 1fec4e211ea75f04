package verbs

import (
	"bytes"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link/loop"
)

func TestRCLossySmoke(t *testing.T) {
	p := newPair(t, pairOpts{faults: loop.Faults{Loss: 0.1, Duplicate: 0.05, Reorder: 0.05}, seed: 7, timeout: 12})
	ma, mb := p.reg(p.pa, 4<<20), p.reg(p.pb, 4<<20)
	for i := range ma.Buf() {
		ma.Buf()[i] = byte(i * 13)
	}
	const n = 1 << 20
	var recvs []RecvWR
	for i := 0; i < 4; i++ {
		recvs = append(recvs, RecvWR{ID: uint64(i), SGL: []SGE{mb.SGE(i*n, n)}})
	}
	if err := p.qb.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	wrs := []SendWR{
		{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, n)}},
		{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{ma.SGE(n, n)}, RemoteAddr: mb.Addr() + 3*n, RKey: mb.RKey()},
		{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{ma.SGE(2*n, n)}, RemoteAddr: mb.Addr() + 3*n, RKey: mb.RKey()},
		{ID: 4, Opcode: WRSendWithImm, Flags: SendSignaled, Imm: 99, SGL: []SGE{ma.SGE(5, 3000)}},
	}
	if err := p.qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	wa := waitWC(t, p.ca, 4, 30*time.Second)
	for i, w := range wa {
		if w.Status != Success || w.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %+v", i, w)
		}
	}
	wb := waitWC(t, p.cb, 2, 10*time.Second)
	if wb[0].Status != Success || wb[1].Status != Success || wb[1].Imm != 99 || wb[1].ByteLen != 3000 {
		t.Fatalf("recv completions %+v", wb)
	}
	if !bytes.Equal(ma.Buf()[:n], mb.Buf()[:n]) {
		t.Fatal("send data differs")
	}
	if !bytes.Equal(ma.Buf()[n:2*n], mb.Buf()[3*n:4*n]) {
		t.Fatal("write data differs")
	}
	if !bytes.Equal(ma.Buf()[n:2*n], ma.Buf()[2*n:3*n]) {
		t.Fatal("read data differs")
	}
	if !bytes.Equal(ma.Buf()[5:3005], mb.Buf()[n:n+3000]) {
		t.Fatal("send-imm data differs")
	}
	t.Logf("net faults: %+v", p.net.Stats())
}
