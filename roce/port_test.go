package roce

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// freePort returns a UDP port free on both loopback addresses, or skips.
func freePort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
		if err != nil {
			t.Skip(err)
		}
		p := c.LocalAddr().(*net.UDPAddr).Port
		c.Close()
		if c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2"), Port: p}); err == nil {
			c2.Close()
			return uint16(p)
		}
	}
	t.Skip("no free UDP port on 127.0.0.1 and 127.0.0.2")
	return 0
}

// udQP makes a UD QP in RTS on d.
func udQP(t *testing.T, d *verbs.Device) (*verbs.PD, *verbs.CQ, *verbs.QP) {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, PortNum: 1, QKey: 0x1111}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(&m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	return pd, cq, qp
}

// TestPortIsRemotePort: two devices moved off 4791 to the same port, with
// no RemotePort, reach each other (the device sends to its own port).
func TestPortIsRemotePort(t *testing.T) {
	port := freePort(t)
	a, err := Open([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, &Options{Port: port})
	if err != nil {
		t.Skip(err)
	}
	defer a.Close()
	b, err := Open([]netip.Addr{netip.MustParseAddr("127.0.0.2")}, &Options{Port: port})
	if err != nil {
		t.Skip(err)
	}
	defer b.Close()
	pda, cqa, qpa := udQP(t, a)
	pdb, cqb, qpb := udQP(t, b)
	sbuf, rbuf := []byte("to the same port"), make([]byte, 64+40)
	smr, err := pda.RegMR(sbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	rmr, err := pdb.RegMR(rbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := qpb.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, len(rbuf))}}}); err != nil {
		t.Fatal(err)
	}
	ah, err := pda.CreateAH(verbs.AHAttr{DGID: wire.GIDFromAddr(netip.MustParseAddr("127.0.0.2")), PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := qpa.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, len(sbuf))}, AH: ah, RemoteQPN: qpb.QPN(), RemoteQKey: 0x1111}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for cqb.Poll(wc) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("nothing received on port %d (sends from A: %d)", port, cqa.Poll(make([]verbs.WC, 1)))
		}
		time.Sleep(time.Millisecond)
	}
	if err := wc[0].Err(); err != nil || string(rbuf[40:40+len(sbuf)]) != string(sbuf) {
		t.Fatalf("receive: %v, %q", err, rbuf[40:40+len(sbuf)])
	}
}
