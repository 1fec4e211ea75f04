package mad

// BadMKey is the data details of trap 256 (IBTA volume 1 section 14.3.9):
// a port dropped an SMP whose M_Key did not match its own. LID is the
// trapping port's; Method, AttributeID, AttributeModifier and MKey the
// dropped SMP's. A directed-route SMP also gives its DrSLID, hop count and
// return path (DRNotice set; DRPathTruncated when the path was longer
// than the 30 bytes the notice holds).
type BadMKey struct {
	LID               uint16
	DrSLID            uint16
	Method            Method
	AttributeID       AttributeID
	AttributeModifier uint32
	MKey              uint64
	DRNotice          bool
	DRPathTruncated   bool
	DRHopCount        uint8 // 6 bits
	DRReturnPath      [30]byte
}

// BadMKey decodes the data details of trap 256.
func (x *Notice) BadMKey() BadMKey {
	d := x.DataDetails[:]
	t := BadMKey{LID: be.Uint16(d[2:]), DrSLID: be.Uint16(d[4:]), Method: Method(d[6]),
		AttributeID: AttributeID(be.Uint16(d[8:])), AttributeModifier: be.Uint32(d[10:]), MKey: be.Uint64(d[14:]),
		DRNotice: getBit(d[23], 7), DRPathTruncated: getBit(d[23], 6), DRHopCount: getBits(d[23], 0, 6)}
	copy(t.DRReturnPath[:], d[24:54])
	return t
}

// SetBadMKey sets the data details of trap 256; the reserved bits are
// zero.
func (x *Notice) SetBadMKey(t BadMKey) {
	d := x.DataDetails[:]
	clear(d)
	be.PutUint16(d[2:], t.LID)
	be.PutUint16(d[4:], t.DrSLID)
	d[6] = byte(t.Method)
	be.PutUint16(d[8:], uint16(t.AttributeID))
	be.PutUint32(d[10:], t.AttributeModifier)
	be.PutUint64(d[14:], t.MKey)
	setBit(&d[23], 7, t.DRNotice)
	setBit(&d[23], 6, t.DRPathTruncated)
	setBits(&d[23], 0, 6, t.DRHopCount)
	copy(d[24:54], t.DRReturnPath[:])
}
