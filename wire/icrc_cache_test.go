package wire

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// cacheFlows are the flows TestICRCCache draws from: IPv4 (plain and
// mapped) and IPv6, two ports.
var cacheFlows = []Framing{
	{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152, DstPort: UDPPort, IPv4Frag: IPv4DontFragment},
	{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 49153, DstPort: UDPPort, IPv4Frag: IPv4DontFragment},
	{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.3"), SrcPort: 49152, DstPort: UDPPort},
	{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 50000, DstPort: UDPPort},
}

// TestICRCCache: a cache used for a stream of packets whose flow, size
// and Identification change at random answers as the package's functions
// do, and reuses its headers for runs of one flow and size.
func TestICRCCache(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var c ICRCCache
	sizes := []int{BTHLen + ICRCLen, 80, 96, 4112, 4128}
	f := cacheFlows[0]
	size := sizes[0]
	for i := range 20000 {
		if r.IntN(8) == 0 {
			f = cacheFlows[r.IntN(len(cacheFlows))]
			f.IPv4Frag = IPv4DontFragment * uint16(r.IntN(2))
		}
		if r.IntN(8) == 0 {
			size = sizes[r.IntN(len(sizes))]
		}
		f.IPv4ID = uint16(r.Uint32())
		if r.IntN(3) == 0 {
			f.IPv4ID = 0
		}
		pkt := make([]byte, size)
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		if got, want := c.ICRC(&f, pkt), ICRC(&f, pkt); got != want {
			t.Fatalf("packet %d (%v -> %v ID %#x frag %#x, %d bytes): ICRC %#x, want %#x", i, f.Src, f.Dst, f.IPv4ID, f.IPv4Frag, size, got, want)
		}
		// SealParts over a split packet.
		a := BTHLen + r.IntN(size-BTHLen-ICRCLen+1)
		b := a + r.IntN(size-ICRCLen-a+1)
		want := append([]byte(nil), pkt...)
		SealParts(&f, want[:a], want[a:b], want[b:])
		c.SealParts(&f, pkt[:a], pkt[a:b], pkt[b:])
		if !bytes.Equal(pkt, want) {
			t.Fatalf("packet %d: SealParts(%d, %d) sealed %#x, want %#x", i, a, b, pkt[size-4:], want[size-4:])
		}
		// The receiver's check, with the sender's Identification unknown,
		// and of a corrupted packet.
		g := f
		g.IPv4ID = 0
		e1, s1 := c.CheckICRCIPv4(&g, pkt)
		e2, s2 := CheckICRCIPv4(&g, pkt)
		if e1 != e2 || s1 != s2 || !s1 {
			t.Fatalf("packet %d: check (%v, %v), want (%v, %v), some true", i, e1, s1, e2, s2)
		}
		pkt[BTHLen+r.IntN(size-BTHLen)] ^= 1 << r.IntN(8)
		e1, s1 = c.CheckICRCIPv4(&g, pkt)
		e2, s2 = CheckICRCIPv4(&g, pkt)
		if e1 != e2 || s1 != s2 || e1 {
			t.Fatalf("packet %d corrupted: check (%v, %v), want (%v, %v), not exact", i, e1, s1, e2, s2)
		}
	}
	// Four lookups a packet, a new flow or size one packet in about four.
	if c.lookups != 80000 || c.hits < c.lookups/2 {
		t.Errorf("%d of %d lookups hit", c.hits, c.lookups)
	}
	if short := make([]byte, BTHLen+ICRCLen-1); c.ICRC(&f, short) != 0 {
		t.Error("short packet: ICRC not 0")
	}
	if e, s := c.CheckICRCIPv4(&f, nil); e || s {
		t.Error("empty packet checked")
	}
}

// TestICRCCacheAllocs: sealing and checking through a cache allocate
// nothing.
func TestICRCCacheAllocs(t *testing.T) {
	var c ICRCCache
	f := cacheFlows[0]
	pkt := make([]byte, 96)
	n := testing.AllocsPerRun(100, func() {
		f.IPv4ID++
		c.Seal(&f, pkt)
		c.CheckICRCIPv4(&f, pkt)
	})
	if n != 0 {
		t.Errorf("%v allocations a packet", n)
	}
}

func FuzzICRCCache(f *testing.F) {
	f.Add(uint16(0), uint16(1), uint8(0), []byte("0123456789abcdef"))
	f.Add(uint16(0xBEEF), uint16(0), uint8(3), make([]byte, 300))
	f.Fuzz(func(t *testing.T, id1, id2 uint16, flows uint8, body []byte) {
		var c ICRCCache
		pkt := append(make([]byte, 0, len(body)+ICRCLen), body...)
		pkt = append(pkt, 0, 0, 0, 0)
		for k, id := range []uint16{id1, id2} {
			fr := cacheFlows[int(flows>>(2*k))%len(cacheFlows)]
			fr.IPv4ID = id
			c.Seal(&fr, pkt)
			if ok := VerifyICRC(&fr, pkt); ok != (len(pkt) >= BTHLen+ICRCLen) {
				t.Fatalf("%d bytes, flow %v ID %#x: verified %v", len(pkt), fr.Dst, id, ok)
			}
			if len(pkt) >= BTHLen+ICRCLen && binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) != ICRC(&fr, pkt) {
				t.Fatal("sealed ICRC differs")
			}
		}
	})
}

