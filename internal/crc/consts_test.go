package crc

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// poly is the IEEE CRC-32 generator polynomial P in normal (not reflected)
// form, with the x^32 term: bit i is the coefficient of x^i.
const poly = 1<<32 | 0x04C11DB7

// xnModP returns x^n mod P (degree < 32, normal form).
func xnModP(n int) uint64 {
	r := uint64(1) // x^0
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= poly
		}
	}
	return r
}

// x64DivP returns floor(x^64 / P), a polynomial of degree 32.
func x64DivP() uint64 {
	// Long division of x^64 (65 bits) by P; only the quotient is kept.
	var q uint64
	// rem holds the current partial remainder's top bits; track as two words.
	remHi, remLo := uint64(1), uint64(0) // x^64 = remHi<<64 | remLo
	for d := 64; d >= 32; d-- {
		// coefficient of x^d in the remainder
		var c uint64
		if d >= 64 {
			c = remHi >> (d - 64) & 1
		} else {
			c = remLo >> d & 1
		}
		if c == 0 {
			continue
		}
		q |= 1 << (d - 32)
		// subtract P * x^(d-32)
		s := d - 32
		lo := uint64(poly) << s
		var hi uint64
		if s > 31 {
			hi = uint64(poly) >> (64 - s)
		}
		remLo ^= lo
		remHi ^= hi
	}
	if remHi != 0 || remLo>>32 != 0 {
		panic("division did not reduce")
	}
	return q
}

// refl64 returns the bit-reflected 64-bit form of a polynomial of degree < 64:
// bit i of the result is the coefficient of x^(63-i).
func refl64(p uint64) uint64 { return bits.Reverse64(p) }

// foldPair returns the constant pair that folds a 128-bit lane forward by f bits.
func foldPair(f int) [2]uint64 {
	return [2]uint64{refl64(xnModP(f + 63)), refl64(xnModP(f - 1))}
}

// genConstants derives the table stored in foldConsts.
func genConstants() [28]uint64 {
	var t [28]uint64
	put := func(i int, p [2]uint64) { t[i], t[i+1] = p[0], p[1] }
	put(0, foldPair(2048))
	put(2, foldPair(1536))
	put(4, foldPair(1024))
	put(6, foldPair(512))
	put(8, foldPair(384))
	put(10, foldPair(256))
	put(12, foldPair(128))
	// t[14], t[15] stay zero: the last lane is not moved.
	put(16, foldPair(32))
	t[18] = refl64(xnModP(63))
	mu := x64DivP()
	t[20] = refl64(mu << 31)
	t[21] = refl64(uint64(poly) << 31)
	// VPSHUFB indices for the final partial block.
	var shuf [48]byte
	for i := range shuf {
		shuf[i] = 0x80
		if i >= 16 && i < 32 {
			shuf[i] = byte(i - 16)
		}
	}
	for i := range 6 {
		t[22+i] = binary.LittleEndian.Uint64(shuf[8*i:])
	}
	return t
}

func TestConstants(t *testing.T) {
	want := genConstants()
	if foldConsts != want {
		var b strings.Builder
		for i := 0; i < len(want); i += 2 {
			fmt.Fprintf(&b, "\t%#016x, %#016x,\n", want[i], want[i+1])
		}
		t.Fatalf("foldConsts differ from the generated table; want:\n%s", b.String())
	}
}

func TestX64DivP(t *testing.T) {
	// mu*P + rem == x^64 with deg(rem) < 32.
	mu := x64DivP()
	var hi, lo uint64
	for i := 0; i <= 32; i++ {
		if mu>>i&1 != 0 {
			lo ^= uint64(poly) << i
			if i > 31 {
				hi ^= uint64(poly) >> (64 - i)
			}
		}
	}
	if hi != 1 || lo>>32 != 0 {
		t.Fatalf("mu*P = %x:%016x, want x^64 + (deg<32)", hi, lo)
	}
}

// clmul is a portable carry-less multiply of two 64-bit values: it returns the
// low and high 64 bits of the 127-bit product, like PCLMULQDQ.
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return lo, hi
}

