package sm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/softrdma/softrdma/fabric"
)

// ErrClosed is returned by a closed Transport or Manager.
var ErrClosed = errors.New("sm: closed")

// ErrConfig means a Config or a Transport's arguments are unusable.
var ErrConfig = errors.New("sm: bad configuration")

// fabricQueue bounds the datagrams a fabric transport holds for Recv; what
// arrives beyond it is dropped (and counted), as a full receive queue of a
// real QP0 would.
const fabricQueue = 4096

// fabricTransport is a Transport attached to a port of softrdma's
// in-process fabric.
type fabricTransport struct {
	f    *fabric.Fabric
	n    *fabric.Node
	port int
	c    *fabric.Client
	ch   chan *Datagram
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	drop uint64
}

// FabricTransport attaches a management client at port of n (a CA port, or
// port 0 of a switch) of the in-process fabric f, sets the port's IsSM
// capability bit, and returns it as a Transport. Close clears IsSM and
// detaches.
func FabricTransport(f *fabric.Fabric, n *fabric.Node, port int) (Transport, error) {
	if f == nil || n == nil {
		return nil, fmt.Errorf("%w: FabricTransport needs a fabric and a node", ErrConfig)
	}
	t := &fabricTransport{f: f, n: n, port: port, ch: make(chan *Datagram, fabricQueue), done: make(chan struct{})}
	c, err := f.Attach(n, port, t.deliver)
	if err != nil {
		return nil, err
	}
	t.c = c
	if err := f.SetIsSM(n, port, true); err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

// deliver runs on the fabric's goroutine: it must not block.
func (t *fabricTransport) deliver(d *fabric.Datagram) {
	sd := &Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, SL: d.SL, PKey: d.PKey, QKey: d.QKey,
		Status: d.Status, MAD: d.MAD}
	select {
	case t.ch <- sd:
	default:
		t.mu.Lock()
		t.drop++
		t.mu.Unlock()
	}
}

func (t *fabricTransport) Send(d *Datagram) error {
	select {
	case <-t.done:
		return ErrClosed
	default:
	}
	return t.c.Send(&fabric.Datagram{SLID: d.SLID, DLID: d.DLID, SQP: d.SQP, DQP: d.DQP, SL: d.SL,
		PKey: d.PKey, QKey: d.QKey, MAD: d.MAD})
}

func (t *fabricTransport) Recv(ctx context.Context) (*Datagram, error) {
	select {
	case d := <-t.ch:
		return d, nil
	case <-t.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *fabricTransport) Close() error {
	err := ErrClosed
	t.once.Do(func() {
		close(t.done)
		t.f.SetIsSM(t.n, t.port, false)
		err = t.c.Close()
	})
	return err
}
