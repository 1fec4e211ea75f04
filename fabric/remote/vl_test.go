package remote

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// vlPacket builds an RC SEND Only to QP 0x11 from slid to dlid on SL sl
// and VL v carrying seq and n pattern bytes.
func vlPacket(t testing.TB, slid, dlid uint16, sl, v uint8, seq uint32, n int) []byte {
	t.Helper()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: wire.PSN(seq & 0xFFFFFF)}}
	payload := make([]byte, 4+n)
	binary.BigEndian.PutUint32(payload, seq)
	b := make([]byte, wire.IBPacketLen(h.BTH.Opcode, len(payload), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{VL: v, SL: sl, DLID: dlid, SLID: slid}}, &h, payload); err != nil {
		t.Fatal(err)
	}
	return b
}

// smpPacket builds a LID-routed SubnGet(NodeInfo) from QP0 at slid to the
// SMA at dlid, on VL15.
func smpPacket(t testing.TB, slid, dlid uint16, tid uint64) []byte {
	t.Helper()
	m := make([]byte, mad.Size)
	if _, err := mad.NewLIDRoutedSMP(m, mad.MethodGet, mad.SMAttrNodeInfo, 0, tid); err != nil {
		t.Fatal(err)
	}
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 0},
		DETH: wire.DETHFields{SrcQP: 0}}
	b := make([]byte, wire.IBPacketLen(wire.UDSendOnly, len(m), false))
	if _, err := wire.BuildIB(b, &wire.IBFraming{LRH: wire.LRHFields{VL: wire.VL15, DLID: dlid, SLID: slid}}, &h, m); err != nil {
		t.Fatal(err)
	}
	return b
}

func seqOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[wire.LRHLen+wire.BTHLen:]) }

// TestVLsIndependent: over one remote attachment, a VL the fabric holds
// back does not hold the others. Hca2 does not read, so Hca1's stream to
// it on VL0 backs up through the fabric's credits, the server's VL0 lane
// and Hca1's VL0 credits, and Hca1's VL0 sender waits in Send, nothing
// dropped.
// Meanwhile, from the same client on the same connection, a stream on VL1
// to Hca4 (across the switch-to-switch link VL0 is backed up on) arrives
// whole and in order, and SMPs on VL15 to Switch2's SMA are answered. Once
// Hca2 reads again every VL0 packet arrives, in order.
func TestVLsIndependent(t *testing.T) {
	s := serve(t, Config{Network: "unix", Addr: filepath.Join(t.TempDir(), "fabric.sock")})
	a := dial(t, s.addr, "Hca1", nil)
	c4 := dial(t, s.addr, "Hca4", nil)
	pb, seqs, release := gatedReceiver(t, s.addr, "Hca2")
	sm := newSM(t, s.f, "Hca3", 1)
	sn := sm.sweep()
	lidA, lidB, lid4 := lidOf(t, s.f, sn, "Hca1"), lidOf(t, s.f, sn, "Hca2"), lidOf(t, s.f, sn, "Hca4")
	sw2 := sn.NodeByGUID(s.f.NodeByName("Switch2").GUID()).Ports[0].LID()
	waitFor(t, "all ACTIVE", func() bool {
		return a.p.Attr().State == ib.StateActive && pb.Attr().State == ib.StateActive && c4.p.Attr().State == ib.StateActive
	})
	if vls := a.p.Attr().OperVLs; vls < 2 {
		t.Fatalf("Hca1 has %d operational VLs", vls)
	}

	const n = 10000 // 2.6 MB on VL0: more than the path, the lane and the client hold
	sendErr := make(chan error, 1)
	go func() {
		batch := make([][]byte, 0, 32)
		for i := 0; i < n; {
			batch = batch[:0]
			for ; len(batch) < cap(batch) && i < n; i++ {
				batch = append(batch, vlPacket(t, lidA, lidB, 0, 0, uint32(i), 256))
			}
			if err := a.p.Send(batch); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	// VL0 backs up to the client: no credits left, and more than
	// maxQueued bytes waiting for them, so its sender waits in Send.
	// (The path holds some 2,300 of the 10,000 packets: it cannot finish
	// while Hca2 does not read.)
	vl0Held := func() (bool, int) {
		a.p.qmu.Lock()
		defer a.p.qmu.Unlock()
		return a.p.credits[0] == 0 && a.p.pendBytes[0] > maxQueued, a.p.pendBytes[0]
	}
	waitFor(t, "VL0 backed up to the client", func() bool { held, _ := vl0Held(); return held })
	t.Logf("VL0 held back at the client after %d packets sent", a.p.Stats().Sent)

	// VL1 and VL15 from the same client, while VL0 stays stalled. (Sent
	// from a goroutine: were VL1 held behind VL0, Send would wait, and
	// the test fails on what does not arrive.)
	const m = 1000
	vl1 := make(chan error, 1)
	go func() {
		for i := 0; i < m; i += 50 {
			var batch [][]byte
			for j := i; j < i+50; j++ {
				batch = append(batch, vlPacket(t, lidA, lid4, 1, 1, uint32(j), 256))
			}
			if err := a.p.Send(batch); err != nil {
				vl1 <- err
				return
			}
		}
		vl1 <- nil
	}()
	for i := range uint32(m) {
		b := c4.expect(t)
		if got := seqOf(b); got != i || wire.LRH(b).VL() != 1 {
			t.Fatalf("Hca4: VL1 packet %d arrived as number %d on VL %d", i, got, wire.LRH(b).VL())
		}
	}
	if err := <-vl1; err != nil {
		t.Fatal(err)
	}
	const smps = 20
	for i := range smps {
		smp := smpPacket(t, lidA, sw2, uint64(0x7000+i))
		go a.p.Send([][]byte{smp}) // an error shows as no answer
		b := a.expect(t)
		p, err := wire.ParseIB(b)
		if err != nil {
			t.Fatal(err)
		}
		r := mad.MAD(p.Transport().Payload())
		if p.LRH().VL() != wire.VL15 || r.Method() != mad.MethodGetResp || r.TransactionID() != uint64(0x7000+i) || r.Status() != 0 {
			t.Fatalf("SMP %d: answer on VL %d, method %v, TID %#x, status %#x", i, p.LRH().VL(), r.Method(), r.TransactionID(), r.Status())
		}
		ni, err := mad.ParseNodeInfo(mad.SMP(r).Data())
		if err != nil || ni.NodeGUID != s.f.NodeByName("Switch2").GUID() {
			t.Fatalf("SMP %d: NodeInfo %+v, %v", i, ni, err)
		}
	}
	if vl0 := a.p.Stats().Sent - m - smps; vl0 >= n {
		t.Fatalf("all %d VL0 packets sent to a receiver that does not read: no backpressure", vl0)
	}
	if _, waiting := vl0Held(); waiting == 0 {
		t.Fatal("no VL0 packets wait for credits while Hca2 does not read")
	}

	release()
	expectInOrder(t, "Hca2 (VL0)", seqs, n)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	st := s.f.DataStats()
	if st.Injected != n+m+smps || st.Delivered != n+m+smps || st.Malformed+st.NoRoute+st.Inactive+st.BadSL+st.NoHCA+st.PKey != 0 {
		t.Errorf("fabric: %+v", st)
	}
	if st := s.srv.Stats(); st.Overruns != 0 || st.BadFrames != 0 {
		t.Errorf("server: %+v", st)
	}
}
