// MultiPathRecord (IBTA volume 1 section 15.2.5.20): the query of a
// GetMulti, naming several source and destination GIDs at once; the SA
// answers with PathRecords.

package mad

import "fmt"

// MultiPathRecordSize is the size of a MultiPathRecord with the most GIDs
// an SA MAD's data holds (MultiPathMaxGIDs).
const MultiPathRecordSize = 200

// MultiPathMaxGIDs is how many GIDs (sources and destinations together) a
// MultiPathRecord in one MAD carries.
const MultiPathMaxGIDs = 11

// Component mask bits of MultiPathRecord (OpenSM's IB_MPR_COMPMASK_*).
const (
	MultiPathRecCompRawTraffic     = 1 << 0
	MultiPathRecCompFlowLabel      = 1 << 2
	MultiPathRecCompHopLimit       = 1 << 3
	MultiPathRecCompTClass         = 1 << 4
	MultiPathRecCompReversible     = 1 << 5
	MultiPathRecCompNumbPath       = 1 << 6
	MultiPathRecCompPKey           = 1 << 7
	MultiPathRecCompQoSClass       = 1 << 8
	MultiPathRecCompSL             = 1 << 9
	MultiPathRecCompMTUSelector    = 1 << 10
	MultiPathRecCompMTU            = 1 << 11
	MultiPathRecCompRateSelector   = 1 << 12
	MultiPathRecCompRate           = 1 << 13
	MultiPathRecCompLifeSelector   = 1 << 14
	MultiPathRecCompPacketLifeTime = 1 << 15
	MultiPathRecCompServiceIDMSB   = 1 << 16
	MultiPathRecCompIndependence   = 1 << 17
	MultiPathRecCompSGIDCount      = 1 << 19
	MultiPathRecCompDGIDCount      = 1 << 20
	MultiPathRecCompServiceIDLSB   = 1 << 21
	MultiPathRecCompServiceID      = MultiPathRecCompServiceIDMSB | MultiPathRecCompServiceIDLSB
)

// MultiPathRecord asks for paths between each of SGIDs and each of DGIDs,
// with the same path parameters as a PathRecord query (NumbPath: how
// many paths in all; Independence: how disjoint they should be, 2 bits).
type MultiPathRecord struct {
	RawTraffic     bool
	FlowLabel      uint32 // 20 bits
	HopLimit       uint8
	TClass         uint8
	Reversible     bool
	NumbPath       uint8 // 7 bits
	PKey           uint16
	QoSClass       uint16 // 12 bits
	SL             uint8  // 4 bits
	MTUSelector    uint8
	MTU            uint8
	RateSelector   uint8
	Rate           uint8
	LifeSelector   uint8
	PacketLifeTime uint8
	ServiceID      uint64
	Independence   uint8 // 2 bits
	SGIDs, DGIDs   []GID // together at most MultiPathMaxGIDs
}

// ParseMultiPathRecord decodes a MultiPathRecord from the first
// MultiPathRecordSize bytes of b. SGIDCount plus DGIDCount beyond
// MultiPathMaxGIDs is an error wrapping ErrTooLong: the GIDs do not fit.
func ParseMultiPathRecord(b []byte) (MultiPathRecord, error) {
	var x MultiPathRecord
	if len(b) < MultiPathRecordSize {
		return x, truncated("MultiPathRecord", b, MultiPathRecordSize)
	}
	w := be.Uint32(b)
	x.RawTraffic, x.FlowLabel, x.HopLimit = w&pathRecRawTrafficBit != 0, w>>8&pathRecFlowLabelMask, uint8(w)
	x.TClass = b[4]
	x.Reversible, x.NumbPath = b[5]&pathRecReversibleBit != 0, b[5]&pathRecNumbPathMask
	x.PKey = be.Uint16(b[6:])
	q := be.Uint16(b[8:])
	x.QoSClass, x.SL = q>>pathRecQoSClassShift, uint8(q&0xF)
	x.MTUSelector, x.MTU = b[10]>>pathRecSelectorShift, b[10]&pathRecValueMask
	x.RateSelector, x.Rate = b[11]>>pathRecSelectorShift, b[11]&pathRecValueMask
	x.LifeSelector, x.PacketLifeTime = b[12]>>pathRecSelectorShift, b[12]&pathRecValueMask
	x.Independence = b[14] >> 6
	ns, nd := int(b[15]), int(b[16])
	var lsb [8]byte
	copy(lsb[1:], b[17:24])
	x.ServiceID = uint64(b[13])<<56 | be.Uint64(lsb[:])
	if ns+nd > MultiPathMaxGIDs {
		return x, fmt.Errorf("%w: MultiPathRecord with %d GIDs, at most %d", ErrTooLong, ns+nd, MultiPathMaxGIDs)
	}
	gid := func(i int) (g GID) { copy(g[:], b[24+16*i:]); return g }
	for i := range ns {
		x.SGIDs = append(x.SGIDs, gid(i))
	}
	for i := range nd {
		x.DGIDs = append(x.DGIDs, gid(ns+i))
	}
	return x, nil
}

// Encode writes x into the first MultiPathRecordSize bytes of b, the GIDs
// past MultiPathMaxGIDs left out.
func (x *MultiPathRecord) Encode(b []byte) {
	b = b[:MultiPathRecordSize]
	clear(b)
	w := (x.FlowLabel&pathRecFlowLabelMask)<<8 | uint32(x.HopLimit)
	if x.RawTraffic {
		w |= pathRecRawTrafficBit
	}
	be.PutUint32(b, w)
	b[4] = x.TClass
	b[5] = x.NumbPath & pathRecNumbPathMask
	if x.Reversible {
		b[5] |= pathRecReversibleBit
	}
	be.PutUint16(b[6:], x.PKey)
	be.PutUint16(b[8:], (x.QoSClass&0xFFF)<<pathRecQoSClassShift|uint16(x.SL&0xF))
	b[10] = selector(x.MTUSelector, x.MTU)
	b[11] = selector(x.RateSelector, x.Rate)
	b[12] = selector(x.LifeSelector, x.PacketLifeTime)
	b[13] = byte(x.ServiceID >> 56)
	b[14] = x.Independence << 6
	ns := min(len(x.SGIDs), MultiPathMaxGIDs)
	nd := min(len(x.DGIDs), MultiPathMaxGIDs-ns)
	b[15], b[16] = byte(ns), byte(nd)
	var lsb [8]byte
	be.PutUint64(lsb[:], x.ServiceID)
	copy(b[17:24], lsb[1:])
	for i, g := range x.SGIDs[:ns] {
		copy(b[24+16*i:], g[:])
	}
	for i, g := range x.DGIDs[:nd] {
		copy(b[24+16*(ns+i):], g[:])
	}
}
