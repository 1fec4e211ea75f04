package sa

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
	"github.com/softrdma/softrdma/wire/mad"
)

// mcDev is a verbs device at a CA port with UD QPs.
type mcDev struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
}

func openMcDev(t *testing.T, f *fabric.Fabric, name string) *mcDev {
	t.Helper()
	p, err := f.ConnectHCA(f.NodeByName(name), 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ib.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "mc-" + name})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := &mcDev{dev: d}
	if h.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = d.CreateCQ(64, nil); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(make([]byte, 1<<14), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pa, err := d.QueryPort(1)
		if err == nil && pa.State == verbs.PortActive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's port not ACTIVE", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return h
}

func (h *mcDev) udQP(t *testing.T, qkey wire.QKey) *verbs.QP {
	t.Helper()
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		mask := verbs.AttrState
		switch s {
		case verbs.StateInit:
			mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
		case verbs.StateRTS:
			mask |= verbs.AttrSQPSN
		}
		if err := qp.Modify(&verbs.QPAttr{State: s, PortNum: 1, QKey: qkey}, mask); err != nil {
			t.Fatal(err)
		}
	}
	return qp
}

// saJoin sends an MCMemberRecord Set for port p to the SA at smLID from
// a client attached at p's port, and returns the group's record from the
// answer.
func saJoin(t *testing.T, f *fabric.Fabric, node string, p *sm.Port, smLID uint16, prefix uint64, mgid mad.GID, tid uint64) mad.MCMemberRecord {
	t.Helper()
	got := make(chan *fabric.Datagram, 4)
	cl, err := f.Attach(f.NodeByName(node), 1, func(d *fabric.Datagram) {
		if len(d.MAD) == mad.Size && mad.Class(d.MAD[1]) == mad.ClassSubnAdm {
			got <- d
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(b, mad.MethodSet, mad.SAAttrMCMemberRecord, tid, &mad.SAHeader{ComponentMask: mad.MCMemberRecCompMGID |
		mad.MCMemberRecCompPortGID | mad.MCMemberRecCompJoinState | mad.MCMemberRecCompQKey | mad.MCMemberRecCompPKey})
	q := mad.MCMemberRecord{MGID: mgid, PortGID: mad.MakeGID(prefix, p.GUID), JoinState: mad.JoinFullMember, QKey: 0x2222, PKey: 0xFFFF}
	q.Encode(m.Data())
	if err := cl.Send(&fabric.Datagram{SLID: p.LID(), DLID: smLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		r, err := mad.ParseSA(d.MAD)
		if err != nil || r.MAD().Status() != 0 || r.MAD().TransactionID() != tid {
			t.Fatalf("join of %s: %v, status %#x", node, err, r.MAD().Status())
		}
		rec, _ := mad.ParseMCMemberRecord(r.Data())
		return rec
	case <-time.After(5 * time.Second):
		t.Fatalf("join of %s: no answer", node)
	}
	return mad.MCMemberRecord{}
}

// TestMulticastOverFabric: softrdma's SM and SA on net.2sw2path4hca; UD
// QPs on Hca2, Hca3 and Hca4 (two there) join a group through SA
// MCMemberRecord Sets sent from their ports, the SM programs the switches'
// MFTs, and the QPs attach to the MGID. One SEND from Hca1 (not a member)
// to the MLID, with the MGID in its GRH, reaches each attached QP exactly
// once; a QP of Hca3 not attached gets nothing. After Hca3 leaves, the
// MFTs no longer lead to it.
func TestMulticastOverFabric(t *testing.T) {
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
	portOf := func(name string) *sm.Port { return sn.PortByGUID(f.NodeByName(name).PortGUID(1)) }

	mgid := mad.GID{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 15: 0x42}
	var mlid uint16
	for i, name := range []string{"Hca2", "Hca3", "Hca4"} {
		rec := saJoin(t, f, name, portOf(name), sn.SMLID, sn.Prefix, mgid, uint64(100+i))
		if rec.MLID < sm.MLIDFirst || mlid != 0 && rec.MLID != mlid {
			t.Fatalf("%s joined MLID %#x (first %#x)", name, rec.MLID, mlid)
		}
		mlid = rec.MLID
	}
	// The MFTs: Switch1 sends the group to Hca3 (port 2) and toward
	// Switch2; Switch2 to Hca2 (1), Hca4 (2) and toward Switch1.
	mftOf := func(sw string) uint16 {
		b, err := f.Query(f.NodeByName(sw), mad.SMAttrMulticastFT, mad.MulticastFTModifier(0, uint16(mlid-sm.MLIDFirst)/32))
		if err != nil {
			t.Fatal(err)
		}
		x, _ := mad.ParseMulticastFT(b)
		return x.PortMask[(mlid-sm.MLIDFirst)%32]
	}
	deadline := time.Now().Add(5 * time.Second)
	for mftOf("Switch1")&(1<<2) == 0 || mftOf("Switch2")&(1<<1|1<<2) != 1<<1|1<<2 {
		if time.Now().After(deadline) {
			t.Fatalf("MFTs: Switch1 %#x, Switch2 %#x", mftOf("Switch1"), mftOf("Switch2"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	s1, s2 := mftOf("Switch1"), mftOf("Switch2")
	// One inter-switch link in the tree (ports 3 or 5), and no port to Hca1.
	if s1&(1<<1) != 0 || (s1>>3&1)+(s1>>5&1) != 1 || s1&(1<<3|1<<5) != s2&(1<<3|1<<5) {
		t.Errorf("MFTs: Switch1 %#x, Switch2 %#x: want one inter-switch link, nothing to Hca1", s1, s2)
	}

	sender := openMcDev(t, f, "Hca1")
	type member struct {
		dev *mcDev
		qp  *verbs.QP
	}
	var members []member
	gid := wire.GID(mgid)
	devOf := map[string]*mcDev{}
	for _, name := range []string{"Hca2", "Hca3", "Hca4", "Hca4"} {
		d := devOf[name]
		if d == nil {
			d = openMcDev(t, f, name)
			devOf[name] = d
		}
		qp := d.udQP(t, 0x2222)
		if err := qp.AttachMcast(gid, mlid); err != nil {
			t.Fatalf("%s AttachMcast: %v", name, err)
		}
		if err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(len(members)), SGL: []verbs.SGE{d.mr.SGE(1024*len(members), 1024)}}}); err != nil {
			t.Fatal(err)
		}
		members = append(members, member{d, qp})
	}
	idle := members[1].dev.udQP(t, 0x2222) // on Hca3, not attached
	if err := idle.PostRecv([]verbs.RecvWR{{ID: 99, SGL: []verbs.SGE{members[1].dev.mr.SGE(8192, 1024)}}}); err != nil {
		t.Fatal(err)
	}

	sq := sender.udQP(t, 0x2222)
	ah, err := sender.pd.CreateAH(verbs.AHAttr{DLID: mlid, PortNum: 1, IsGlobal: true, DGID: gid, HopLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("one SEND to the group")
	copy(sender.mr.Buf(), msg)
	if err := sq.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{sender.mr.SGE(0, len(msg))}, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x2222}}); err != nil {
		t.Fatal(err)
	}
	// Each attached QP's receive completes once; wait a while more for
	// duplicates.
	recvs := map[*verbs.CQ][]verbs.WC{}
	devs := []*mcDev{members[0].dev, members[1].dev, members[2].dev}
	deadline = time.Now().Add(5 * time.Second)
	quiet := time.Time{}
	for time.Now().Before(deadline) {
		for _, d := range devs {
			wcs := make([]verbs.WC, 8)
			n := d.cq.Poll(wcs)
			recvs[d.cq] = append(recvs[d.cq], wcs[:n]...)
		}
		if len(recvs[devs[0].cq])+len(recvs[devs[1].cq])+len(recvs[devs[2].cq]) >= 4 && quiet.IsZero() {
			quiet = time.Now().Add(200 * time.Millisecond)
		}
		if !quiet.IsZero() && time.Now().After(quiet) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i, want := range []int{1, 1, 2} {
		wcs := recvs[devs[i].cq]
		if len(wcs) != want {
			t.Errorf("%s: %d completions %+v, want %d", []string{"Hca2", "Hca3", "Hca4"}[i], len(wcs), wcs, want)
		}
		for _, wc := range wcs {
			if wc.Status != verbs.Success || wc.WRID == 99 || wc.ByteLen != uint32(40+len(msg)) {
				t.Errorf("%s: completion %+v", []string{"Hca2", "Hca3", "Hca4"}[i], wc)
			}
		}
	}
	for i, m := range members {
		off := 1024*i + 40
		if got := m.dev.mr.Buf()[off : off+len(msg)]; string(got) != string(msg) {
			t.Errorf("member %d received %q", i, got)
		}
	}

	// Hca3 leaves: Switch1 no longer sends the group to port 2.
	b := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(b, mad.MethodDelete, mad.SAAttrMCMemberRecord, 200, &mad.SAHeader{ComponentMask: mad.MCMemberRecCompMGID |
		mad.MCMemberRecCompPortGID | mad.MCMemberRecCompJoinState})
	q := mad.MCMemberRecord{MGID: mgid, PortGID: mad.MakeGID(sn.Prefix, portOf("Hca3").GUID), JoinState: mad.JoinFullMember}
	q.Encode(m.Data())
	x.SA.Handle(&sm.Datagram{SLID: portOf("Hca3").LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b})
	deadline = time.Now().Add(5 * time.Second)
	for mftOf("Switch1")&(1<<2) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after Hca3 left, Switch1's MFT entry is still %#x", mftOf("Switch1"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
