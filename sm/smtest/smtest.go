// Package smtest runs softrdma's subnet manager on an in-process fabric for
// tests: a Manager over sm.FabricTransport at a port, and a monitor client
// attached beside it at the same port that sees what reaches the port
// (answers, traps) and sends the test's own MADs.
package smtest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
)

// SM is a Manager at a fabric port with a monitor client beside it.
// Cleanup (testing.TB.Cleanup) closes both.
type SM struct {
	T       testing.TB
	Fabric  *fabric.Fabric
	Manager *sm.Manager
	// LID is the SM port's LID once Sweep has run.
	LID uint16
	// Mon is the monitor client at the SM's port; C receives what reaches
	// it (dropped when 64 are waiting).
	Mon *fabric.Client
	C   chan *fabric.Datagram
	tid uint64
}

// New starts a Manager at port of the node named node (heavy sweeps only
// when the test calls Sweep) and attaches the monitor client; a failure
// fails the test.
func New(t testing.TB, f *fabric.Fabric, node string, port int) *SM {
	t.Helper()
	return NewConfig(t, f, node, port, sm.Config{})
}

// NewConfig is New with the Manager configured by cfg; a zero
// SweepInterval becomes an hour (sweeps when the test asks) and a nil
// Logger discards.
func NewConfig(t testing.TB, f *fabric.Fabric, node string, port int, cfg sm.Config) *SM {
	t.Helper()
	s := &SM{T: t, Fabric: f, C: make(chan *fabric.Datagram, 64)}
	n := f.NodeByName(node)
	tr, err := sm.FabricTransport(f, n, port)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Hour
	}
	if s.Manager, err = sm.New(tr, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Manager.Close() })
	s.Mon, err = f.Attach(n, port, func(d *fabric.Datagram) {
		select {
		case s.C <- d:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Mon.Close() })
	return s
}

// Sweep runs one heavy sweep (every port gets its LID and goes ACTIVE),
// sets LID and returns the snapshot.
func (s *SM) Sweep() *sm.Subnet {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Manager.Sweep(ctx); err != nil {
		s.T.Fatal(err)
	}
	sn := s.Manager.Subnet()
	s.LID = sn.SMLID
	return sn
}

// NextTID returns a transaction ID for the monitor's next MAD, apart from
// the Manager's.
func (s *SM) NextTID() uint64 {
	s.tid++
	return s.tid | 0xabc<<32
}

// Wait returns the next datagram at the SM's port that match accepts,
// failing the test (naming what) after 10 seconds.
func (s *SM) Wait(what string, match func(*fabric.Datagram) bool) *fabric.Datagram {
	s.T.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case d := <-s.C:
			if match(d) {
				return d
			}
		case <-timer.C:
			s.T.Fatalf("%s: nothing arrived", what)
			return nil
		}
	}
}
