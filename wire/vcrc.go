// The variant CRC (VCRC, IBTA vol. 1 7.8.2): a 16-bit CRC over a whole IB
// packet, LRH through ICRC, that each link recomputes (a switch may change
// the VL). Polynomial 0x100B (x^16+x^12+x^3+x+1), register seeded with
// 0xFFFF, processed bit-reflected like the ICRC's CRC-32 (so the table uses
// the reflected polynomial 0xD008), result inverted. It is carried least
// significant byte first, as the ICRC is.

package wire

import "encoding/binary"

// vcrcPolyReflected is 0x100B with its 16 bits reversed.
const vcrcPolyReflected = 0xD008

// vcrcTables[k][b] is the register after byte b, from a zero register,
// followed by k zero bytes: slicing by eight, as crcUpdate does for CRC-32.
var vcrcTables = func() (t [8][256]uint16) {
	for i := range 256 {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ vcrcPolyReflected
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// VCRC returns the variant CRC of b: for a packet, b is the LRH through the
// ICRC (the packet without its last two bytes).
func VCRC(b []byte) uint16 {
	t := &vcrcTables
	c := uint16(0xFFFF)
	for len(b) >= 8 {
		c = t[7][b[0]^byte(c)] ^ t[6][b[1]^byte(c>>8)] ^ t[5][b[2]] ^ t[4][b[3]] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
		b = b[8:]
	}
	for _, v := range b {
		c = t[0][byte(c)^v] ^ c>>8
	}
	return ^c
}

// SealVCRC computes the VCRC of pkt, a whole IB packet (LRH through VCRC),
// and stores it in its last two bytes. A switch that rewrites the VL calls
// it; the ICRC stays.
func SealVCRC(pkt []byte) {
	if len(pkt) < VCRCLen {
		return
	}
	n := len(pkt) - VCRCLen
	binary.LittleEndian.PutUint16(pkt[n:], VCRC(pkt[:n]))
}

// VerifyVCRC reports whether the VCRC carried at the end of pkt, a whole IB
// packet, is right.
func VerifyVCRC(pkt []byte) bool {
	if len(pkt) < VCRCLen {
		return false
	}
	n := len(pkt) - VCRCLen
	return binary.LittleEndian.Uint16(pkt[n:]) == VCRC(pkt[:n])
}
