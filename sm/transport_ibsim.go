package sm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/softrdma/softrdma/fabric/ibsim"
)

// ibsimTransport is a Transport over ibsim's client protocol.
type ibsimTransport struct {
	c    *ibsim.Client
	done chan struct{}
	once sync.Once
}

// IbsimTransport connects to an ibsim server (Linux ibsim, or softrdma's
// fabric served by package fabric/ibsim) as an SM client (cfg.IsSM is set
// whatever the caller gave), sets its port's IsSM capability bit, and returns the connection as a Transport.
// ibsim marks the top 16 bits of a request's transaction ID with the
// client's slot; the Manager matches responses on the low 48 bits.
func IbsimTransport(ctx context.Context, cfg ibsim.ClientConfig) (Transport, error) {
	cfg.IsSM = true
	c, err := ibsim.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The IsSM capability bit of the port, so that other SMs find this one
	// (libumad2sim sets it the same way for OpenSM).
	var on [4]byte
	binary.NativeEndian.PutUint32(on[:], 1)
	if _, err := c.Ctl(ctx, ibsim.CtlSetIsSM, on[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("sm: setting IsSM: %w", err)
	}
	return &ibsimTransport{c: c, done: make(chan struct{})}, nil
}

func (t *ibsimTransport) Send(d *Datagram) error {
	select {
	case <-t.done:
		return ErrClosed
	default:
	}
	r := &ibsim.Request{DLID: d.DLID, SLID: d.SLID, DQP: d.DQP, SQP: d.SQP, Length: ibsim.MADSize}
	copy(r.MAD[:], d.MAD)
	return t.c.Send(r)
}

func (t *ibsimTransport) Recv(ctx context.Context) (*Datagram, error) {
	for {
		select {
		case <-t.done:
			return nil, ErrClosed
		default:
		}
		// The client's Recv gives up after a few seconds without a
		// deadline: wait again until ctx ends.
		r, err := t.c.Recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			select {
			case <-t.done:
				return nil, ErrClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() ||
				errors.Is(err, ibsim.ErrTruncated) || errors.Is(err, ibsim.ErrTooLong) {
				continue // a quiet spell, or a malformed datagram dropped
			}
			return nil, err
		}
		return &Datagram{SLID: r.SLID, DLID: r.DLID, SQP: r.SQP, DQP: r.DQP, PKey: 0xFFFF,
			Status: int(r.Status), MAD: append([]byte(nil), r.MAD[:]...)}, nil
	}
}

func (t *ibsimTransport) Close() error {
	err := ErrClosed
	t.once.Do(func() {
		close(t.done)
		err = t.c.Close()
	})
	return err
}