// lane is a 128-bit value as held in an XMM register: q[0] is the low
// quadword (first 8 bytes in memory).
type lane [2]uint64

func load(p []byte) lane {
	var l lane
	for i := range 8 {
		l[0] |= uint64(p[i]) << (8 * i)
		l[1] |= uint64(p[8+i]) << (8 * i)
	}
	return l
}

// fold returns clmul(l.lo, k[0]) xor clmul(l.hi, k[1]).
func fold(l lane, k0, k1 uint64) lane {
	a0, a1 := clmul(l[0], k0)
	b0, b1 := clmul(l[1], k1)
	return lane{a0 ^ b0, a1 ^ b1}
}

// modelFold is a portable model of the assembly, step by step, using the
// same constants; len(p) must be at least 256.
func modelFold(state uint32, p []byte, k *[28]uint64) uint32 {
	var acc [16]lane // 4 accumulators x 4 lanes
	for i := range acc {
		acc[i] = load(p[16*i:])
	}
	acc[0][0] ^= uint64(state)
	p = p[256:]
	for len(p) >= 256 {
		for i := range acc {
			f := fold(acc[i], k[0], k[1])
			d := load(p[16*i:])
			acc[i] = lane{f[0] ^ d[0], f[1] ^ d[1]}
		}
		p = p[256:]
	}
	// Four accumulators into one (lanes 12..15).
	var z [4]lane
	for j := range 4 {
		z[j] = acc[12+j]
		for a := range 3 {
			f := fold(acc[4*a+j], k[2+2*a], k[3+2*a])
			z[j] = lane{z[j][0] ^ f[0], z[j][1] ^ f[1]}
		}
	}
	for len(p) >= 64 {
		for j := range 4 {
			f := fold(z[j], k[6], k[7])
			d := load(p[16*j:])
			z[j] = lane{f[0] ^ d[0], f[1] ^ d[1]}
		}
		p = p[64:]
	}
	// Four lanes into one.
	x := z[3]
	for j := range 3 {
		f := fold(z[j], k[8+2*j], k[9+2*j])
		x = lane{x[0] ^ f[0], x[1] ^ f[1]}
	}
	for len(p) >= 16 {
		f := fold(x, k[12], k[13])
		d := load(p)
		x = lane{f[0] ^ d[0], f[1] ^ d[1]}
		p = p[16:]
	}
	if r := len(p); r > 0 {
		// x followed by the r tail bytes: a = x[0:r] preceded by 16-r
		// zero bytes, b = x[r:16] followed by the tail.
		var xb, ab, bb [16]byte
		binary.LittleEndian.PutUint64(xb[:], x[0])
		binary.LittleEndian.PutUint64(xb[8:], x[1])
		copy(ab[16-r:], xb[:r])
		copy(bb[:], xb[r:])
		copy(bb[16-r:], p)
		f := fold(load(ab[:]), k[12], k[13])
		b := load(bb[:])
		x = lane{f[0] ^ b[0], f[1] ^ b[1]}
	}
	return modelReduce(x, k)
}

// modelReduce reduces the 128-bit value x to the CRC state x*x^32 mod P.
func modelReduce(x lane, k *[28]uint64) uint32 {
	// Fold by 32 bits: degree < 96, low 32 bits zero.
	x = fold(x, k[16], k[17])
	// Fold the low quadword into the high one: degree < 64, in x[1].
	a0, a1 := clmul(x[0], k[18])
	if a0 != 0 {
		panic("low quadword of product not zero")
	}
	u := x[1] ^ a1
	// Barrett reduction.
	q, _ := clmul(u<<32, k[20])
	_, r := clmul(q, k[21])
	return uint32(r) ^ uint32(u>>32)
}

func TestModel(t *testing.T) {
	k := genConstants()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{256, 257, 271, 272, 320, 333, 496, 512, 768, 1024, 1500, 4096, 4096 + 240, 4111} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		for range 4 {
			c := rng.Uint32()
			want := crc32.Update(c, crc32.IEEETable, p)
			got := ^modelFold(^c, p, &k)
			if got != want {
				t.Errorf("len %d crc %#x: model %#08x, crc32 %#08x", n, c, got, want)
			}
		}
	}
}
