package remote

// The tests' subnet manager: package sm's Manager over sm.FabricTransport,
// with a second client at the SM's port that sees the traps and can send
// directed-route SMPs of its own.

import (
	"fmt"
	"testing"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/smtest"
	"github.com/softrdma/softrdma/wire/mad"
)

// testSM is sm/smtest's SM: the Manager, and the monitor client at its
// port that every trap reaches too and that sends the tests' own SMPs.
type testSM struct{ *smtest.SM }

// newSM starts the SM at port of node; a heavy sweep only when a test
// asks for one (sweep).
func newSM(t testing.TB, f *fabric.Fabric, node string, port int) *testSM {
	t.Helper()
	return &testSM{smtest.New(t, f, node, port)}
}

// sweep runs one heavy sweep: every port gets its LID and goes ACTIVE.
func (s *testSM) sweep() *sm.Subnet { s.T.Helper(); return s.Sweep() }

// lidOf returns the LID the SM gave port 1 of the named CA.
func lidOf(t testing.TB, f *fabric.Fabric, sn *sm.Subnet, name string) uint16 {
	t.Helper()
	p := sn.PortByGUID(f.NodeByName(name).PortGUID(1))
	if p == nil {
		t.Fatalf("%s is not in the subnet", name)
	}
	return p.LID()
}

// setPortInfo reads the PortInfo at the end of path (port mod), lets
// change alter it, and sets it, by directed route from the SM's port.
func (s *testSM) setPortInfo(path []byte, mod uint32, change func(*mad.PortInfo)) {
	s.T.Helper()
	pi, err := mad.ParsePortInfo(s.dr(path, mad.MethodGet, mad.SMAttrPortInfo, mod, nil))
	if err != nil {
		s.T.Fatal(err)
	}
	change(&pi)
	b := make([]byte, 64)
	pi.Encode(b)
	s.dr(path, mad.MethodSet, mad.SMAttrPortInfo, mod, b)
}

// dr sends a directed-route SMP along path (from the SM's port) from the
// monitor client and returns the answer's data; a timeout or an error
// status fails the test.
func (s *testSM) dr(path []byte, method mad.Method, attr mad.AttributeID, mod uint32, data []byte) []byte {
	s.T.Helper()
	tid := s.NextTID()
	b := make([]byte, mad.Size)
	smp, err := mad.NewDirectedSMP(b, method, attr, mod, tid, append([]byte{0}, path...))
	if err != nil {
		s.T.Fatal(err)
	}
	copy(smp.Data(), data)
	if err := s.Mon.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b}); err != nil {
		s.T.Fatal(err)
	}
	d := s.Wait(fmt.Sprintf("%v along %v", method, path),
		func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).TransactionID() == tid })
	r := mad.SMP(d.MAD)
	if d.Status != 0 || r.Status() != 0 {
		s.T.Fatalf("%v along %v: status %d/%#x", method, path, d.Status, r.Status())
	}
	return append([]byte(nil), r.Data()...)
}

// waitTrap returns the next trap the SM's port receives.
func waitTrap(t testing.TB, s *testSM) *fabric.Datagram {
	t.Helper()
	return s.Wait("trap", func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).Method() == mad.MethodTrap })
}
