package sa

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// openFabric builds an in-process fabric from a file of fabric/testdata.
func openFabric(t testing.TB, name string) *fabric.Fabric {
	t.Helper()
	path := filepath.Join("..", "..", "fabric", "testdata", name)
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(fh, path)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(topo, &fabric.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Attach runs the SA beside the SM: after a sweep, a NodeRecord Get sent
// from another HCA to the SM's LID on QP1 is answered with the record the
// SM's snapshot holds.
func TestAttach(t *testing.T) {
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
	got := make(chan *fabric.Datagram, 4)
	cl, err := f.Attach(f.NodeByName("Hca3"), 1, func(d *fabric.Datagram) { got <- d })
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	src := sn.PortByGUID(f.NodeByName("Hca3").PortGUID(1))
	dst := sn.PortByGUID(f.NodeByName("Hca4").PortGUID(1))
	b := make([]byte, mad.Size)
	q, _ := mad.NewSAMAD(b, mad.MethodGet, mad.SAAttrNodeRecord, 99, &mad.SAHeader{ComponentMask: mad.NodeRecCompLID})
	rec := mad.NodeRecord{LID: dst.LID()}
	rec.Encode(q.Data())
	if err := cl.Send(&fabric.Datagram{SLID: src.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		m, err := mad.ParseSA(d.MAD)
		if err != nil {
			t.Fatal(err)
		}
		if m.MAD().Method() != mad.MethodGetResp || m.MAD().Status() != 0 || m.MAD().TransactionID() != 99 || d.SLID != sn.SMLID {
			t.Fatalf("answer: method %v status %#x tid %d from LID %d", m.MAD().Method(), m.MAD().Status(), m.MAD().TransactionID(), d.SLID)
		}
		r, _ := mad.ParseNodeRecord(m.Data())
		if r.LID != dst.LID() || r.Info.NodeGUID != dst.Node.Info.NodeGUID || r.Desc.Description != dst.Node.Desc {
			t.Errorf("NodeRecord %+v, want %s at LID %d", r, dst.Node.Desc, dst.LID())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer from the SA")
	}
	if st := x.SA.Stats(); st.Requests != 1 {
		t.Errorf("SA stats %+v", st)
	}
	tr2, err := sm.FabricTransport(f, f.NodeByName("Hca2"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(tr2, sm.Config{GMP: func(*sm.Datagram) {}}, Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("Attach with GMP set: %v, want ErrConfig", err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// With a partition policy in the SM, the snapshot holds the P_Key tables
// the sweep wrote and the SA's PathRecord takes its P_Key from them: Hca3
// and Hca4 are limited members of the default partition and full members
// of Blue, so their path is in Blue.
func TestAttachPartitionsPathRecord(t *testing.T) {
	f := openFabric(t, "net.2sw2path4hca")
	g := func(name string) string { return fmt.Sprintf("%#x", f.NodeByName(name).PortGUID(1)) }
	ps, err := policy.ParsePartitions(strings.NewReader(fmt.Sprintf("Default=0x7fff : ALL=limited, SELF=full ;\nBlue=0x0002 : %s=full, %s=full ;\n", g("Hca3"), g("Hca4"))))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sm.FabricTransport(f, f.NodeByName("Hca1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := Attach(tr, sm.Config{Logger: quietLog(), Partitions: ps}, Config{})
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
	src := sn.PortByGUID(f.NodeByName("Hca3").PortGUID(1))
	dst := sn.PortByGUID(f.NodeByName("Hca4").PortGUID(1))
	if want := []uint16{0x7FFF, 0x8002}; !slices.Equal(src.PKeys[:2], want) {
		t.Fatalf("Hca3's P_Keys in the snapshot %#x, want %#x first", src.PKeys, want)
	}
	got := make(chan *fabric.Datagram, 4)
	cl, err := f.Attach(f.NodeByName("Hca3"), 1, func(d *fabric.Datagram) { got <- d })
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := make([]byte, mad.Size)
	q, _ := mad.NewSAMAD(b, mad.MethodGet, mad.SAAttrPathRecord, 7, &mad.SAHeader{ComponentMask: mad.PathRecCompSLID | mad.PathRecCompDLID})
	rec := mad.PathRecord{SLID: src.LID(), DLID: dst.LID()}
	rec.Encode(q.Data())
	if err := cl.Send(&fabric.Datagram{SLID: src.LID(), DLID: sn.SMLID, SQP: 1, DQP: 1, PKey: 0x7FFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		m, err := mad.ParseSA(d.MAD)
		if err != nil || m.MAD().Status() != 0 {
			t.Fatalf("PathRecord answer: %v, status %#x", err, m.MAD().Status())
		}
		r, _ := mad.ParsePathRecord(m.Data())
		if r.PKey != 0x8002 || r.SLID != src.LID() || r.DLID != dst.LID() {
			t.Errorf("PathRecord %+v: want P_Key 0x8002 (Blue)", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer from the SA")
	}
}