func BenchmarkICRCCache(b *testing.B) {
	f := cacheFlows[0]
	pkt := make([]byte, 96)
	b.Run("uncached", func(b *testing.B) {
		for i := range b.N {
			f.IPv4ID = uint16(i)
			Seal(&f, pkt)
		}
	})
	b.Run("cached", func(b *testing.B) {
		var c ICRCCache
		for i := range b.N {
			f.IPv4ID = uint16(i)
			c.Seal(&f, pkt)
		}
	})
}

// TestICRCCacheAlternating: a request and its ACK, two sizes of one flow
// in turn, are both served from the cache after their first packets.
func TestICRCCacheAlternating(t *testing.T) {
	var c ICRCCache
	f := cacheFlows[0]
	req, ack := make([]byte, 96), make([]byte, BTHLen+4+ICRCLen)
	for i := range 100 {
		f.IPv4ID = uint16(i)
		for _, p := range [][]byte{req, ack} {
			c.Seal(&f, p)
			if !VerifyICRC(&f, p) {
				t.Fatalf("round %d: %d-byte packet sealed wrong", i, len(p))
			}
		}
	}
	if c.lookups != 200 || c.hits != 198 {
		t.Errorf("%d of %d lookups hit, want 198 of 200", c.hits, c.lookups)
	}
}

// TestICRCCachePredictsID: packets of a flow whose Identifications count
// up (a connected sender's), a request and its ACK interleaved, verify as
// some-Identification packets, all but each size's first by the cache's
// guess of the next Identification, through the wrap from 0xFFFF to 0; a
// corrupted packet still fails with a guess in place, and a jump in the
// Identifications is found by the basis and followed again.
func TestICRCCachePredictsID(t *testing.T) {
	var c ICRCCache
	f := cacheFlows[0] // the receiver's framing: Identification 0, DF
	req, ack := make([]byte, 96), make([]byte, BTHLen+4+ICRCLen)
	for i := range req {
		req[i] = byte(i)
	}
	check := func(pkt []byte, id uint16, want bool) {
		t.Helper()
		g := f
		g.IPv4ID = id
		Seal(&g, pkt)
		if want {
			if exact, some := c.CheckICRCIPv4(&f, pkt); exact != (id == 0) || !some {
				t.Fatalf("%d bytes, Identification %#x: exact %v some %v", len(pkt), id, exact, some)
			}
			return
		}
		pkt[20] ^= 0x10 // corrupted after sealing
		if exact, some := CheckICRCIPv4(&f, pkt); exact || some {
			t.Fatalf("the corruption passes the package's check (exact %v some %v): pick another", exact, some)
		}
		if exact, some := c.CheckICRCIPv4(&f, pkt); exact || some {
			t.Fatalf("%d bytes, Identification %#x, corrupted: exact %v some %v", len(pkt), id, exact, some)
		}
		pkt[20] ^= 0x10
	}
	id := uint16(0xFFF0)
	for range 40 { // each round trip: the request, then its ACK, one datagram later
		check(req, id, true)
		check(ack, id+1, true)
		id++
	}
	// Not guessed: each size's first, and the two with Identification 0,
	// which verify exactly.
	if c.predictions != 2*40-4 {
		t.Errorf("%d of %d packets guessed, want %d", c.predictions, 2*40, 2*40-4)
	}
	check(req, id, false)
	p := c.predictions
	check(req, id+1000, true) // a jump: the basis finds it
	check(req, id+1001, true)
	if c.predictions != p+1 {
		t.Errorf("after a jump: %d guesses, want %d", c.predictions-p, 1)
	}
}
