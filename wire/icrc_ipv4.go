// Checking the ICRC of an IPv4 packet whose Identification is unknown.
//
// A UDP socket does not show the receiver the IPv4 header, and the ICRC
// covers two of its fields the sender's kernel chooses: the 16-bit
// Identification and the Don't Fragment flag (the rest is known, or masked
// to ones). CRC-32 is affine over GF(2): flipping a set of input bits XORs
// the CRC with the XOR of each bit's own contribution, which depends only on
// the bit's distance from the end of the message. So for a packet of a given
// length, the ICRCs reachable by all 2^17 values of those bits are the
// ICRC computed with them zero, XOR any combination of 17 fixed vectors. A
// receiver can decide whether a packet's ICRC is one of them by reducing
// the difference against a basis of the vectors (Gaussian elimination over
// GF(2)): 17 steps per packet after a per-length precomputation. A corrupted
// packet then passes with probability 2^17/2^32 = 2^-15 instead of always.

package wire

import (
	"encoding/binary"
	"net/netip"
	"sync"
)

// ipv4Unknown is the number of IPv4 header bits the ICRC covers that a
// socket cannot see: the 16-bit Identification and the DF flag.
const ipv4Unknown = 17

// idBasis is a basis, in reduced echelon form, of the span of the 17 ICRC
// contributions for one packet length: vec[i] has its highest set bit at
// pivot[i], which no other vector has.
type idBasis struct {
	vec   [ipv4Unknown]uint32
	pivot [ipv4Unknown]uint32 // a one-bit mask
	comb  [ipv4Unknown]uint32 // the header bits whose contributions vec[i] sums
	n     int
	// low[k] is the contribution of Identification bits 0 to k together:
	// what going from Identification u to u+1 changes, for u whose k
	// lowest bits are ones and bit k zero (ICRCCache's prediction).
	low [16]uint32
}

// solve reports whether x lies in the span and, if so, a set of header
// bits (bit i < 16: Identification bit i; bit 16: DF) whose contributions
// sum to x.
func (b *idBasis) solve(x uint32) (bits uint32, ok bool) {
	for i := 0; i < b.n && x != 0; i++ {
		if x&b.pivot[i] != 0 {
			x ^= b.vec[i]
			bits ^= b.comb[i]
		}
	}
	return bits, x == 0
}

var idBases sync.Map // packet length (int) -> *idBasis

// basisFor returns the basis for packets of n bytes (BTH through ICRC),
// computing it the first time.
func basisFor(n int) *idBasis {
	if b, ok := idBases.Load(n); ok {
		return b.(*idBasis)
	}
	pkt := make([]byte, n)
	f := Framing{Src: netip.AddrFrom4([4]byte{}), Dst: netip.AddrFrom4([4]byte{})}
	base := ICRC(&f, pkt)
	b := new(idBasis)
	var low uint32
	for bit := range ipv4Unknown {
		g := f
		if bit < 16 {
			g.IPv4ID = 1 << bit
		} else {
			g.IPv4Frag = IPv4DontFragment
		}
		c := ICRC(&g, pkt) ^ base
		if bit < 16 {
			low ^= c
			b.low[bit] = low
		}
		b.add(c, 1<<bit)
	}
	v, _ := idBases.LoadOrStore(n, b)
	return v.(*idBasis)
}

// add inserts v, the contribution of the header bits in comb, into the
// basis if it is independent of it.
func (b *idBasis) add(v, comb uint32) {
	for i := 0; i < b.n; i++ {
		if v&b.pivot[i] != 0 {
			v ^= b.vec[i]
			comb ^= b.comb[i]
		}
	}
	if v == 0 {
		return
	}
	p := uint32(1) << (31 - leadingZeros32(v))
	for i := 0; i < b.n; i++ {
		if b.vec[i]&p != 0 {
			b.vec[i] ^= v
			b.comb[i] ^= comb
		}
	}
	b.vec[b.n], b.pivot[b.n], b.comb[b.n] = v, p, comb
	b.n++
}

func leadingZeros32(v uint32) int {
	n := 0
	for v&0x80000000 == 0 {
		v <<= 1
		n++
	}
	return n
}

// VerifyICRCAnyIPv4ID reports whether the ICRC carried in pkt is right for
// framing f with some value of the IPv4 Identification and Don't Fragment
// flag (f's values of those are ignored). For IPv6 framing it is
// VerifyICRC. See the top of this file for why this is a sound check.
func VerifyICRCAnyIPv4ID(f *Framing, pkt []byte) bool {
	if !f.IsIPv4() {
		return VerifyICRC(f, pkt)
	}
	if len(pkt) < BTHLen+ICRCLen {
		return false
	}
	_, some := CheckICRCIPv4(f, pkt)
	return some
}

// CheckICRCIPv4 computes the ICRC of pkt once and reports whether it is
// right for framing f exactly, and whether it is right for f with some
// IPv4 Identification and Don't Fragment flag (VerifyICRCAnyIPv4ID). The
// ICRC is affine in those bits, so the difference from f's own ICRC lies
// in the span of their contributions whatever f's values are. For IPv6
// framing both answers are the exact check's.
func CheckICRCIPv4(f *Framing, pkt []byte) (exact, some bool) {
	var c ICRCCache // one check: the cache's code, with nothing cached
	return c.CheckICRCIPv4(f, pkt)
}

// IPv4HeaderFor returns an IPv4 Identification and flags/fragment-offset
// field (0 or IPv4DontFragment) with which the ICRC carried in pkt is right
// for framing f, trying f's own values first; ok is false if there are
// none (or f is not IPv4). A capture written from what a UDP socket saw
// uses it to show the header the sender must have sent.
func IPv4HeaderFor(f *Framing, pkt []byte) (id, frag uint16, ok bool) {
	if !f.IsIPv4() || len(pkt) < BTHLen+ICRCLen {
		return 0, 0, false
	}
	diff := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) ^ ICRC(f, pkt)
	if diff == 0 {
		return f.IPv4ID, f.IPv4Frag, true
	}
	// The bits found are those that differ from f's.
	bits, ok := basisFor(len(pkt)).solve(diff)
	if !ok {
		return 0, 0, false
	}
	frag = f.IPv4Frag
	if bits&(1<<16) != 0 {
		frag ^= IPv4DontFragment
	}
	return f.IPv4ID ^ uint16(bits), frag, true
}
