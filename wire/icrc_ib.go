// The invariant CRC of native InfiniBand (IBTA vol. 1 7.8.1): the same
// CRC-32 as RoCEv2's (see icrc.go), but over the IB headers themselves, with
// the fields a switch or router may change replaced by ones:
//
//   - local packet (LNH IBA local): the LRH with its VL field set to 1s,
//     then the BTH with its byte 4 (Resv8a: FECN, BECN, reserved) set to 1s,
//     then the rest through the payload and pad;
//   - global packet (LNH IBA global): the whole LRH is variant (a router
//     rebuilds it) and stands as 8 bytes of 1s; the GRH follows with TClass,
//     FlowLabel and HopLmt set to 1s; then the BTH masked as above.
//
// RoCEv2 derives from the global case: its 8 bytes of 1s are this masked
// LRH, and the IP header stands where the GRH is.

package wire

import (
	"encoding/binary"

	ieee "github.com/softrdma/softrdma/internal/crc"
)

// IBICRC computes the invariant CRC of pkt, an IB packet from the LRH
// through the ICRC (without the VCRC; the last four bytes, the ICRC itself,
// are not hashed). The LRH's LNH says whether a GRH is present. It returns 0
// for a packet too short for its headers, a BTH and an ICRC, and for raw
// packets (LNH raw or IP non-IBA), which carry no ICRC.
func IBICRC(pkt []byte) uint32 {
	if len(pkt) < LRHLen {
		return 0
	}
	var hdr [LRHLen + GRHLen + BTHLen]byte
	n := 0
	switch LRH(pkt).LNH() {
	case LNHIBALocal:
		if len(pkt) < LRHLen+BTHLen+ICRCLen {
			return 0
		}
		copy(hdr[:], pkt[:LRHLen+BTHLen])
		hdr[0] |= 0xF0 // VL
		n = LRHLen
	case LNHIBAGlobal:
		if len(pkt) < LRHLen+GRHLen+BTHLen+ICRCLen {
			return 0
		}
		copy(hdr[:LRHLen], ffPrefix[:])
		copy(hdr[LRHLen:], pkt[LRHLen:LRHLen+GRHLen+BTHLen])
		g := hdr[LRHLen:]
		g[0] |= 0x0F                        // TClass, high nibble
		g[1], g[2], g[3] = 0xFF, 0xFF, 0xFF // TClass low nibble, FlowLabel
		g[7] = 0xFF                         // HopLmt
		n = LRHLen + GRHLen
	default:
		return 0
	}
	hdr[n+4] = 0xFF // BTH Resv8a
	n += BTHLen
	crc := crcUpdate(0, hdr[:n])
	return ieee.Update(crc, pkt[n:len(pkt)-ICRCLen])
}

// SealIB computes the ICRC and then the VCRC of pkt, a whole IB packet
// (LRH through VCRC), and stores them in place.
func SealIB(pkt []byte) {
	if len(pkt) < LRHLen+BTHLen+ICRCLen+VCRCLen {
		return
	}
	body := pkt[:len(pkt)-VCRCLen]
	binary.LittleEndian.PutUint32(body[len(body)-ICRCLen:], IBICRC(body))
	SealVCRC(pkt)
}
