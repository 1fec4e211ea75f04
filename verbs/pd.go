// Protection domains, memory regions and address handles: the objects that
// scope which QPs may touch which memory and where UD packets go.

package verbs

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/mem"
	"github.com/softrdma/softrdma/link"
	"github.com/softrdma/softrdma/wire"
)

// PD is a protection domain.
type PD struct {
	dev  *Device
	id   mem.PD
	refs atomic.Int32 // MRs, QPs, SRQs and AHs created in it
	mu   sync.Mutex
	dead bool
}

var pdIDs atomic.Uint32

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errf(ErrClosed, "device %s", d.name)
	}
	if d.nPD >= MaxPD {
		return nil, errf(ErrLimit, "%d PDs", MaxPD)
	}
	d.nPD++
	return &PD{dev: d, id: mem.PD(pdIDs.Add(1))}, nil
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc frees the PD. It fails with ErrBusy while MRs, QPs, SRQs or AHs
// created in it exist.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return errf(ErrClosed, "PD already deallocated")
	}
	if n := pd.refs.Load(); n > 0 {
		return errf(ErrBusy, "PD still has %d objects", n)
	}
	pd.dead = true
	pd.dev.mu.Lock()
	pd.dev.nPD--
	pd.dev.mu.Unlock()
	return nil
}

func (pd *PD) hold() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return errf(ErrClosed, "PD deallocated")
	}
	pd.refs.Add(1)
	return nil
}

func (pd *PD) release() { pd.refs.Add(-1) }

// MR is a registered memory region.
type MR struct {
	pd     *PD
	m      *mem.MR
	devMem bool
	mu     sync.Mutex
	dead   bool
}

// RegMR registers buf for access by the device with the given permissions.
// The region's address (Addr) is the address of buf[0], as with ibv_reg_mr.
// buf must stay reachable and must not be resliced by the caller's
// expectations while registered: the device reads and writes it directly.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.regMR(buf, access, false, nil)
}

// AllocMR allocates n bytes of page-aligned memory outside the Go heap and
// registers it. Dereg frees it.
func (pd *PD) AllocMR(n int, access Access) (*MR, error) {
	if n <= 0 || n > MaxMRSize {
		return nil, errf(ErrInvalid, "MR size %d", n)
	}
	buf, err := mem.Alloc(n)
	if err != nil {
		return nil, errf(ErrLimit, "allocating %d bytes: %v", n, err)
	}
	mr, err := pd.regMR(buf, access, true, nil)
	if err != nil {
		_ = mem.Free(buf)
	}
	return mr, err
}

// regMR registers buf; devMem says Dereg unmaps it (AllocMR, RegFile), and
// persist, if not nil, makes a part of it persistent (RegFile).
func (pd *PD) regMR(buf []byte, access Access, devMem bool, persist func([]byte) error) (*MR, error) {
	if len(buf) == 0 {
		return nil, errf(ErrInvalid, "empty buffer")
	}
	if err := pd.hold(); err != nil {
		return nil, err
	}
	d := pd.dev
	d.mu.Lock()
	if d.nMR >= MaxMR {
		d.mu.Unlock()
		pd.release()
		return nil, errf(ErrLimit, "%d MRs", MaxMR)
	}
	d.nMR++
	d.mu.Unlock()
	m, err := d.mrs.RegisterPersist(pd.id, buf, 0, true, mem.Access(access), persist)
	if err != nil {
		d.mu.Lock()
		d.nMR--
		d.mu.Unlock()
		pd.release()
		return nil, errf(ErrInvalid, "%v", err)
	}
	return &MR{pd: pd, m: m, devMem: devMem}, nil
}

// Buf returns the registered memory.
func (mr *MR) Buf() []byte { return mr.m.Buf }

// Addr returns the region's start address as peers and SGEs name it.
func (mr *MR) Addr() uint64 { return mr.m.VA }

// Len returns the region's length.
func (mr *MR) Len() int { return len(mr.m.Buf) }

// LKey returns the local key.
func (mr *MR) LKey() wire.LKey { return mr.m.LKey }

// RKey returns the remote key.
func (mr *MR) RKey() wire.RKey { return mr.m.RKey }

// Access returns the region's permissions.
func (mr *MR) Access() Access { return Access(mr.m.Access) }

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// SGE returns a scatter/gather element covering [off, off+n) of the region.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.m.VA + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// Dereg deregisters the region. Its keys stop working at once. It fails with
// ErrClosed if the region is already deregistered, and with ErrBusy while
// memory windows are bound to it (Linux rxe refuses with EINVAL: IBTA
// 10.6.7.2.6).
func (mr *MR) Dereg() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dead {
		return errf(ErrClosed, "MR already deregistered")
	}
	if err := mr.pd.dev.mrs.Deregister(mr.m); err != nil {
		return errf(ErrBusy, "%v", err)
	}
	mr.dead = true
	if mr.devMem {
		_ = mem.Free(mr.m.Buf)
	}
	d := mr.pd.dev
	d.mu.Lock()
	d.nMR--
	d.mu.Unlock()
	mr.pd.release()
	return nil
}

