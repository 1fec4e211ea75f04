package verbs

import (
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/link/loop"
)

// TestTrafficClass: a UD send leaves with its AH's traffic class, and an
// RC QP's requests and its peer's ACKs and READ responses with the traffic
// class of each QP's address vector (link.Packet.TClass, which link/udp
// puts in the IP header).
func TestTrafficClass(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]map[uint8]int{} // source address: class: packets
	faults := loop.Faults{Filter: func(p *link.Packet) bool {
		mu.Lock()
		a := p.Src.Addr().String()
		if seen[a] == nil {
			seen[a] = map[uint8]int{}
		}
		seen[a][p.TClass]++
		mu.Unlock()
		return false
	}}
	snapshot := func() map[string]map[uint8]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]map[uint8]int{}
		for a, m := range seen {
			out[a] = map[uint8]int{}
			for k, v := range m {
				out[a][k] = v
			}
		}
		clear(seen)
		return out
	}

	t.Run("UD", func(t *testing.T) {
		p := newPair(t, pairOpts{typ: UD, faults: faults})
		snapshot()
		ah, err := p.pa.CreateAH(AHAttr{DGID: p.db.GIDs()[0], PortNum: 1, TrafficClass: 0x28})
		if err != nil {
			t.Fatal(err)
		}
		mrb := p.reg(p.pb, 256)
		if err := p.qb.PostRecv([]RecvWR{{ID: 1, SGL: []SGE{mrb.SGE(0, 256)}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend([]SendWR{{ID: 2, Opcode: WRSend, Flags: SendSignaled | SendInline, Inline: []byte("hello"),
			AH: ah, RemoteQPN: p.qb.QPN(), RemoteQKey: 0x11111111}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, p.cb, 1, 5*time.Second)
		got := snapshot()
		if len(got["10.0.0.1"]) != 1 || got["10.0.0.1"][0x28] != 1 {
			t.Errorf("UD packets by traffic class: %v, want one of 0x28 from 10.0.0.1", got)
		}
	})

	t.Run("RC", func(t *testing.T) {
		p := newPair(t, pairOpts{faults: faults, tclass: [2]uint8{0x48, 0x88}})
		snapshot()
		mra, mrb := p.reg(p.pa, 4096), p.reg(p.pb, 4096)
		if err := p.qa.PostSend([]SendWR{{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled,
			SGL: []SGE{mra.SGE(0, 3000)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()},
			{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{mra.SGE(0, 3000)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, p.ca, 2, 5*time.Second)
		got := snapshot()
		if len(got["10.0.0.1"]) != 1 || got["10.0.0.1"][0x48] == 0 {
			t.Errorf("requester's packets by traffic class: %v, want all 0x48", got["10.0.0.1"])
		}
		if len(got["10.0.0.2"]) != 1 || got["10.0.0.2"][0x88] == 0 {
			t.Errorf("responder's packets (READ responses, ACKs) by traffic class: %v, want all 0x88", got["10.0.0.2"])
		}
	})
}
