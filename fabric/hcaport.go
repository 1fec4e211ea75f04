package fabric

// The HCA port types of package link/ib (ib.Port, ib.PortAttr), as the
// contract of issue 10 fixes them. Until link/ib is merged into this
// branch they are spelled out here; the aliases then point at link/ib's
// types and nothing else changes.

// hcaPortIface is what ConnectHCA returns: ib.Port.
type hcaPortIface = interface {
	Send(pkts [][]byte) error
	Start(recv func(pkts [][]byte)) error
	Attr() hcaPortAttr
	NotifyAttr(f func())
	Close() error
}

// hcaPortAttr is ib.PortAttr.
type hcaPortAttr = struct {
	LID, SMLID uint16
	LMC, SMSL  uint8
	State      uint8
	PhysState  uint8
	MTU        int
	OperVLs    int
	GIDPrefix  uint64
	PortGUID   uint64
	PKeys      []uint16
	SL2VL      [16]uint8
}
