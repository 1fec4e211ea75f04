package verbs

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/leakcheck"
)

// TestPollReceive runs SEND and WRITE ping-pongs between two devices over
// UDP, polled in a loop that yields, as programs do: CQ.Poll receives on
// the test's goroutine, beside the links' readers (the WRITE is one with
// immediate data: a memory-polling program would race with the engine's
// placement as far as the race detector can tell). Every message must land,
// complete once and in order; and the polls must have received some of
// them themselves (the rounds go on until they have, 2000 at most). It runs
// with the process's Ps and with one (GOMAXPROCS=1), where a loop that
// polls and yields keeps Go's network poller from running, so that only
// the polls' own receiving moves the packets quickly. With
// Options.NoPollReceive the polls must receive nothing.
func TestPollReceive(t *testing.T) {
	t.Run("default", func(t *testing.T) { testPollReceive(t, false) })
	t.Run("gomaxprocs1", func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		testPollReceive(t, false)
	})
	t.Run("nopollreceive", func(t *testing.T) { testPollReceive(t, true) })
}

func testPollReceive(t *testing.T, off bool) {
	leakcheck.Check(t)
	udpNoPollRecv = off
	da, db := newDevicesUDP(t, false)
	udpNoPollRecv = false
	p := &pair{t: t, da: da, db: db}
	p.connect(pairOpts{typ: RC, mtu: MTU1024, wr: 16, timeout: 14})
	ma, mb := p.reg(p.pa, 8192), p.reg(p.pb, 8192)
	polled := func() uint64 {
		return da.link.(kernelHB).polled.Load() + db.link.(kernelHB).polled.Load()
	}
	wc := make([]WC, 4)
	// wait polls cq, as a polling program does, for completions of
	// work request id with these opcodes, in any order (a CQ serves both
	// queues of the QP).
	wait := func(cq *CQ, id uint64, ops ...WCOpcode) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(ops) > 0 {
			if n := cq.Poll(wc[:1]); n == 1 {
				i := slices.Index(ops, wc[0].Opcode)
				if i < 0 || wc[0].WRID != id || wc[0].Status != Success {
					t.Fatalf("completion %+v, want wr_id %d, one of %v", wc[0], id, ops)
				}
				ops = slices.Delete(ops, i, i+1)
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("no completion %d", id)
			}
			runtime.Gosched()
		}
	}
	round := 0
	rounds := 2000
	if off {
		rounds = 100
	}
	for ; round < rounds && (round < 100 || polled() == 0); round++ {
		id := uint64(round)
		// SEND a -> b, answered b -> a.
		ma.Buf()[0] = byte(round)
		post(t, p.qa, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{ma.SGE(0, 64)}})
		if err := p.qb.PostRecv([]RecvWR{{ID: id, SGL: []SGE{mb.SGE(1024, 64)}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostRecv([]RecvWR{{ID: id, SGL: []SGE{ma.SGE(1024, 64)}}}); err != nil {
			t.Fatal(err)
		}
		wait(p.cb, id, WCRecv)
		if mb.Buf()[1024] != byte(round) {
			t.Fatalf("round %d: SEND landed wrong", round)
		}
		post(t, p.qb, SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mb.SGE(0, 64)}})
		wait(p.ca, id, WCRecv, WCSend)
		wait(p.cb, id, WCSend)
		// A WRITE with immediate a -> b.
		ma.Buf()[4096] = byte(round + 1)
		if err := p.qb.PostRecv([]RecvWR{{ID: id}}); err != nil {
			t.Fatal(err)
		}
		post(t, p.qa, SendWR{ID: id, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGL: []SGE{ma.SGE(4096, 100)},
			RemoteAddr: mb.Addr() + 4096, RKey: mb.RKey(), Imm: uint32(round)})
		wait(p.cb, id, WCRecvRDMAWithImm)
		if mb.Buf()[4096] != byte(round+1) {
			t.Fatalf("round %d: WRITE landed wrong", round)
		}
		wait(p.ca, id, WCRDMAWrite)
	}
	if !bytes.Equal(ma.Buf()[4096:4196], mb.Buf()[4096:4196]) {
		t.Error("WRITE data differ")
	}
	if off {
		if n := polled(); n != 0 {
			t.Fatalf("NoPollReceive: the polls received %d packets themselves", n)
		}
		return
	}
	if polled() == 0 {
		t.Fatalf("%d rounds, the polls received nothing themselves", round)
	}
	t.Logf("%d rounds; the polls received %d packets", round, polled())
}

// TestDevicePollNotPoller: a device on a link that cannot be polled (the
// in-process loop) returns 0 from Poll, and its CQ polls do not try.
func TestDevicePollNotPoller(t *testing.T) {
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	if n := da.Poll(); n != 0 {
		t.Fatalf("Poll on a loop link: %d", n)
	}
	if da.pollRecv {
		t.Fatal("busy polling on a link that cannot be polled")
	}
}
