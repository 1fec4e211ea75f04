package smtest

import (
	"os"
	"testing"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/wire/mad"
)

// TestSM: the SM sweeps the fabric from Hca1, and the monitor beside it
// gets the answer to its own directed-route SMP with the TID NextTID gave.
func TestSM(t *testing.T) {
	fh, err := os.Open("../../fabric/testdata/net.2sw2path4hca")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := fabric.ParseTopology(fh, "net.2sw2path4hca")
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := New(t, f, "Hca1", 1)
	sn := s.Sweep()
	if s.LID == 0 || s.LID != sn.SMLID || len(sn.Nodes) != 6 {
		t.Fatalf("LID %d, snapshot SM LID %d, %d nodes", s.LID, sn.SMLID, len(sn.Nodes))
	}
	tid := s.NextTID()
	if tid == s.NextTID() {
		t.Error("NextTID repeats")
	}
	b := make([]byte, mad.Size)
	if _, err := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrNodeInfo, 0, tid, []byte{0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Mon.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b}); err != nil {
		t.Fatal(err)
	}
	d := s.Wait("NodeInfo of Switch1", func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).TransactionID() == tid })
	ni, err := mad.ParseNodeInfo(mad.SMP(d.MAD).Data())
	if err != nil || ni.NodeType != mad.NodeTypeSwitch {
		t.Errorf("NodeInfo along [1]: %+v %v", ni, err)
	}
}
