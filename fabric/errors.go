package fabric

import "errors"

// Errors the package wraps; test with errors.Is.
var (
	// ErrTopology means a topology file could not be parsed or does not
	// describe a consistent fabric.
	ErrTopology = errors.New("fabric: bad topology")
	// ErrNoNode means a node is nil or belongs to another fabric.
	ErrNoNode = errors.New("fabric: no such node")
	// ErrNoPort means a port number is out of range for its node, or the
	// port cannot be used so (a switch's external port for a client).
	ErrNoPort = errors.New("fabric: no such port")
	// ErrClosed means the fabric or the client is closed.
	ErrClosed = errors.New("fabric: closed")
	// ErrBadMAD means a datagram's MAD is not a well-formed MAD.
	ErrBadMAD = errors.New("fabric: bad MAD")
	// ErrBusy means the fabric's queue is full; the datagram was not sent.
	ErrBusy = errors.New("fabric: queue full")
	// ErrAttribute means the SMA does not answer the attribute (Query).
	ErrAttribute = errors.New("fabric: attribute not supported")
)
