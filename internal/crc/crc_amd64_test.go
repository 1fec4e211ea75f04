//go:build amd64

package crc

import (
	"math/rand/v2"
	"testing"
)

// TestFoldDirect calls the assembly directly at every length from its
// minimum, 64, to 2048 bytes, which crosses every loop boundary.
func TestFoldDirect(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 VPCLMULQDQ")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	buf := randBytes(rng, 2048)
	for n := 64; n <= len(buf); n++ {
		c := rng.Uint32()
		got := ^foldAVX512(^c, buf[:n], &foldConsts)
		if want := ref(c, buf[:n]); got != want {
			t.Fatalf("len %d: foldAVX512 = %#08x, crc32 = %#08x", n, got, want)
		}
	}
}
