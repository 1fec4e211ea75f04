package sa

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/softrdma/softrdma/sm"
)

// SM is a subnet manager with its subnet administrator beside it, as
// Attach starts them: the Manager hands every SA MAD arriving at its port
// to the Server, which answers from the Manager's snapshots through the
// same Transport.
type SM struct {
	*sm.Manager
	SA *Server
}

// Attach starts a subnet manager on t with smCfg and an SA with cfg beside
// it (smCfg.GMP must be nil: Attach sets it to the Server's Handle), and
// makes the SA's multicast joins and leaves program the switches'
// multicast forwarding tables (Manager.SetMulticast; cfg.Multicast, if
// set, is called too). The
// Manager owns t; sweep it with Sweep or Run as usual. Close stops both.
// On error Attach closes t.
func Attach(t sm.Transport, smCfg sm.Config, cfg Config) (*SM, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil Transport", ErrConfig)
	}
	if smCfg.GMP != nil {
		t.Close()
		return nil, fmt.Errorf("%w: sm.Config.GMP is set; Attach sets it to the SA", ErrConfig)
	}
	// sa.New needs the Manager as its Source and sm.New needs GMP: the
	// closure reads the Server once it exists (MADs before are dropped).
	var srv atomic.Pointer[Server]
	smCfg.GMP = func(d *sm.Datagram) {
		if s := srv.Load(); s != nil {
			s.Handle(d)
		}
	}
	smCfg.Notice = forwardTraps(&srv, smCfg.Notice) // inform.go
	m, err := sm.New(t, smCfg)
	if err != nil {
		t.Close()
		return nil, err
	}
	// Membership changes go to the SM, which programs the switches' MFTs
	// on its own goroutine (SetMulticast does not block).
	hook := cfg.Multicast
	cfg.Multicast = func(mlid uint16, members []*sm.Port) {
		m.SetMulticast(mlid, members)
		if hook != nil {
			hook(mlid, members)
		}
	}
	s, err := New(m, t, cfg)
	if err != nil {
		m.Close()
		return nil, err
	}
	srv.Store(s)
	s.watch() // Reports of traps 64 and 65 (inform.go)
	return &SM{Manager: m, SA: s}, nil
}

// Close stops the SA's transfers, then the Manager (which closes its
// Transport).
func (x *SM) Close() error {
	return errors.Join(x.SA.Close(), x.Manager.Close())
}
