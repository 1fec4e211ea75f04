package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func sealedIPv4(r *rand.Rand, n int) (Framing, []byte) {
	f := Framing{
		Src: netip.AddrFrom4([4]byte{10, 0, byte(r.IntN(256)), 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}),
		SrcPort: uint16(0xC000 + r.IntN(0x4000)), DstPort: UDPPort,
		IPv4ID: uint16(r.Uint32()),
	}
	if r.IntN(2) == 0 {
		f.IPv4Frag = IPv4DontFragment
	}
	pkt := make([]byte, n)
	for i := range pkt {
		pkt[i] = byte(r.Uint32())
	}
	Seal(&f, pkt)
	return f, pkt
}

// TestVerifyICRCAnyIPv4ID: packets sealed with any Identification and DF
// verify without knowing them; corrupted ones are refused, except about one
// in 2^15 (the span of the unknown bits' contributions).
func TestVerifyICRCAnyIPv4ID(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	const n = 20000
	passed := 0
	for i := range n {
		size := BTHLen + ICRCLen + 4*r.IntN(1100)
		f, pkt := sealedIPv4(r, size)
		g := f
		g.IPv4ID, g.IPv4Frag = uint16(r.Uint32()), 0 // what the receiver guesses does not matter
		if !VerifyICRCAnyIPv4ID(&g, pkt) {
			t.Fatalf("packet %d (%d bytes, ID %#x, frag %#x) refused", i, size, f.IPv4ID, f.IPv4Frag)
		}
		// One to three distinct bits flipped anywhere in the packet, ICRC
		// included, but BTH byte 4 (FECN, BECN, reserved), which the ICRC
		// masks.
		orig := append([]byte(nil), pkt...)
		for range 1 + r.IntN(3) {
			for {
				b := r.IntN(len(pkt) * 8)
				if b/8 != 4 && pkt[b/8] == orig[b/8] {
					pkt[b/8] ^= 1 << (b % 8)
					break
				}
			}
		}
		if VerifyICRCAnyIPv4ID(&g, pkt) {
			passed++
		}
	}
	// Expected n/2^15, about 0.6: a dozen would mean the check is weak.
	if passed > 12 {
		t.Fatalf("%d of %d corrupted packets passed", passed, n)
	}
	t.Logf("%d of %d corrupted packets passed", passed, n)
	// IPv6: the exact check.
	f := Framing{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 1, DstPort: UDPPort}
	pkt := make([]byte, 64)
	Seal(&f, pkt)
	if !VerifyICRCAnyIPv4ID(&f, pkt) {
		t.Fatal("IPv6 packet refused")
	}
	pkt[20] ^= 1
	if VerifyICRCAnyIPv4ID(&f, pkt) {
		t.Fatal("corrupted IPv6 packet accepted")
	}
	if VerifyICRCAnyIPv4ID(&f, pkt[:BTHLen+ICRCLen-1]) {
		t.Fatal("truncated packet accepted")
	}
}

// TestICRCBasisRank: the 17 unknown bits contribute independent vectors, so
// the span holds 2^17 ICRCs (no more packets pass than the count says).
func TestICRCBasisRank(t *testing.T) {
	for _, n := range []int{BTHLen + ICRCLen, 64, 1024 + 32, 4096 + 64} {
		if b := basisFor(n); b.n != ipv4Unknown {
			t.Errorf("%d bytes: rank %d, want %d", n, b.n, ipv4Unknown)
		}
	}
}

