// The subnet management packet (SMP): the 256-byte MAD of the subnet
// management classes, LID-routed (class 0x01) or directed-route (class 0x81),
// as IBTA volume 1 section 14.2.1 lays it out.

package mad

import "fmt"

// PermissiveLID is the permissive LID, 0xFFFF: as an LRH DLID it addresses
// whichever port receives the packet; in a directed-route SMP's DrSLID or
// DrDLID it says the directed-route part reaches that end of the path.
const PermissiveLID = 0xFFFF

// Sizes and offsets of the parts of an SMP.
const (
	SMPDataOffset   = 64  // the 64-byte SMP data (attribute)
	SMPDataSize     = 64  // size of the SMP data
	SMPPathOffset   = 128 // directed route: the initial path
	SMPRPathOffset  = 192 // directed route: the return path
	SMPPathSize     = 64  // size of each path: ports, one byte per hop
	SMPMaxHopCount  = 63  // the largest valid hop count (IBTA C14-6)
	smpDirectionBit = 0x8000
)

// SMP is a view of a whole subnet management packet: the common MAD header
// with the SMP's class-specific fields, followed by the M_Key, the
// directed-route fields and the 64-byte attribute data. The accessors of
// the directed-route fields (hop pointer and count, DrSLID, DrDLID, the
// paths and the direction bit) read bytes that a LID-routed SMP reserves.
//
//	0   MAD header (24; status: D bit and 15-bit status, then hop pointer
//	    and hop count in the class-specific field of a directed-route SMP)
//	24  M_Key (8)
//	32  DrSLID (2), DrDLID (2), reserved (28)
//	64  SMP data (64)
//	128 initial path (64)
//	192 return path (64)
type SMP []byte

// ParseSMP checks that b is one whole SMP (Size bytes, base version
// BaseVersion) and returns a view of it. It does not check the class: the
// caller dispatches on MgmtClass.
func ParseSMP(b []byte) (SMP, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	return SMP(m), nil
}

// MAD returns the SMP as a MAD, for the accessors of the common header.
func (s SMP) MAD() MAD { return MAD(s) }

// Directed reports whether the SMP is of the directed-route class (0x81).
func (s SMP) Directed() bool { return Class(s[1]) == ClassSubnDirected }

// Direction returns the D bit of a directed-route SMP: false on the way
// out (a request), true on the way back (a response).
func (s SMP) Direction() bool { return be.Uint16(s[4:])&smpDirectionBit != 0 }

// SetDirection sets the D bit, keeping the status.
func (s SMP) SetDirection(d bool) {
	v := be.Uint16(s[4:]) &^ smpDirectionBit
	if d {
		v |= smpDirectionBit
	}
	be.PutUint16(s[4:], v)
}

// Status returns the status of a directed-route SMP: the 15 bits next to
// the D bit. (A LID-routed SMP's status is MAD.Status.)
func (s SMP) Status() uint16 { return be.Uint16(s[4:]) &^ smpDirectionBit }

// SetStatus sets the 15-bit status of a directed-route SMP, keeping the D
// bit.
func (s SMP) SetStatus(v uint16) {
	be.PutUint16(s[4:], be.Uint16(s[4:])&smpDirectionBit|v&^smpDirectionBit)
}

// HopPointer returns the hop pointer of a directed-route SMP.
func (s SMP) HopPointer() uint8 { return s[6] }

// SetHopPointer sets the hop pointer.
func (s SMP) SetHopPointer(v uint8) { s[6] = v }

// HopCount returns the hop count: the number of directed-route hops.
func (s SMP) HopCount() uint8 { return s[7] }

// SetHopCount sets the hop count.
func (s SMP) SetHopCount(v uint8) { s[7] = v }

// MKey returns the management key.
func (s SMP) MKey() uint64 { return be.Uint64(s[24:]) }

// SetMKey sets the management key.
func (s SMP) SetMKey(v uint64) { be.PutUint64(s[24:], v) }

