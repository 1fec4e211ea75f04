// Package ib is the InfiniBand link layer of a softrdma device: a link.Link
// whose port is an IB HCA port instead of a RoCEv2 UDP endpoint.
//
// A Port is the far side of the HCA port: the subnet it is cabled to (a
// switch port of a fabric, or another HCA through Cable). It carries whole
// IB packets, LRH through VCRC, and reports the port's management state as
// the subnet manager set it (PortAttr). New wraps a Port in a link.Link: on
// send it frames each transport packet the device built with an LRH (VL from
// the port's SL2VL table, VL15 for QP0, SLID = LID | path bits), a GRH when
// the packet is global, the IB ICRC and the VCRC; on receive it checks what
// an HCA port checks (VCRC, link version, length, DLID, ICRC, P_Key, VL15
// only for QP0, the port state) and drops and counts each failure by reason
// in link.Stats. It implements link.InfiniBand (the port's attributes and
// their changes) and link.StateNotifier (up while the port is Active).
package ib

import (
	"errors"
	"slices"

	"github.com/softrdma/softrdma/link"
)

// Port is the far side of an InfiniBand HCA port: the subnet it is cabled to.
//
// Link calls Send with frames it reuses once Send returns, so a Port must
// not keep the slices (Cable copies them). Start is called once. The
// function given to NotifyAttr calls Attr, so a Port calls it without
// holding the lock Attr takes.
type Port interface {
	// Send transmits whole IB packets (LRH through VCRC, sealed).
	Send(pkts [][]byte) error
	// Start delivers received whole IB packets to recv (called from the
	// port's goroutine; the slices are valid only during the call).
	Start(recv func(pkts [][]byte)) error
	// Attr returns the port's management state as the subnet's SM set it.
	Attr() PortAttr
	// NotifyAttr registers f, called after each change of Attr (nil removes).
	NotifyAttr(f func())
	Close() error
}

// PortAttr is an HCA port's management state (the PortInfo, P_Key table
// and SL-to-VL table an SM programs).
type PortAttr struct {
	LID, SMLID uint16
	LMC, SMSL  uint8
	State      uint8 // mad.PortState* values: 1 Down, 2 Init, 3 Armed, 4 Active
	PhysState  uint8
	MTU        int // active MTU in bytes (256..4096)
	OperVLs    int
	GIDPrefix  uint64
	PortGUID   uint64
	PKeys      []uint16
	SL2VL      [16]uint8
}

// Port states, as PortAttr.State holds them.
const (
	StateDown   = link.IBPortDown
	StateInit   = link.IBPortInit
	StateArmed  = link.IBPortArmed
	StateActive = link.IBPortActive
)

// Physical port states (PortInfo PortPhysicalState) used by Cable.
const (
	PhysSleep    = 1
	PhysPolling  = 2
	PhysDisabled = 3
	PhysLinkUp   = 5
)

// LID ranges.
const (
	// MulticastLIDMin and MulticastLIDMax bound the multicast LIDs.
	MulticastLIDMin = 0xC000
	MulticastLIDMax = 0xFFFE
	// PermissiveLID addresses any port (directed-route SMPs).
	PermissiveLID = 0xFFFF
)

// Errors of the package.
var (
	// ErrClosed is returned by a closed Port or Link (it wraps
	// link.ErrClosed).
	ErrClosed = link.ErrClosed
	// ErrStarted is returned by a second Start.
	ErrStarted = link.ErrStarted
	// ErrPort is returned for a Port that cannot be used.
	ErrPort = errors.New("ib: bad port")
)

// Clone returns a copy of a whose P_Key table does not share a's.
func (a PortAttr) Clone() PortAttr {
	a.PKeys = slices.Clone(a.PKeys)
	return a
}

// linkAttr converts a to the link package's form.
func (a PortAttr) linkAttr() link.IBAttr {
	prefix := a.GIDPrefix
	if prefix == 0 {
		prefix = link.DefaultGIDPrefix
	}
	return link.IBAttr{
		LID: a.LID, SMLID: a.SMLID, LMC: a.LMC, SMSL: a.SMSL, State: a.State,
		PhysState: a.PhysState, MTU: a.MTU, OperVLs: a.OperVLs,
		GIDPrefix: prefix, PortGUID: a.PortGUID, PKeys: slices.Clone(a.PKeys),
	}
}