// SGE is a scatter/gather element (ibv_sge): Length bytes at Addr in the
// region with local key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   wire.LKey
}

func (s SGE) mem() mem.SGE { return mem.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey} }

// appendSGL converts an SGL to the engine's form, appending to dst.
func appendSGL(dst []mem.SGE, sgl []SGE) []mem.SGE {
	for _, s := range sgl {
		dst = append(dst, s.mem())
	}
	return dst
}

func sglLen(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}

// AHAttr is an address vector (ibv_ah_attr with its GRH).
type AHAttr struct {
	DGID         wire.GID // destination GID
	SGIDIndex    int      // index of the source GID in the device's table
	FlowLabel    uint32
	HopLimit     uint8
	TrafficClass uint8
	SL           uint8
	DLID         uint16 // unused on RoCE
	PortNum      int
	// IsGlobal says an InfiniBand packet carries a GRH (DGID, SGIDIndex,
	// FlowLabel, HopLimit, TrafficClass); without it the packet is routed
	// by DLID alone. SrcPathBits are the low LMC bits of the source LID,
	// and StaticRate the IBTA rate code (recorded, not enforced). RoCE
	// ignores the three: its packets are always global.
	IsGlobal    bool
	SrcPathBits uint8
	StaticRate  uint8
}

// AH is an address handle for UD sends.
type AH struct {
	pd    *PD
	attr  AHAttr
	src   netip.Addr
	dst   netip.AddrPort
	ib    link.IBAddr // InfiniBand addressing (ibport.go)
	mcast bool        // DGID is a multicast GID: sends go to DestQP 0xFFFFFF
	dead  atomic.Bool
}

// CreateAH creates an address handle. An AH whose DGID is a multicast GID
// (IsMulticastGID) sends to the group's IP address, with DestQP 0xFFFFFF
// as IBTA requires of multicast packets, whatever the work request's
// RemoteQPN.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	src, dst, ib, err := pd.dev.resolve(&attr)
	if err != nil {
		return nil, err
	}
	if err := pd.hold(); err != nil {
		return nil, err
	}
	mcast := IsMulticastGID(attr.DGID)
	if pd.dev.ib != nil {
		mcast = isMulticastLID(attr.DLID)
	}
	return &AH{pd: pd, attr: attr, src: src, dst: dst, ib: ib, mcast: mcast}, nil
}

// Attr returns the address vector.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Destroy frees the address handle.
func (ah *AH) Destroy() error {
	if ah.dead.Swap(true) {
		return errf(ErrClosed, "AH already destroyed")
	}
	ah.pd.release()
	return nil
}

// resolve turns an address vector into the link's source address and the
// destination UDP endpoint, or on an InfiniBand port into LID addressing
// (resolveIB).
func (d *Device) resolve(a *AHAttr) (netip.Addr, netip.AddrPort, link.IBAddr, error) {
	if a.PortNum != 0 && a.PortNum != 1 {
		return netip.Addr{}, netip.AddrPort{}, link.IBAddr{}, errf(ErrInvalid, "port %d", a.PortNum)
	}
	if d.ib != nil {
		return d.resolveIB(a)
	}
	src, dst, err := d.resolveRoCE(a)
	return src, dst, link.IBAddr{}, err
}

// resolveRoCE resolves a RoCE address vector.
func (d *Device) resolveRoCE(a *AHAttr) (netip.Addr, netip.AddrPort, error) {
	if a.SGIDIndex < 0 || a.SGIDIndex >= len(d.gids) {
		return netip.Addr{}, netip.AddrPort{}, errf(ErrInvalid, "source GID index %d (table has %d)", a.SGIDIndex, len(d.gids))
	}
	src := d.gids[a.SGIDIndex].Addr()
	dst := a.DGID.Addr()
	if !dst.IsValid() || dst.IsUnspecified() {
		return netip.Addr{}, netip.AddrPort{}, errf(ErrInvalid, "destination GID %v", a.DGID)
	}
	if src.Is4() != dst.Is4() {
		return netip.Addr{}, netip.AddrPort{}, errf(ErrInvalid, "source GID %v and destination GID %v differ in IP version", d.gids[a.SGIDIndex], a.DGID)
	}
	return src, netip.AddrPortFrom(dst, d.rport), nil
}
