// The ICRC of a stream: the masked IP and UDP headers hashed once a flow.
//
// Of the 48 (IPv4) or 68 (IPv6) bytes of masked headers the ICRC begins
// with, only the BTH changes from packet to packet of one flow and size:
// the addresses, ports and lengths stay, and the IPv4 Identification (which
// a GSO send numbers per segment) enters the CRC linearly. ICRCCache keeps
// the CRC of the IP and UDP part for the last flow and size it saw, so that
// a packet's ICRC hashes its BTH and payload only; a 64-byte WRITE's costs
// a third less.

package wire

import (
	"encoding/binary"
	"net/netip"

	ieee "github.com/softrdma/softrdma/internal/crc"
)

// ICRCCache computes ICRCs (as ICRC, SealParts and CheckICRCIPv4 do)
// reusing the CRC of the masked IP and UDP headers while the flow (the
// Framing without its IPv4 Identification) and the packet size stay the
// same. Its zero value is ready; it is not safe for concurrent use.
type ICRCCache struct {
	src, dst      netip.Addr
	sport, dport  uint16
	frag          uint16
	size          int
	crc           uint32   // the headers' CRC with Identification 0
	basis         *idBasis // basisFor(size), once asked for
	valid, is4    bool
	hits, lookups uint64 // for tests
}

// ipv4HeadLen is the length of the masked headers before the BTH for
// IPv4: eight bytes of ones (the LRH's place), the IPv4 header, the UDP
// header.
const ipv4HeadLen = 8 + 20 + 8

// ipv4IDTab[j][b] is what byte b as byte j of the IPv4 Identification adds
// (XOR) to the CRC of the masked IPv4 and UDP headers: the CRC is affine
// in its input, and the Identification sits at a fixed distance from the
// end of those headers.
var ipv4IDTab = func() (t [2][256]uint32) {
	var z [ipv4HeadLen]byte
	zero := crcUpdate(0, z[:])
	for j := range 2 {
		for b := range 256 {
			z[8+4+j] = byte(b)
			t[j][b] = crcUpdate(0, z[:]) ^ zero
		}
		z[8+4+j] = 0
	}
	return t
}()

// headers returns the CRC of the masked IP and UDP headers of a packet of
// size bytes (BTH through ICRC) framed by f, from the cache when the flow
// and size are those of the last call.
func (c *ICRCCache) headers(f *Framing, size int) uint32 {
	c.lookups++
	if !c.valid || c.size != size || c.src != f.Src || c.dst != f.Dst || c.sport != f.SrcPort || c.dport != f.DstPort || c.frag != f.IPv4Frag {
		g := *f
		g.IPv4ID = 0
		c.src, c.dst, c.sport, c.dport, c.frag, c.size = f.Src, f.Dst, f.SrcPort, f.DstPort, f.IPv4Frag, size
		c.crc = headersCRC(&g, size)
		c.basis = nil
		c.valid, c.is4 = true, g.IsIPv4()
	} else {
		c.hits++
	}
	crc := c.crc
	if id := f.IPv4ID; id != 0 && c.is4 {
		crc ^= ipv4IDTab[0][id>>8] ^ ipv4IDTab[1][id&0xff]
	}
	return crc
}

// bthCRC continues crc with the masked BTH.
func bthCRC(crc uint32, bth []byte) uint32 {
	var b [BTHLen]byte
	copy(b[:], bth)
	b[4] = 0xff // FECN, BECN, reserved
	return crcUpdate(crc, b[:])
}

// ICRC is the package's ICRC, reusing the cached header CRC.
func (c *ICRCCache) ICRC(f *Framing, pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	crc := bthCRC(c.headers(f, len(pkt)), pkt[:BTHLen])
	return ieee.Update(crc, pkt[BTHLen:len(pkt)-ICRCLen])
}

// Seal is the package's Seal, reusing the cached header CRC.
func (c *ICRCCache) Seal(f *Framing, pkt []byte) {
	if len(pkt) < BTHLen+ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], c.ICRC(f, pkt))
}

// SealParts is the package's SealParts, reusing the cached header CRC.
func (c *ICRCCache) SealParts(f *Framing, head, mid, tail []byte) {
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return
	}
	crc := bthCRC(c.headers(f, len(head)+len(mid)+len(tail)), head[:BTHLen])
	crc = ieee.Update(crc, head[BTHLen:])
	crc = ieee.Update(crc, mid)
	crc = ieee.Update(crc, tail[:len(tail)-ICRCLen])
	binary.LittleEndian.PutUint32(tail[len(tail)-ICRCLen:], crc)
}

// CheckICRCIPv4 is the package's CheckICRCIPv4, reusing the cached header
// CRC and the size's basis.
func (c *ICRCCache) CheckICRCIPv4(f *Framing, pkt []byte) (exact, some bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return false, false
	}
	diff := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) ^ c.ICRC(f, pkt)
	if diff == 0 {
		return true, true
	}
	if !f.IsIPv4() {
		return false, false
	}
	if c.basis == nil {
		c.basis = basisFor(len(pkt))
	}
	return false, c.basis.reduces(diff)
}
