package wire_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/wire"
)

func TestPSNArithmetic(t *testing.T) {
	for _, c := range []struct {
		p    wire.PSN
		n    int
		want wire.PSN
	}{
		{0, 1, 1},
		{0xFFFFFF, 1, 0},
		{0xFFFFFE, 5, 3},
		{0, -1, 0xFFFFFF},
		{2, -5, 0xFFFFFD},
		{0x123456, 0, 0x123456},
		{0, 1 << 24, 0},
		{7, -(1 << 24), 7},
		{0x800000, 0x800000, 0},
		{0xFFFFFF, 0xFFFFFF, 0xFFFFFE},
	} {
		if got := c.p.Add(c.n); got != c.want || !got.Valid() {
			t.Errorf("PSN(%#x).Add(%d) = %#x, want %#x", c.p, c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		p, q   wire.PSN
		diff   int32
		before bool
		after  bool
	}{
		{5, 5, 0, false, false},
		{6, 5, 1, false, true},
		{5, 6, -1, true, false},
		{0, 0xFFFFFF, 1, false, true},
		{0xFFFFFF, 0, -1, true, false},
		{3, 0xFFFFFD, 6, false, true},
		{0x7FFFFF, 0, 0x7FFFFF, false, true},
		{0x800000, 0, -0x800000, true, false}, // half way round is "before" both ways
		{0, 0x800000, -0x800000, true, false},
		{0x800001, 0, -0x7FFFFF, true, false},
		{0, 0x800001, 0x7FFFFF, false, true},
		{0x123456, 0x123400, 0x56, false, true},
	} {
		if d := c.p.Diff(c.q); d != c.diff {
			t.Errorf("PSN(%#x).Diff(%#x) = %d, want %d", c.p, c.q, d, c.diff)
		}
		if c.p.Before(c.q) != c.before || c.p.After(c.q) != c.after {
			t.Errorf("PSN(%#x) Before/After %#x = %v/%v, want %v/%v", c.p, c.q,
				c.p.Before(c.q), c.p.After(c.q), c.before, c.after)
		}
	}
	if wire.PSN(0xFFFFFF).Valid() != true || wire.PSN(0x1000000).Valid() {
		t.Error("PSN.Valid")
	}
	if wire.MSN(0xFFFFFF).Add(1) != 0 || wire.MSN(0).Add(-1) != 0xFFFFFF || wire.MSN(5).Add(3) != 8 {
		t.Error("MSN.Add does not wrap at 2^24")
	}
	if !wire.QPN(0xFFFFFF).Valid() || wire.QPN(0x1000000).Valid() || wire.QPMulticast != 0xFFFFFF {
		t.Error("QPN.Valid")
	}
	if s := wire.QPN(0x11).String(); s != "0x000011" {
		t.Errorf("QPN String = %q", s)
	}
}

// TestPSNDiffAdd checks Diff(Add(p, n), p) == n for random p and every
// |n| < 2^23 the generator draws, including the edges.
func TestPSNDiffAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	edges := []int{0, 1, -1, 1<<23 - 1, -(1<<23 - 1), 1 << 22, -(1 << 22)}
	for i := range 200000 {
		p := wire.PSN(r.Uint32N(1 << 24))
		if i < 7*len(edges) {
			p = []wire.PSN{0, 1, 0x7FFFFF, 0x800000, 0xFFFFFE, 0xFFFFFF, 0x123456}[i/len(edges)]
		}
		n := r.IntN(1<<24-1) - (1<<23 - 1)
		if i < 7*len(edges) {
			n = edges[i%len(edges)]
		}
		q := p.Add(n)
		if d := q.Diff(p); int(d) != n {
			t.Fatalf("PSN(%#x).Add(%d).Diff = %d", p, n, d)
		}
		if q.After(p) != (n > 0) || q.Before(p) != (n < 0) || p.Before(q) != (n > 0) {
			t.Fatalf("PSN(%#x) vs Add(%d): After %v Before %v", p, n, q.After(p), q.Before(p))
		}
		if q.Add(-n) != p {
			t.Fatalf("PSN(%#x).Add(%d).Add(%d) = %#x", p, n, -n, q.Add(-n))
		}
	}
}

func TestPKey(t *testing.T) {
	for _, c := range []struct {
		k, q  wire.PKey
		match bool
	}{
		{0xFFFF, 0xFFFF, true},
		{0xFFFF, 0x7FFF, true},  // full and limited member
		{0x7FFF, 0xFFFF, true},  // limited and full member
		{0x7FFF, 0x7FFF, false}, // two limited members
		{0x8001, 0x8001, true},
		{0x8001, 0x0001, true},
		{0x8001, 0x8002, false}, // different partitions
		{0x8001, 0xFFFF, false},
		{0x8000, 0x8000, false}, // partition 0 is invalid
		{0x0000, 0x8000, false},
		{0x8000, 0x0000, false},
	} {
		if got := c.k.Matches(c.q); got != c.match {
			t.Errorf("PKey(%#04x).Matches(%#04x) = %v, want %v", c.k, c.q, got, c.match)
		}
	}
	if !wire.DefaultPKey.Full() || wire.DefaultPKey.Base() != 0x7FFF || wire.PKey(0x7FFF).Full() ||
		wire.PKey(0x8123).Base() != 0x123 || wire.PKey(0x12).String() != "0x0012" {
		t.Error("PKey Full/Base/String")
	}
	if !wire.GSIQKey.Controlled() || wire.QKey(0x7FFFFFFF).Controlled() || wire.GSIQKey != 0x80010000 {
		t.Error("QKey.Controlled")
	}
}

// ibtaCredits is IBTA table 42: the receive credits an ACK credit code
// advertises; code 31 means credits are not tracked.
var ibtaCredits = [31]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// ibtaRNRTimers is IBTA table 45: the RNR NAK timer codes in milliseconds.
var ibtaRNRTimers = [32]string{"655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12",
	"0.16", "0.24", "0.32", "0.48", "0.64", "0.96", "1.28", "1.92", "2.56", "3.84", "5.12", "7.68",
	"10.24", "15.36", "20.48", "30.72", "40.96", "61.44", "81.92", "122.88", "163.84", "245.76",
	"327.68", "491.52"}

func TestSyndrome(t *testing.T) {
	for c := range uint8(32) {
		s := wire.ACKSyndrome(c)
		if uint8(s) != c || !s.IsACK() || s.IsRNR() || s.IsNAK() || s.Kind() != wire.KindACK || s.Value() != c || s.Reserved() {
			t.Errorf("ACKSyndrome(%d) = %#x: kind %d ACK %v RNR %v NAK %v", c, uint8(s), s.Kind(), s.IsACK(), s.IsRNR(), s.IsNAK())
		}
		n, ok := s.Credits()
		if c == wire.CreditsInvalid {
			if ok || s != wire.SyndromeACKUnlimited || s.String() != "ACK" {
				t.Errorf("credit code 31: Credits %d, %v; String %q", n, ok, s)
			}
		} else if !ok || n != ibtaCredits[c] {
			t.Errorf("ACKSyndrome(%d).Credits() = %d, %v; want %d", c, n, ok, ibtaCredits[c])
		}

		s = wire.RNRSyndrome(c)
		d, err := time.ParseDuration(ibtaRNRTimers[c] + "ms")
		if err != nil {
			t.Fatal(err)
		}
		if uint8(s) != 0x20|c || !s.IsRNR() || s.IsACK() || s.IsNAK() || s.Kind() != wire.KindRNR || s.Value() != c {
			t.Errorf("RNRSyndrome(%d) = %#x", c, uint8(s))
		}
		if s.RNRTimer() != d || wire.RNRTimerDuration(c) != d {
			t.Errorf("RNR timer code %d = %v / %v, want %v", c, s.RNRTimer(), wire.RNRTimerDuration(c), d)
		}

		s = wire.NAKSyndrome(wire.NAKCode(c))
		if uint8(s) != 0x60|c || !s.IsNAK() || s.IsACK() || s.IsRNR() || s.Kind() != wire.KindNAK || s.NAKCode() != wire.NAKCode(c) {
			t.Errorf("NAKSyndrome(%d) = %#x", c, uint8(s))
		}
		for _, r := range []wire.Syndrome{wire.Syndrome(0x40 | c), wire.Syndrome(0x80 | c), wire.Syndrome(0xA0 | c), wire.Syndrome(0xE0 | c)} {
			if r.IsACK() || r.IsRNR() || r.IsNAK() || r.String() != "reserved syndrome 0x"+hex2(uint8(r)) {
				t.Errorf("reserved syndrome %#x: ACK %v RNR %v NAK %v %q", uint8(r), r.IsACK(), r.IsRNR(), r.IsNAK(), r)
			}
		}
	}
	if wire.RNRSyndrome(0xFF) != 0x3F || wire.ACKSyndrome(0xFF) != 0x1F || wire.NAKSyndrome(0xFF) != 0x7F {
		t.Error("constructors do not mask their argument to five bits")
	}
	if wire.RNRTimerDuration(1) != 10*time.Microsecond || wire.RNRTimerDuration(0) != 655360*time.Microsecond {
		t.Error("RNR timer codes 0 and 1")
	}
	for s, want := range map[wire.Syndrome]string{
		0x00: "ACK (credits 0)", 0x0A: "ACK (credits 32)", 0x1F: "ACK", 0x21: "RNR NAK (timer 10µs)",
		0x60: "NAK (PSN sequence error)", 0x61: "NAK (invalid request)", 0x62: "NAK (remote access error)",
		0x63: "NAK (remote operational error)", 0x64: "NAK (invalid RD request)", 0x65: "NAK (NAK code 5)",
	} {
		if s.String() != want {
			t.Errorf("Syndrome(%#x).String() = %q, want %q", uint8(s), s, want)
		}
	}
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

func TestCreditCode(t *testing.T) {
	for c, n := range ibtaCredits {
		if got := wire.CreditCode(n); int(got) != c {
			t.Errorf("CreditCode(%d) = %d, want %d", n, got, c)
		}
		if c > 0 && ibtaCredits[c-1] < n-1 {
			if got := wire.CreditCode(n - 1); int(got) != c-1 {
				t.Errorf("CreditCode(%d) = %d, want %d", n-1, got, c-1)
			}
		}
	}
	for n, want := range map[int]uint8{-5: 0, 5: 4, 7: 5, 8: 6, 100: 13, 32767: 29, 1 << 20: 30} {
		if got := wire.CreditCode(n); got != want {
			t.Errorf("CreditCode(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestACKTimeout(t *testing.T) {
	if wire.ACKTimeout(0) != 0 {
		t.Errorf("ACKTimeout(0) = %v, want 0 (disabled)", wire.ACKTimeout(0))
	}
	for e := uint8(1); e < 32; e++ {
		want := time.Duration(4.096e3 * float64(uint64(1)<<e)) // 4.096 us x 2^e, in ns
		if got := wire.ACKTimeout(e); got != want {
			t.Errorf("ACKTimeout(%d) = %v, want %v", e, got, want)
		}
	}
	for e, want := range map[uint8]string{1: "8.192µs", 14: "67.108864ms", 18: "1.073741824s", 31: "2h26m36.093022208s"} {
		if got := wire.ACKTimeout(e).String(); got != want {
			t.Errorf("ACKTimeout(%d) = %s, want %s", e, got, want)
		}
	}
}

// TestQPNFormat: a QPN prints as String for %v and %s and as a number for
// the numeric verbs, with their flags.
func TestQPNFormat(t *testing.T) {
	n := wire.QPN(0x2a)
	for _, c := range []struct{ format, want string }{
		{"%v", "0x00002a"}, {"%s", "0x00002a"}, {"%10v", "  0x00002a"},
		{"%d", "42"}, {"%x", "2a"}, {"%#x", "0x2a"}, {"%06x", "00002a"}, {"%X", "2A"},
	} {
		if got := fmt.Sprintf(c.format, n); got != c.want {
			t.Errorf("Sprintf(%q, QPN 0x2a) = %q, want %q", c.format, got, c.want)
		}
	}
}

// TestGIDText: a GID round-trips through its text form; an IPv4 address
// parses to its IPv4-mapped GID; bad text and zones are errors.
func TestGIDText(t *testing.T) {
	for _, s := range []string{"fd00:198:18::2", "::ffff:198.18.0.2", "fe80::1"} {
		g, err := wire.ParseGID(s)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := g.MarshalText()
		var h wire.GID
		if err := h.UnmarshalText(b); err != nil || h != g || string(b) != s {
			t.Errorf("%s: text %q, back %v, %v", s, b, h, err)
		}
	}
	g, err := wire.ParseGID("198.18.0.2")
	if err != nil || g.String() != "::ffff:198.18.0.2" || g.Addr() != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("IPv4: %v, %v", g, err)
	}
	for _, s := range []string{"", "nope", "fe80::1%eth0"} {
		if _, err := wire.ParseGID(s); err == nil {
			t.Errorf("ParseGID(%q): no error", s)
		}
	}
}
