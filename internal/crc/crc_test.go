package crc

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func ref(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

func randBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// aligned returns a slice of n bytes of buf whose start address is a modulo 64.
func aligned(buf []byte, a, n int) []byte {
	off := (a - int(uintptr(unsafe.Pointer(&buf[0]))%64) + 64) % 64
	return buf[off : off+n]
}

// withFallback runs f with the AVX-512 path disabled.
func withFallback(t testing.TB, f func()) {
	t.Helper()
	saved := useAVX512
	useAVX512 = false
	defer func() { useAVX512 = saved }()
	f()
}

func checkAllLengths(t *testing.T, maxLen int) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := randBytes(rng, maxLen+64)
	for n := 0; n <= maxLen; n++ {
		for a := range 64 {
			// Every alignment for short and block-edge lengths, a few
			// rotating ones elsewhere to keep the test fast.
			if n > 1024 && n%256 > 16 && n%256 < 240 && a%16 != n%16 {
				continue
			}
			p := aligned(buf, a, n)
			c := rng.Uint32()
			if got, want := Update(c, p), ref(c, p); got != want {
				t.Fatalf("len %d align %d crc %#08x: Update = %#08x, crc32 = %#08x", n, a, c, got, want)
			}
		}
	}
}

func TestAllLengths(t *testing.T) { checkAllLengths(t, 4096) }

func TestAllLengthsFallback(t *testing.T) {
	withFallback(t, func() { checkAllLengths(t, 4096) })
}

func TestAllLengthsAllAlignments(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	buf := randBytes(rng, 4096+64)
	for n := 0; n <= 4096; n++ {
		for a := range 64 {
			p := aligned(buf, a, n)
			c := rng.Uint32()
			if got, want := Update(c, p), ref(c, p); got != want {
				t.Fatalf("len %d align %d crc %#08x: Update = %#08x, crc32 = %#08x", n, a, c, got, want)
			}
		}
	}
}

var largeSizes = []int{
	4097, 4111, 4352, 5000, 8191, 8192, 12345, 65535, 65536, 65536 + 15,
	65536 + 16, 65536 + 255, 100003, 1 << 20, 1<<20 + 1, 1<<20 + 13, 1<<20 + 255,
}

func TestLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	buf := randBytes(rng, (1<<20)+256+64)
	for _, n := range largeSizes {
		for _, a := range []int{0, 1, 7, 8, 15, 16, 31, 32, 33, 48, 63} {
			p := aligned(buf, a, n)
			for _, c := range []uint32{0, ^uint32(0), rng.Uint32()} {
				if got, want := Update(c, p), ref(c, p); got != want {
					t.Fatalf("len %d align %d crc %#08x: Update = %#08x, crc32 = %#08x", n, a, c, got, want)
				}
			}
		}
	}
}

// TestPatterns uses inputs that random data rarely produces.
func TestPatterns(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 255, 256, 257, 511, 512, 513, 1024, 4096, 4111, 65536} {
		for _, fill := range []byte{0x00, 0xff, 0x80, 0x01} {
			p := make([]byte, n)
			for i := range p {
				p[i] = fill
			}
			for _, c := range []uint32{0, ^uint32(0), 1, 1 << 31} {
				if got, want := Update(c, p), ref(c, p); got != want {
					t.Fatalf("len %d fill %#x crc %#08x: Update = %#08x, crc32 = %#08x", n, fill, c, got, want)
				}
			}
		}
	}
	// A single set bit at every position of a 1 KiB block.
	p := make([]byte, 1024)
	for i := range 8 * len(p) {
		p[i/8] = 1 << (i % 8)
		if got, want := Update(0, p), ref(0, p); got != want {
			t.Fatalf("bit %d: Update = %#08x, crc32 = %#08x", i, got, want)
		}
		p[i/8] = 0
	}
}

func TestChained(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{100, 600, 1024, 4096, 4100, 65536, 65536 + 7, 1 << 20} {
		p := randBytes(rng, n)
		c := rng.Uint32()
		want := ref(c, p)
		if got := Update(c, p); got != want {
			t.Fatalf("len %d: Update = %#08x, crc32 = %#08x", n, got, want)
		}
		splits := []int{0, 1, 15, 16, 255, 256, 511, 512, n / 2, n - 513, n - 1, n}
		for range 20 {
			splits = append(splits, rng.IntN(n+1))
		}
		for _, s := range splits {
			if s < 0 || s > n {
				continue
			}
			if got := Update(Update(c, p[:s]), p[s:]); got != want {
				t.Fatalf("len %d split %d: chained = %#08x, single = %#08x", n, s, got, want)
			}
		}
		// Many random pieces.
		got, i := c, 0
		for i < n {
			j := min(n, i+rng.IntN(3000))
			got = Update(got, p[i:j])
			i = j
		}
		if got != want {
			t.Fatalf("len %d random pieces: chained = %#08x, single = %#08x", n, got, want)
		}
	}
}

func TestAllocs(t *testing.T) {
	p := make([]byte, 4096)
	for _, n := range []int{4096, 4095, 100} {
		if a := testing.AllocsPerRun(100, func() { Update(1, p[:n]) }); a != 0 {
			t.Errorf("len %d: %v allocations per Update, want 0", n, a)
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add([]byte{}, uint32(0))
	f.Add([]byte("hello, world"), uint32(0xffffffff))
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{255, 256, 511, 512, 513, 1024, 4096, 4096 + 15, 10000} {
		f.Add(randBytes(rng, n), rng.Uint32())
	}
	f.Fuzz(func(t *testing.T, data []byte, init uint32) {
		want := ref(init, data)
		if got := Update(init, data); got != want {
			t.Fatalf("len %d crc %#08x: Update = %#08x, crc32 = %#08x", len(data), init, got, want)
		}
		// Also from an odd start address and chained at an arbitrary point.
		if len(data) > 1 {
			s := int(init % uint32(len(data)))
			if got, want := Update(Update(init, data[:s]), data[s:]), want; got != want {
				t.Fatalf("len %d split %d: chained = %#08x, crc32 = %#08x", len(data), s, got, want)
			}
			if got, want := Update(init, data[1:]), ref(init, data[1:]); got != want {
				t.Fatalf("len %d from offset 1: Update = %#08x, crc32 = %#08x", len(data)-1, got, want)
			}
		}
	})
}

var benchSizes = []int{64, 256, 512, 1024, 4096, 65536, 1 << 20}

func benchSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1024:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

var sink uint32

func BenchmarkUpdate(b *testing.B) {
	for _, n := range benchSizes {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		b.Run("crc/"+benchSize(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var c uint32
			for b.Loop() {
				c = Update(c, p)
			}
			sink = c
		})
		b.Run("crc32/"+benchSize(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var c uint32
			for b.Loop() {
				c = crc32.Update(c, crc32.IEEETable, p)
			}
			sink = c
		})
	}
}
