package fabric

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// lmcPaths gives every CA port of a swept net.2sw2path4hca LMC 1 and an
// even base LID (0x10, 0x12, ...), and programs both switches' LFTs so that
// a CA behind the other switch is reached by its base LID over
// inter-switch link viaBase and by base+1 over viaAlt: two disjoint paths
// between any two HCAs on different switches, chosen by DLID. Switch LIDs
// keep their routes over viaBase. It updates dn.sn's CA LIDs.
func lmcPaths(t *testing.T, dn *dataNet, viaBase, viaAlt int) {
	t.Helper()
	sm, sn := dn.sm, dn.sn
	if dn.f.NodeByName("Switch1").port(viaBase).remote == nil || dn.f.NodeByName("Switch1").port(viaAlt).remote == nil {
		t.Fatalf("ports %d and %d are not both linked", viaBase, viaAlt)
	}
	for i, g := range sn.caOrder {
		cp := sn.caPorts[g]
		cp.lid = uint16(0x10 + 2*i)
		pi, err := mad.ParsePortInfo(sm.drOK(cp.path, mad.MethodGet, mad.SMAttrPortInfo, uint32(cp.num), nil))
		if err != nil {
			t.Fatal(err)
		}
		pi.LID, pi.LMC, pi.PortState = cp.lid, 1, mad.PortStateNoChange
		b := make([]byte, 64)
		pi.Encode(b)
		got, _ := mad.ParsePortInfo(sm.drOK(cp.path, mad.MethodSet, mad.SMAttrPortInfo, uint32(cp.num), b))
		if got.LID != cp.lid || got.LMC != 1 {
			t.Fatalf("CA port %#x: LID %#x LMC %d after Set", g, got.LID, got.LMC)
		}
		sn.caPorts[g] = cp
	}
	programLFTs(t, dn, func(sw uint64, cp smCAPort, lid uint16) byte {
		switch {
		case cp.sw.guid == sw:
			return byte(cp.sw.port)
		case lid == cp.lid:
			return byte(viaBase)
		}
		return byte(viaAlt)
	}, viaBase)
}

// programLFTs writes every switch's LFT: CA LIDs (base and base+1) where
// route says, the other switch's LID over port swPort. Its directed-route
// SMPs leave switches by swPort where the sweep's paths took another
// inter-switch link (a link may be down). (Written for the two switches of
// net.2sw2path4hca.)
func programLFTs(t *testing.T, dn *dataNet, route func(sw uint64, cp smCAPort, lid uint16) byte, swPort int) {
	t.Helper()
	sm, sn := dn.sm, dn.sn
	const top = 0x3F
	for _, s := range sn.order {
		n := sn.nodes[s]
		if n.info.NodeType != mad.NodeTypeSwitch {
			continue
		}
		dr := append([]byte(nil), n.path...)
		for i := 2; i < len(dr); i++ {
			// net.2sw2path4hca: hops after the SM's CA port and its
			// switch are inter-switch links.
			dr[i] = byte(swPort)
		}
		lft := make([]byte, 64)
		for i := range lft {
			lft[i] = mad.LinearFTNoRoute
		}
		for _, o := range sn.order {
			if m := sn.nodes[o]; m.info.NodeType == mad.NodeTypeSwitch {
				lft[m.lid] = byte(swPort)
				if o == s {
					lft[m.lid] = 0
				}
			}
		}
		for _, g := range sn.caOrder {
			cp := sn.caPorts[g]
			lft[cp.lid] = route(s, cp, cp.lid)
			lft[cp.lid+1] = route(s, cp, cp.lid+1)
		}
		si, _ := mad.ParseSwitchInfo(sm.drOK(dr, mad.MethodGet, mad.SMAttrSwitchInfo, 0, nil))
		si.LinearFDBTop = top
		b := make([]byte, 64)
		si.Encode(b)
		sm.drOK(dr, mad.MethodSet, mad.SMAttrSwitchInfo, 0, b)
		if got := sm.drOK(dr, mad.MethodSet, mad.SMAttrLinearFT, 0, lft); !bytes.Equal(got, lft) {
			t.Fatalf("LFT of %#x did not stick", s)
		}
	}
}

