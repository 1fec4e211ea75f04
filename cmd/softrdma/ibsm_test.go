package main

// The tests' subnet: package sm's Manager over sm.FabricTransport at a CA
// port, and a management client beside it that reads the switches' PMAs.

import (
	"fmt"
	"testing"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/smtest"
	"github.com/softrdma/softrdma/wire/mad"
)

// testSM is sm/smtest's SM: the Manager and the monitor client beside it.
type testSM struct{ *smtest.SM }

func newSM(t testing.TB, f *fabric.Fabric, node string, port int) *testSM {
	t.Helper()
	return &testSM{smtest.New(t, f, node, port)}
}

// sweep runs one heavy sweep: every port gets its LID and goes ACTIVE.
func (s *testSM) sweep() *sm.Subnet { s.T.Helper(); return s.Sweep() }

// perf sends a PerfMgt Get of attr with data to dlid from the monitor
// client and returns the answer (Status set if the fabric dropped it).
func (s *testSM) perf(dlid uint16, attr mad.AttributeID, data []byte) *fabric.Datagram {
	s.T.Helper()
	tid := s.NextTID()
	b := make([]byte, mad.Size)
	m := mad.MAD(b)
	b[0], b[2] = 1, 1
	m.SetMgmtClass(mad.ClassPerf)
	m.SetMethod(mad.MethodGet)
	m.SetTransactionID(tid)
	m.SetAttributeID(attr)
	copy(b[mad.PerfDataOffset:], data)
	if err := s.Mon.Send(&fabric.Datagram{SLID: s.LID, DLID: dlid, DQP: 1, SQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		s.T.Fatal(err)
	}
	return s.Wait(fmt.Sprintf("%s to LID %d", mad.AttrName(mad.ClassPerf, attr), dlid),
		func(d *fabric.Datagram) bool { return mad.MAD(d.MAD).TransactionID() == tid })
}
