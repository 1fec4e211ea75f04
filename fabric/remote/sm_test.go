package remote

// The tests' subnet manager: package sm's Manager over sm.FabricTransport,
// with a second client at the SM's port that sees the traps and can send
// directed-route SMPs of its own.

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

type testSM struct {
	t   testing.TB
	f   *fabric.Fabric
	m   *sm.Manager
	lid uint16 // the SM port's LID once swept
	// mon is a client beside the SM at its port: every trap reaches it too,
	// and it sends the tests' own SMPs.
	mon *fabric.Client
	ch  chan *fabric.Datagram
	tid uint64
}

func newSM(t testing.TB, f *fabric.Fabric, node string, port int) *testSM {
	t.Helper()
	s := &testSM{t: t, f: f, ch: make(chan *fabric.Datagram, 64)}
	n := f.NodeByName(node)
	tr, err := sm.FabricTransport(f, n, port)
	if err != nil {
		t.Fatal(err)
	}
	// A heavy sweep only when a test asks for one (sweep).
	if s.m, err = sm.New(tr, sm.Config{Logger: quiet, SweepInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.m.Close() })
	s.mon, err = f.Attach(n, port, func(d *fabric.Datagram) {
		select {
		case s.ch <- d:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.mon.Close() })
	return s
}

// sweep runs one heavy sweep: every port gets its LID and goes ACTIVE.
func (s *testSM) sweep() *sm.Subnet {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.m.Sweep(ctx); err != nil {
		s.t.Fatal(err)
	}
	sn := s.m.Subnet()
	s.lid = sn.SMLID
	return sn
}

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
	s.t.Helper()
	pi, err := mad.ParsePortInfo(s.dr(path, mad.MethodGet, mad.SMAttrPortInfo, mod, nil))
	if err != nil {
		s.t.Fatal(err)
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
	s.t.Helper()
	s.tid++
	tid := s.tid | 0xabc<<32 // apart from the Manager's
	b := make([]byte, mad.Size)
	smp, err := mad.NewDirectedSMP(b, method, attr, mod, tid, append([]byte{0}, path...))
	if err != nil {
		s.t.Fatal(err)
	}
	copy(smp.Data(), data)
	if err := s.mon.Send(&fabric.Datagram{SLID: mad.PermissiveLID, DLID: mad.PermissiveLID, PKey: 0xFFFF, MAD: b}); err != nil {
		s.t.Fatal(err)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-s.ch:
			if mad.MAD(d.MAD).TransactionID() != tid {
				continue
			}
			r := mad.SMP(d.MAD)
			if d.Status != 0 || r.Status() != 0 {
				s.t.Fatalf("%v along %v: status %d/%#x", method, path, d.Status, r.Status())
			}
			return append([]byte(nil), r.Data()...)
		case <-timer.C:
			s.t.Fatalf("%v along %v: no answer", method, path)
			return nil
		}
	}
}

// waitTrap returns the next trap the SM's port receives.
func waitTrap(t testing.TB, s *testSM) *fabric.Datagram {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-s.ch:
			if mad.MAD(d.MAD).Method() == mad.MethodTrap {
				return d
			}
		case <-timer.C:
			t.Fatal("no trap")
			return nil
		}
	}
}