// DrSLID returns the directed-route SLID: PermissiveLID when the directed
// route starts at the requester, else the LID the response is LID-routed
// to from where the directed route ends on the way back.
func (s SMP) DrSLID() uint16 { return be.Uint16(s[32:]) }

// SetDrSLID sets the directed-route SLID.
func (s SMP) SetDrSLID(v uint16) { be.PutUint16(s[32:], v) }

// DrDLID returns the directed-route DLID: PermissiveLID when the directed
// route ends at the destination, else the LID the request is LID-routed to
// after its directed-route part.
func (s SMP) DrDLID() uint16 { return be.Uint16(s[34:]) }

// SetDrDLID sets the directed-route DLID.
func (s SMP) SetDrDLID(v uint16) { be.PutUint16(s[34:], v) }

// Data returns the 64-byte SMP data: the attribute.
func (s SMP) Data() []byte { return s[SMPDataOffset : SMPDataOffset+SMPDataSize] }

// InitialPath returns the 64-byte initial path: byte i is the port the SMP
// leaves by at hop i (byte 0 is unused).
func (s SMP) InitialPath() []byte { return s[SMPPathOffset : SMPPathOffset+SMPPathSize] }

// ReturnPath returns the 64-byte return path: byte i is the port the SMP
// entered by at hop i, filled in on the way out.
func (s SMP) ReturnPath() []byte { return s[SMPRPathOffset : SMPRPathOffset+SMPPathSize] }

// SetInitialPath writes path into the initial path, byte 0 first; the
// rest of the field is zeroed. It fails if path is longer than the field.
func (s SMP) SetInitialPath(path []byte) error {
	if len(path) > SMPPathSize {
		return fmt.Errorf("mad: initial path of %d hops, at most %d", len(path), SMPPathSize)
	}
	p := s.InitialPath()
	clear(p)
	copy(p, path)
	return nil
}

// NewDirectedSMP writes into b (Size bytes) a directed-route SMP request:
// base version 1, class 0x81, class version 1, the given method, attribute
// and modifier, transaction ID tid, DrSLID and DrDLID permissive, hop
// pointer 0, and the hop count and initial path from path, whose byte 0 is
// unused (0) and byte i the port to leave by at hop i. It returns the view.
func NewDirectedSMP(b []byte, method Method, attr AttributeID, mod uint32, tid uint64, path []byte) (SMP, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("%w: %d bytes, an SMP is %d", ErrTruncated, len(b), Size)
	}
	if len(path) == 0 || len(path) > SMPMaxHopCount+1 {
		return nil, fmt.Errorf("mad: directed-route path of %d bytes, want 1 to %d", len(path), SMPMaxHopCount+1)
	}
	s := SMP(b[:Size])
	clear(s)
	s[0], s[1], s[2], s[3] = BaseVersion, byte(ClassSubnDirected), 1, byte(method)
	s.MAD().SetTransactionID(tid)
	s.MAD().SetAttributeID(attr)
	s.MAD().SetAttributeModifier(mod)
	s.SetHopCount(uint8(len(path) - 1))
	s.SetDrSLID(PermissiveLID)
	s.SetDrDLID(PermissiveLID)
	_ = s.SetInitialPath(path)
	return s, nil
}

// NewLIDRoutedSMP writes into b (Size bytes) a LID-routed SMP request
// (class 0x01, versions 1) and returns the view.
func NewLIDRoutedSMP(b []byte, method Method, attr AttributeID, mod uint32, tid uint64) (SMP, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("%w: %d bytes, an SMP is %d", ErrTruncated, len(b), Size)
	}
	s := SMP(b[:Size])
	clear(s)
	s[0], s[1], s[2], s[3] = BaseVersion, byte(ClassSubnLID), 1, byte(method)
	s.MAD().SetTransactionID(tid)
	s.MAD().SetAttributeID(attr)
	s.MAD().SetAttributeModifier(mod)
	return s, nil
}
