// The subnet administrator of `softrdma fabric`: it answers on QP1 of a
// softrdma device on the SM's CA port, on the fabric's data plane, where
// the HCAs' SA queries (rdma_cm's PathRecord lookups) arrive by LID.

package main

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/link/ib"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/sm/sa"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire/mad"
)

// gsiTransport is the SA's sm.Transport over a cm.Manager's GSI QP: Send
// only; requests come in through cm.Options.GMP.
type gsiTransport struct {
	m atomic.Pointer[cm.Manager]
}

func (g *gsiTransport) Send(d *sm.Datagram) error {
	m := g.m.Load()
	if m == nil {
		return cm.ErrClosed
	}
	return m.SendGMP(cm.Path{DLID: d.DLID, SL: d.SL}, d.MAD)
}

func (g *gsiTransport) Recv(ctx context.Context) (*sm.Datagram, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (g *gsiTransport) Close() error { return nil }

// startFabricSA opens a device on the SM's port (node, port) of fab and
// serves the SA on its QP1 from src's snapshots. The returned function
// stops it.
func startFabricSA(fab *fabric.Fabric, node *fabric.Node, port int, src sa.Source, log *slog.Logger) (func(), error) {
	p, err := fab.ConnectHCA(node, port)
	if err != nil {
		return nil, err
	}
	l, err := ib.New(p)
	if err != nil {
		p.Close()
		return nil, err
	}
	d, err := verbs.Open(l, &verbs.Options{Name: "softrdma_sa", Logger: log})
	if err != nil {
		l.Close()
		return nil, err
	}
	g := &gsiTransport{}
	srv, err := sa.New(src, g, sa.Config{Logger: log})
	if err != nil {
		d.Close()
		return nil, err
	}
	m, err := cm.New(d, &cm.Options{Logger: log, GMP: func(from cm.Path, msg mad.MAD) {
		if msg.MgmtClass() != mad.ClassSubnAdm {
			return
		}
		var lid uint16
		if pa, err := d.QueryPort(1); err == nil {
			lid = pa.LID
		}
		srv.Handle(&sm.Datagram{SLID: from.DLID, DLID: lid, SQP: 1, DQP: 1, SL: from.SL, PKey: 0xFFFF,
			QKey: verbs.GSIQKey, MAD: msg})
	}})
	if err != nil {
		srv.Close()
		d.Close()
		return nil, err
	}
	g.m.Store(m)
	log.Info("fabric: subnet administrator", "node", node.Name(), "port", port)
	return func() {
		g.m.Store(nil)
		srv.Close()
		m.Close()
		d.Close()
	}, nil
}
