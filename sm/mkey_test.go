package sm_test

import (
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/smtest"
	"github.com/softrdma/softrdma/wire/mad"
)

// TestMKeyProtection: the SM gives every CA port and switch port 0 its
// M_Key with protect bits 2 and sweeps with it; an SMP without the key
// (here a Get, which protect bits 2 refuse) is dropped by the port,
// counted in its MKeyViolations, and reported by trap 256 that the SM
// counts; the same SMP with the key is answered; and a second sweep finds
// nothing to set.
func TestMKeyProtection(t *testing.T) {
	fh, err := os.Open("../fabric/testdata/net.2sw2path4hca")
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
	const key = 0x5eed0000cafe
	s := smtest.NewConfig(t, f, "Hca1", 1, sm.Config{MKey: key, MKeyProtectBits: 2, MKeyLeasePeriod: 60})
	sn := s.Sweep()
	pi := func(name string) mad.PortInfo {
		b, err := f.Query(f.NodeByName(name), mad.SMAttrPortInfo, 1)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := mad.ParsePortInfo(b)
		return x
	}
	for _, n := range []string{"Hca1", "Hca2", "Hca3", "Hca4"} {
		if x := pi(n); x.MKey != key || x.MKeyProtectBits != 2 || x.MKeyLeasePeriod != 60 {
			t.Errorf("%s: M_Key %#x, protect %d, lease %d", n, x.MKey, x.MKeyProtectBits, x.MKeyLeasePeriod)
		}
	}
	hca2 := sn.PortByGUID(f.NodeByName("Hca2").PortGUID(1))
	get := func(mkey uint64) uint64 {
		tid := s.NextTID()
		b := make([]byte, mad.Size)
		smp, err := mad.NewDirectedSMP(b, mad.MethodGet, mad.SMAttrPortInfo, 1, tid, append([]byte{0}, hca2.Path...))
		if err != nil {
			t.Fatal(err)
		}
		smp.SetMKey(mkey)
		if err := s.Mon.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b}); err != nil {
			t.Fatal(err)
		}
		return tid
	}
	before := pi("Hca2").MKeyViolations
	tid := get(0)
	dropped := false
	d := s.Wait("trap 256", func(d *fabric.Datagram) bool {
		m := mad.MAD(d.MAD)
		if m.TransactionID() == tid {
			// The fabric hands a dropped MAD back to its sender with a
			// Status, as the MAD layer reports a send that timed out.
			if d.Status == 0 {
				t.Fatalf("a Get without the M_Key was answered: status %#x", mad.SMP(d.MAD).Status())
			}
			dropped = true
		}
		return m.Method() == mad.MethodTrap
	})
	nt, _ := mad.ParseNotice(mad.SMP(d.MAD).Data())
	bad := nt.BadMKey()
	if nt.TrapNumber != mad.TrapBadMKey || nt.Type != mad.NoticeTypeSecurity || bad.LID != hca2.LID() || bad.Method != mad.MethodGet ||
		bad.AttributeID != mad.SMAttrPortInfo || bad.MKey != 0 || !bad.DRNotice || int(bad.DRHopCount) != len(hca2.Path) {
		t.Errorf("trap %d from LID %d: %+v", nt.TrapNumber, nt.IssuerLID, bad)
	}
	if !dropped {
		// The drop notice may follow the trap.
		s.Wait("the drop of the Get", func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).TransactionID() == tid && d.Status != 0 })
	}
	if got := pi("Hca2").MKeyViolations; got != before+1 {
		t.Errorf("MKeyViolations %d, want %d", got, before+1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Manager.Stats().BadMKey == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the SM did not count trap 256")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// With the key: answered, the M_Key shown.
	tid = get(key)
	d = s.Wait("PortInfo with the M_Key", func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).TransactionID() == tid })
	if x, _ := mad.ParsePortInfo(mad.SMP(d.MAD).Data()); mad.SMP(d.MAD).Status() != 0 || x.MKey != key {
		t.Errorf("Get with the M_Key: status %#x, M_Key %#x", mad.SMP(d.MAD).Status(), x.MKey)
	}
	// The SM's own SMPs carry the key: a second sweep sets nothing.
	s.Sweep()
	if st := s.Manager.Stats(); st.LastSets != 0 {
		t.Errorf("second sweep: %d Sets", st.LastSets)
	}
}
