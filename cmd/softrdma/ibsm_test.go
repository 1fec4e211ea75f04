package main

// The tests' subnet: package sm's Manager over sm.FabricTransport at a CA
// port, and a management client beside it that reads the switches' PMAs.

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

type testSM struct {
	t   testing.TB
	m   *sm.Manager
	lid uint16 // the SM port's LID once swept
	mon *fabric.Client
	ch  chan *fabric.Datagram
	tid uint64
}

func newSM(t testing.TB, f *fabric.Fabric, node string, port int) *testSM {
	t.Helper()
	s := &testSM{t: t, ch: make(chan *fabric.Datagram, 64)}
	n := f.NodeByName(node)
	tr, err := sm.FabricTransport(f, n, port)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
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

// perf sends a PerfMgt Get of attr with data to dlid from the monitor
// client and returns the answer (Status set if the fabric dropped it).
func (s *testSM) perf(dlid uint16, attr mad.AttributeID, data []byte) *fabric.Datagram {
	s.t.Helper()
	s.tid++
	tid := s.tid | 0xabc<<32 // apart from the Manager's
	b := make([]byte, mad.Size)
	m := mad.MAD(b)
	b[0], b[2] = 1, 1
	m.SetMgmtClass(mad.ClassPerf)
	m.SetMethod(mad.MethodGet)
	m.SetTransactionID(tid)
	m.SetAttributeID(attr)
	copy(b[mad.PerfDataOffset:], data)
	if err := s.mon.Send(&fabric.Datagram{SLID: s.lid, DLID: dlid, DQP: 1, SQP: 1, PKey: 0xFFFF, QKey: mad.GSIQKey, MAD: b}); err != nil {
		s.t.Fatal(err)
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-s.ch:
			if mad.MAD(d.MAD).TransactionID() == tid {
				return d
			}
		case <-timer.C:
			s.t.Fatalf("%s to LID %d: no answer", mad.AttrName(mad.ClassPerf, attr), dlid)
			return nil
		}
	}
}
