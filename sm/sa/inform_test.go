package sa

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

func subscribeMAD(tid uint64, ii mad.InformInfo) []byte {
	b := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(b, mad.MethodSet, mad.SAAttrInformInfo, tid, &mad.SAHeader{})
	ii.Encode(m.Data())
	return b
}

// recvReport waits for the next Report on tr (skipping other MADs).
func recvReport(t *testing.T, tr *memTransport) (*sm.Datagram, mad.Notice) {
	t.Helper()
	for {
		select {
		case d := <-tr.out:
			m, err := mad.ParseSA(d.MAD)
			if err != nil || m.MAD().Method() != mad.MethodReport {
				continue
			}
			n, err := mad.ParseNotice(m.Data()[:mad.NoticeFullSize])
			if err != nil || m.MAD().AttributeID() != mad.SAAttrNotice {
				t.Fatalf("Report: %v, attribute %#x", err, m.MAD().AttributeID())
			}
			return d, n
		case <-time.After(5 * time.Second):
			t.Fatal("no Report")
		}
	}
}

func TestInformInfoAndReports(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	srv, tr, c := newTestServer(t, s, Config{RMPPTimeout: 20 * time.Millisecond, RMPPRetries: 3})
	sub := caPorts(s)[1]
	c.lid = sub.LID()
	// Subscribe to group creation (66) and to GIDs out of service (65).
	for i, trap := range []uint16{TrapMcastGroupCreate, TrapGIDOutOfService} {
		ii := mad.InformInfo{LIDRangeBegin: 0xFFFF, IsGeneric: true, Subscribe: true, Type: 0xFFFF, TrapNumber: trap,
			QPN: 0x77, ProducerType: 0xFFFFFF}
		st, b := c.get(mad.MethodSet, mad.SAAttrInformInfo, 0, encInform(ii))
		if got, _ := mad.ParseInformInfo(b); st != mad.StatusOK || got != ii {
			t.Fatalf("subscribe %d: %s %+v", i, mad.SAStatusName(st), got)
		}
	}
	st, recs := c.getTable(mad.SAAttrInformInfoRecord, 0, nil)
	if st != mad.StatusOK || len(recs) != 2 {
		t.Fatalf("InformInfoRecords: %s, %d", mad.SAStatusName(st), len(recs))
	}
	r, _ := mad.ParseInformInfoRecord(recs[1])
	if r.SubscriberGID != mad.MakeGID(s.Prefix, sub.GUID) || r.Info.TrapNumber != TrapGIDOutOfService || r.Enum != 2 {
		t.Errorf("InformInfoRecord %+v", r)
	}
	q := mad.InformInfoRecord{SubscriberGID: r.SubscriberGID, Enum: 1}
	if st, b := c.get(mad.MethodGet, mad.SAAttrInformInfoRecord, mad.InformInfoRecCompSubscriberGID|mad.InformInfoRecCompEnum,
		enc(&q, mad.InformInfoRecordSize)); st != mad.StatusOK {
		t.Errorf("Get InformInfoRecord by GID and Enum: %s", mad.SAStatusName(st))
	} else if g, _ := mad.ParseInformInfoRecord(b); g.Info.TrapNumber != TrapMcastGroupCreate {
		t.Errorf("Get InformInfoRecord: %+v", g)
	}

	// A group created by another port's join: Report(66) to QP 0x77 of the
	// subscriber, the MGID in the data details, sent again until the
	// ReportResp.
	mgid := mad.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 9}
	joiner := newClient(t, srv, tr, caPorts(s)[0].LID())
	jq := mad.MCMemberRecord{MGID: mgid, PortGID: mad.MakeGID(s.Prefix, caPorts(s)[0].GUID), JoinState: mad.JoinFullMember, QKey: 1, PKey: 0xffff}
	joiner.request(mad.MethodSet, mad.SAAttrMCMemberRecord, mad.MCMemberRecCompMGID|mad.MCMemberRecCompPortGID|
		mad.MCMemberRecCompJoinState|mad.MCMemberRecCompQKey|mad.MCMemberRecCompPKey, enc(&jq, mad.MCMemberRecordSize))
	d, n := recvReport(t, tr)
	if d.DLID != sub.LID() || d.DQP != 0x77 || n.TrapNumber != TrapMcastGroupCreate || mad.GID(n.DataDetails[6:22]) != mgid ||
		n.IssuerLID != s.SMLID || !n.IsGeneric {
		t.Fatalf("Report to %d QP %#x: %+v", d.DLID, d.DQP, n)
	}
	d2, _ := recvReport(t, tr) // no ReportResp yet: sent again
	if mad.MAD(d2.MAD).TransactionID() != mad.MAD(d.MAD).TransactionID() {
		t.Error("the Report sent again has another TID")
	}
	resp := append([]byte(nil), d.MAD...)
	mad.MAD(resp).SetMethod(mad.MethodReportResp)
	srv.Handle(&sm.Datagram{SLID: sub.LID(), DLID: s.SMLID, SQP: 0x77, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: resp})
	after := srv.InformStats()
	time.Sleep(100 * time.Millisecond) // past several retry periods: nothing more is sent
	if st := srv.InformStats(); st != after || st.Reports != 1 || st.Resent < 1 || st.Lost != 0 || st.Subscriptions != 2 {
		t.Errorf("after the ReportResp: %+v, then %+v", after, st)
	}
	for len(tr.out) > 0 { // copies sent before the ReportResp arrived
		<-tr.out
	}

	// A port gone from the next snapshot: Report(65) with its GID; not
	// answered, it is given up after the retries.
	srv.Observe(s)
	gone := caPorts(s)[2]
	s2 := topoSubnet(t, "net.2sw2path4hca", 0)
	for _, p := range caPorts(s2) {
		if p.GUID == gone.GUID {
			p.Info.LID = 0
		}
	}
	s2.Index()
	srv.Observe(s2)
	for _, n = recvReport(t, tr); n.TrapNumber == TrapMcastGroupCreate; _, n = recvReport(t, tr) {
		// a copy of the answered Report still on its way
	}
	if n.TrapNumber != TrapGIDOutOfService || mad.GID(n.DataDetails[6:22]) != mad.MakeGID(s.Prefix, gone.GUID) {
		t.Errorf("Report 65: %+v", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.InformStats().Lost != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("an unanswered Report is not given up: %+v", srv.InformStats())
		}
		time.Sleep(10 * time.Millisecond)
	}

	if st := srv.InformStats(); st.Reports != 2 || st.Resent < 4 {
		t.Errorf("after the lost Report: %+v", st)
	}
	for len(tr.out) > 0 { // the Reports sent again
		<-tr.out
	}

	// Unsubscribe 66; unsubscribing it again is an error.
	ii := mad.InformInfo{LIDRangeBegin: 0xFFFF, IsGeneric: true, Type: 0xFFFF, TrapNumber: TrapMcastGroupCreate, QPN: 0x77, ProducerType: 0xFFFFFF}
	if st, _ := c.get(mad.MethodSet, mad.SAAttrInformInfo, 0, encInform(ii)); st != mad.StatusOK {
		t.Errorf("unsubscribe: %s", mad.SAStatusName(st))
	}
	if st, _ := c.get(mad.MethodSet, mad.SAAttrInformInfo, 0, encInform(ii)); st != mad.SAStatusReqInvalid {
		t.Errorf("unsubscribe twice: %s", mad.SAStatusName(st))
	}
	if st, recs := c.getTable(mad.SAAttrInformInfoRecord, 0, nil); st != mad.StatusOK || len(recs) != 1 {
		t.Errorf("after unsubscribing: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	// A stray ReportResp is dropped and counted.
	before := srv.Stats().Dropped
	srv.Handle(&sm.Datagram{SLID: sub.LID(), DLID: s.SMLID, SQP: 0x77, DQP: 1, PKey: 0xffff, QKey: mad.GSIQKey, MAD: resp})
	if srv.Stats().Dropped != before+1 {
		t.Error("a stray ReportResp is not counted")
	}
}

func encInform(ii mad.InformInfo) []byte { return enc(&ii, mad.InformInfoSize) }

// TestReportsOverFabric: softrdma's SM and SA on the in-process fabric; a
// subscriber at Hca2 subscribes by a Set(InformInfo) sent from its port
// to group creation, Hca3 creates a group by joining it, and the
// subscriber receives the Report(Notice) at its port and answers it; then
// to trap 144, which Hca4's port sends the SM when its capability mask
// changes, and which the SA forwards.
func TestReportsOverFabric(t *testing.T) {
	f := openFabric(t, "net.2sw2path4hca")
	tr, err := sm.FabricTransport(f, f.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Attach(tr, sm.Config{Logger: quietLog()}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := x.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	sn := x.Subnet()
	sub := sn.PortByGUID(f.NodeByName("Hca2").PortGUID(1))
	got := make(chan *fabric.Datagram, 8)
	cl, err := f.Attach(f.NodeByName("Hca2"), 1, func(d *fabric.Datagram) {
		if len(d.MAD) == mad.Size && mad.Class(d.MAD[1]) == mad.ClassSubnAdm {
			got <- d
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ii := mad.InformInfo{LIDRangeBegin: 0xFFFF, IsGeneric: true, Subscribe: true, Type: 0xFFFF,
		TrapNumber: TrapMcastGroupCreate, QPN: 1, ProducerType: 0xFFFFFF}
	if err := cl.Send(&fabric.Datagram{SLID: sub.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey,
		MAD: subscribeMAD(501, ii)}); err != nil {
		t.Fatal(err)
	}
	// next returns the next SA MAD at Hca2's port, skipping Reports the
	// test has answered already (a copy sent again before the ReportResp).
	answered := map[uint64]bool{}
	next := func(what string) mad.SAMAD {
		deadline := time.After(5 * time.Second)
		for {
			select {
			case d := <-got:
				m, err := mad.ParseSA(d.MAD)
				if err != nil {
					t.Fatal(err)
				}
				if m.MAD().Method() == mad.MethodReport && answered[m.MAD().TransactionID()] {
					continue
				}
				return m
			case <-deadline:
				t.Fatalf("no %s", what)
				return nil
			}
		}
	}
	if m := next("SetResp"); m.MAD().Status() != 0 || m.MAD().TransactionID() != 501 {
		t.Fatalf("subscribe: status %#x", m.MAD().Status())
	}
	mgid := mad.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 0x66}
	saJoin(t, f, "Hca3", sn.PortByGUID(f.NodeByName("Hca3").PortGUID(1)), sn.SMLID, sn.Prefix, mgid, 502)
	m := next("Report")
	n, _ := mad.ParseNotice(m.Data()[:mad.NoticeFullSize])
	if m.MAD().Method() != mad.MethodReport || n.TrapNumber != TrapMcastGroupCreate || mad.GID(n.DataDetails[6:22]) != mgid {
		t.Fatalf("got %s trap %d", mad.SAMethodName(m.MAD().Method()), n.TrapNumber)
	}
	answered[m.MAD().TransactionID()] = true
	resp := append([]byte(nil), m...)
	mad.MAD(resp).SetMethod(mad.MethodReportResp)
	if err := cl.Send(&fabric.Datagram{SLID: sub.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: resp}); err != nil {
		t.Fatal(err)
	}
	// Trap 144 from Hca4 (its capability mask changed), which the SM
	// receives, is forwarded to a subscriber of 144, the issuer Hca4.
	ii.TrapNumber = mad.TrapCapabilityMaskChanged
	if err := cl.Send(&fabric.Datagram{SLID: sub.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey,
		MAD: subscribeMAD(503, ii)}); err != nil {
		t.Fatal(err)
	}
	if m := next("SetResp"); m.MAD().Status() != 0 || m.MAD().TransactionID() != 503 {
		t.Fatalf("subscribe to 144: status %#x", m.MAD().Status())
	}
	hca4 := sn.PortByGUID(f.NodeByName("Hca4").PortGUID(1))
	if err := f.SetIsSM(f.NodeByName("Hca4"), 1, true); err != nil {
		t.Fatal(err)
	}
	m = next("Report of trap 144")
	n, _ = mad.ParseNotice(m.Data()[:mad.NoticeFullSize])
	if m.MAD().Method() != mad.MethodReport || n.TrapNumber != mad.TrapCapabilityMaskChanged || n.IssuerLID != hca4.LID() ||
		n.IssuerGID != mad.MakeGID(sn.Prefix, hca4.GUID) || n.Trap144().CapabilityMask&mad.PortCapIsSM == 0 {
		t.Fatalf("got %s trap %d from LID %d", mad.SAMethodName(m.MAD().Method()), n.TrapNumber, n.IssuerLID)
	}
	answered[m.MAD().TransactionID()] = true
	resp = append([]byte(nil), m...)
	mad.MAD(resp).SetMethod(mad.MethodReportResp)
	if err := cl.Send(&fabric.Datagram{SLID: sub.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: resp}); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		st := x.SA.InformStats()
		if st.Reports == 2 && st.Lost == 0 && len(x.SA.inf.pendingTIDs()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ReportResp did not end the Report: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
