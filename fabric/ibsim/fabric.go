package ibsim

import (
	"fmt"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/wire/mad"
)

// FabricBackend returns the Backend of a softrdma fabric: the server
// attaches its clients to f's ports and answers their control questions
// from f's SMAs.
func FabricBackend(f *fabric.Fabric) Backend { return fabricBackend{f} }

type fabricBackend struct{ f *fabric.Fabric }

func (b fabricBackend) Nodes() []Node {
	ns := b.f.Nodes()
	out := make([]Node, len(ns))
	for i, n := range ns {
		out[i] = n
	}
	return out
}

func node(n Node) (*fabric.Node, error) {
	fn, ok := n.(*fabric.Node)
	if !ok {
		return nil, fmt.Errorf("%w: %T is no fabric node", fabric.ErrNoNode, n)
	}
	return fn, nil
}

func (b fabricBackend) Query(n Node, attr uint16, mod uint32) ([]byte, error) {
	fn, err := node(n)
	if err != nil {
		return nil, err
	}
	return b.f.Query(fn, mad.AttributeID(attr), mod)
}

func (b fabricBackend) SetIsSM(n Node, port int, on bool) error {
	fn, err := node(n)
	if err != nil {
		return err
	}
	return b.f.SetIsSM(fn, port, on)
}

func (b fabricBackend) Attach(n Node, port int, deliver func(*Datagram)) (Port, error) {
	fn, err := node(n)
	if err != nil {
		return nil, err
	}
	c, err := b.f.Attach(fn, port, func(d *fabric.Datagram) {
		deliver(&Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, Status: d.Status, MAD: d.MAD})
	})
	if err != nil {
		return nil, err
	}
	return fabricPort{c}, nil
}

type fabricPort struct{ c *fabric.Client }

// Send passes the client's MAD on with the default P_Key, and QP1's Q_Key
// for a GMP: libumad2sim sends neither, as ibsim checks neither.
func (p fabricPort) Send(d *Datagram) error {
	fd := &fabric.Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, PKey: 0xffff, MAD: d.MAD}
	if d.DQP == 1 {
		fd.QKey = gsiQKey
	}
	return p.c.Send(fd)
}

const gsiQKey = 0x80010000

func (p fabricPort) Close() error { return p.c.Close() }
