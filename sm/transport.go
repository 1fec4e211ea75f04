package sm

import "context"

// Datagram is a MAD with the addressing it travels with: what the SM (or the
// SA beside it) sends and receives through its Port.
type Datagram struct {
	SLID, DLID uint16 // directed-route SMPs: DLID permissive (0xFFFF)
	SQP, DQP   uint32 // 0 (SMPs) or 1 (GMPs)
	SL         uint8
	PKey       uint16
	QKey       uint32
	// Status is 0, or nonzero for a request the fabric reports it could not
	// deliver (the request comes back with its MAD unchanged).
	Status int
	MAD    []byte // 256 bytes
}

// Transport is the management port the SM runs on: QP0 and QP1 of one CA port
// (or of a switch's port 0). Send is safe for concurrent use; Recv has one
// caller at a time and returns every MAD that arrives for the port (responses,
// traps, requests for QP1), until ctx ends or the port is closed.
type Transport interface {
	Send(d *Datagram) error
	Recv(ctx context.Context) (*Datagram, error)
	Close() error
}