// apmConnect takes qp to RTS toward rqpn at base LID dlid with an
// alternate path to dlid+1 (source path bits 1), armed with REARM.
func apmConnect(t *testing.T, qp *verbs.QP, rqpn wire.QPN, dlid uint16, timeout, retry uint8) {
	t.Helper()
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: verbs.MTU2048, DestQPN: rqpn, RQPSN: 100,
			AH: verbs.AHAttr{DLID: dlid, SL: 1, PortNum: 1}, MaxDestRdAtomic: 4, MinRNRTimer: 1,
			AltAH: verbs.AHAttr{DLID: dlid + 1, SL: 1, SrcPathBits: 1, PortNum: 1}, AltPortNum: 1, AltTimeout: timeout},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer | verbs.AttrAltPath},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 100, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 4,
			PathMigState: verbs.MigRearm},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic | verbs.AttrPathMigState},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("to %v: %v", s.attr.State, err)
		}
	}
}

// TestPathMigOverFabric is issue 11's failover test: two softrdma devices
// on HCAs behind different switches of net.2sw2path4hca (Hca1 on Switch1,
// Hca2 on Switch2), LMC 1, the base LIDs routed over inter-switch link 3
// and base+1 over link 5; an RC QP pair with its primary path by the base
// LIDs and its alternate by base+1, armed. Halfway through a stream of
// WRITEs and SENDs, fabric.SetLink downs link 3: the requester's retries
// run out, it migrates to link 5, the responder follows, both raise
// EventPathMig, and the stream finishes with every completion successful
// and every byte in place. Then the SM reroutes the base LIDs over link 5
// and the application re-arms with the base LIDs as the alternate path.
// The time from link down to the first completion after the migration is
// logged.
func TestPathMigOverFabric(t *testing.T) {
	dn := sweepData(t, readFile(t, "testdata/net.2sw2path4hca"))
	lmcPaths(t, dn, 3, 5)
	a, b := openE2E(t, dn, "Hca1"), openE2E(t, dn, "Hca2")
	waitFor(t, "LMC 1 on both ports", func() bool {
		pa, _ := a.dev.QueryPort(1)
		pb, _ := b.dev.QueryPort(1)
		return pa.LMC == 1 && pb.LMC == 1
	})
	// ACK timeout 14 (67 ms), retry_cnt 2; SOFTRDMA_APM_TIMEOUT sets
	// another timeout exponent, to measure the failover time with it.
	timeout, retry := uint8(14), uint8(2)
	if v := os.Getenv("SOFTRDMA_APM_TIMEOUT"); v != "" {
		n, err := strconv.ParseUint(v, 10, 5)
		if err != nil {
			t.Fatalf("SOFTRDMA_APM_TIMEOUT=%q: %v", v, err)
		}
		timeout = uint8(n)
	}
	qa, qb := a.qp(t, verbs.RC), b.qp(t, verbs.RC)
	apmConnect(t, qa, qb.QPN(), b.lid, timeout, retry)
	apmConnect(t, qb, qa.QPN(), a.lid, timeout, retry)

	// Follow Hca1's events from here, timing the migration.
	migAt := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := a.dev.GetAsyncEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type == verbs.EventPathMig && ev.QP == qa {
				migAt <- time.Now()
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()

	const count, size, window = 64, 16 << 10, 8
	srcMR, err := a.pd.RegMR(make([]byte, count*size), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dstMR, err := b.pd.RegMR(make([]byte, count*size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	fill(srcMR.Buf(), 0x5a)
	// WR i carries srcMR[i*size:] to dstMR[i*size:]: even ones SEND it
	// into a receive there, odd ones WRITE it.
	for i := 0; i < count; i += 2 {
		if err := qb.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{dstMR.SGE(i*size, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	post := func(i int) {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{srcMR.SGE(i*size, size)}}
		if i%2 == 1 {
			wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRDMAWrite, dstMR.Addr()+uint64(i*size), dstMR.RKey()
		}
		if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	next := 0
	for ; next < window; next++ {
		post(next)
	}
	var downAt, flowAt, migrated time.Time
	wcs := make([]verbs.WC, 1)
	for n := 0; n < count; n++ {
		deadline := time.Now().Add(20 * time.Second)
		for a.cq.Poll(wcs) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("completion %d: none", n)
			}
			select {
			case m := <-migAt:
				migrated = m
			default:
			}
			time.Sleep(50 * time.Microsecond)
		}
		if wc := wcs[0]; wc.Status != verbs.Success || wc.WRID != uint64(n) {
			t.Fatalf("completion %d: %+v", n, wc)
		}
		if !migrated.IsZero() && flowAt.IsZero() {
			flowAt = time.Now()
		}
		if n == count/2 {
			downAt = time.Now()
			if err := dn.f.SetLink(dn.f.NodeByName("Switch1"), 3, false); err != nil {
				t.Fatal(err)
			}
		}
		if next < count {
			post(next)
			next++
		}
	}
	if migrated.IsZero() {
		select {
		case migrated = <-migAt:
		case <-time.After(5 * time.Second):
			t.Fatal("no EventPathMig on Hca1")
		}
	}
	for i := 0; i < count/2; i++ {
		if wc := b.poll(t, "receive"); wc.ByteLen != size {
			t.Fatalf("receive %d: %d bytes", i, wc.ByteLen)
		}
	}
	if !bytes.Equal(srcMR.Buf(), dstMR.Buf()) {
		t.Fatal("data differs after the stream")
	}
	ev := nextEventOf(t, b.dev)
	if ev.Type != verbs.EventPathMig || ev.QP != qb {
		t.Fatalf("Hca2's event %v, want path migrated", ev.Type)
	}
	for _, qp := range []*verbs.QP{qa, qb} {
		if at, _ := qp.Query(); at.PathMigState != verbs.MigMigrated || at.AH.DLID&1 != 1 {
			t.Fatalf("after the failure: %v on DLID %#x", at.PathMigState, at.AH.DLID)
		}
	}
	t.Logf("link down -> requester migrated %v; -> first completion on the alternate path %v (ACK timeout %v x %d tries)",
		migrated.Sub(downAt).Round(time.Millisecond), flowAt.Sub(downAt).Round(time.Millisecond),
		time.Duration(wire.ACKTimeout(timeout)).Round(time.Millisecond), retry+1)

	// The SM reroutes the base LIDs around the dead link; the application
	// re-arms with them as the alternate path, and traffic arms both ends.
	programLFTs(t, dn, func(sw uint64, cp smCAPort, lid uint16) byte {
		if cp.sw.guid == sw {
			return byte(cp.sw.port)
		}
		return 5
	}, 5)
	for _, c := range []struct {
		qp   *verbs.QP
		peer uint16
	}{{qa, b.lid}, {qb, a.lid}} {
		if err := c.qp.Modify(&verbs.QPAttr{AltAH: verbs.AHAttr{DLID: c.peer, SL: 1, PortNum: 1}, AltPortNum: 1,
			AltTimeout: timeout, PathMigState: verbs.MigRearm}, verbs.AttrAltPath|verbs.AttrPathMigState); err != nil {
			t.Fatal(err)
		}
	}
	if err := qa.PostSend([]verbs.SendWR{{ID: 100, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}); err != nil {
		t.Fatal(err)
	}
	a.poll(t, "WRITE after re-arming")
	for _, qp := range []*verbs.QP{qa, qb} {
		if at, _ := qp.Query(); at.PathMigState != verbs.MigArmed {
			t.Fatalf("after re-arming: %v", at.PathMigState)
		}
	}
	st := dn.f.DataStats()
	t.Logf("fabric: %+v", st)
}

// nextEventOf waits for an async event of d.
func nextEventOf(t *testing.T, d *verbs.Device) verbs.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatal("no event:", err)
	}
	return ev
}