func FuzzVerifyICRCAnyIPv4ID(f *testing.F) {
	f.Add(uint16(0), false, []byte("0123456789abcdef"))
	f.Add(uint16(0xBEEF), true, make([]byte, 300))
	f.Fuzz(func(t *testing.T, id uint16, df bool, body []byte) {
		pkt := append(make([]byte, 0, len(body)+ICRCLen), body...)
		pkt = append(pkt, 0, 0, 0, 0)
		fr := Framing{Src: netip.AddrFrom4([4]byte{127, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{127, 0, 0, 2}),
			SrcPort: 49152, DstPort: UDPPort, IPv4ID: id}
		if df {
			fr.IPv4Frag = IPv4DontFragment
		}
		Seal(&fr, pkt)
		ok := VerifyICRCAnyIPv4ID(&fr, pkt)
		if ok != (len(pkt) >= BTHLen+ICRCLen) {
			t.Fatalf("%d bytes, ID %#x DF %v: verified %v", len(pkt), id, df, ok)
		}
		// The header is recovered from the packet alone.
		g := fr
		g.IPv4ID, g.IPv4Frag = 0, IPv4DontFragment
		gid, gfrag, gok := IPv4HeaderFor(&g, pkt)
		if gok != ok || (ok && (gid != fr.IPv4ID || gfrag != fr.IPv4Frag)) {
			t.Fatalf("%d bytes, sealed ID %#x frag %#x: recovered %#x %#x %v", len(pkt), fr.IPv4ID, fr.IPv4Frag, gid, gfrag, gok)
		}
	})
}

func BenchmarkVerifyICRC(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	f, pkt := sealedIPv4(r, 1024+32)
	b.Run("exact", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		for range b.N {
			VerifyICRC(&f, pkt)
		}
	})
	b.Run("anyID", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		for range b.N {
			VerifyICRCAnyIPv4ID(&f, pkt)
		}
	})
}

// TestIPv4HeaderFor recovers the Identification and DF a packet was sealed
// with from the packet alone (the 17 contributions are independent, so
// they are the only ones), and finds none for a corrupted packet.
func TestIPv4HeaderFor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 2000 {
		f, pkt := sealedIPv4(r, BTHLen+ICRCLen+4*r.IntN(1100))
		g := f
		g.IPv4ID, g.IPv4Frag = 0, IPv4DontFragment // the receiver's guess
		id, frag, ok := IPv4HeaderFor(&g, pkt)
		if !ok || id != f.IPv4ID || frag != f.IPv4Frag {
			t.Fatalf("packet %d: got ID %#x frag %#x ok %v, sealed with %#x %#x", i, id, frag, ok, f.IPv4ID, f.IPv4Frag)
		}
	}
	f, pkt := sealedIPv4(r, 100)
	pkt[30] ^= 0x40
	if _, _, ok := IPv4HeaderFor(&f, pkt); ok && VerifyICRCAnyIPv4ID(&f, pkt) != ok {
		t.Fatal("a header found where the any-ID check refuses")
	}
	f6 := Framing{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	if _, _, ok := IPv4HeaderFor(&f6, pkt); ok {
		t.Fatal("an IPv4 header for IPv6 framing")
	}
}

// TestCheckICRCIPv4 gives both answers from one CRC: exact for the framing
// as sealed, some for another Identification and DF, neither for a
// corrupted packet.
func TestCheckICRCIPv4(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 13))
	for range 500 {
		f, pkt := sealedIPv4(r, BTHLen+ICRCLen+4*r.IntN(300))
		if exact, some := CheckICRCIPv4(&f, pkt); !exact || !some {
			t.Fatalf("as sealed: exact %v some %v", exact, some)
		}
		g := f
		g.IPv4ID ^= 1 + uint16(r.IntN(0xFFFE))
		if exact, some := CheckICRCIPv4(&g, pkt); exact || !some {
			t.Fatalf("other ID: exact %v some %v", exact, some)
		}
	}
	f, pkt := sealedIPv4(r, 200)
	pkt[40] ^= 0x08
	if exact, _ := CheckICRCIPv4(&f, pkt); exact {
		t.Fatal("a corrupted packet verified exactly")
	}
	if exact, some := CheckICRCIPv4(&f, pkt[:BTHLen+ICRCLen-1]); exact || some {
		t.Fatal("a truncated packet verified")
	}
}

// TestCRCUpdate checks the prefix CRC against hash/crc32 for every length
// up to a few steps of eight and random contents and starting values.
func TestCRCUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for n := range 80 {
		p := make([]byte, n)
		for range 20 {
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			init := r.Uint32()
			if got, want := crcUpdate(init, p), crc32.Update(init, crc32.IEEETable, p); got != want {
				t.Fatalf("%d bytes from %#x: %#x, want %#x", n, init, got, want)
			}
		}
	}
}
