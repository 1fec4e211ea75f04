package mem

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// sgeEnv holds two writable regions of PD 1 with known contents: one at its
// real address and one at an iova.
type sgeEnv struct {
	tb   *Table
	bufs [2][]byte
	mrs  [2]*MR
}

const envSize = 256

func newSGEEnv(t testing.TB) *sgeEnv {
	e := &sgeEnv{tb: NewTable(nil)}
	for i := range e.bufs {
		e.bufs[i] = make([]byte, envSize)
	}
	e.mrs[0] = mustRegister(t, e.tb, 1, e.bufs[0], 0, true, LocalWrite)
	e.mrs[1] = mustRegister(t, e.tb, 1, e.bufs[1], 0x10000, false, LocalWrite)
	e.reset()
	return e
}

func (e *sgeEnv) reset() {
	for i := range envSize {
		e.bufs[0][i] = byte(i*7 + 1)
		e.bufs[1][i] = byte(i*13 + 5)
	}
}

func (e *sgeEnv) snapshot() []byte { return append(bytes.Clone(e.bufs[0]), e.bufs[1]...) }

// ref is the reference implementation: the address of every byte of the
// message the SGE list describes, in order, computed one byte at a time.
func (e *sgeEnv) ref(sges []SGE) []*byte {
	var p []*byte
	for _, s := range sges {
		r := 0
		if s.LKey == e.mrs[1].LKey {
			r = 1
		}
		for j := uint64(0); j < uint64(s.Length); j++ {
			p = append(p, &e.bufs[r][s.Addr-e.mrs[r].VA+j])
		}
	}
	return p
}

// sge returns an SGE for [start, start+n) of region r.
func (e *sgeEnv) sge(r, start, n int) SGE {
	return SGE{Addr: e.mrs[r].VA + uint64(start), Length: uint32(n), LKey: e.mrs[r].LKey}
}

// randomSGEs returns n in-bounds SGEs of lengths 0 to maxLen over both
// regions; they may overlap.
func (e *sgeEnv) randomSGEs(rng *rand.Rand, n, maxLen int) []SGE {
	s := make([]SGE, n)
	for i := range s {
		l := rng.IntN(maxLen + 1)
		s[i] = e.sge(rng.IntN(2), rng.IntN(envSize-l+1), l)
	}
	return s
}

// checkAgainstRef runs Gather and Scatter of n bytes at offset off and
// compares data, memory and error with the reference.
func (e *sgeEnv) checkAgainstRef(t testing.TB, sges []SGE, off, n int) {
	t.Helper()
	e.reset()
	ptrs := e.ref(sges)
	wantErr := error(nil)
	if off+n > len(ptrs) {
		wantErr = ErrLength
	}

	dst := make([]byte, n)
	err := e.tb.Gather(dst, 1, sges, off)
	if err != wantErr {
		t.Fatalf("Gather(off %d, n %d) over %d bytes: err %v, want %v", off, n, len(ptrs), err, wantErr)
	}
	if err == nil {
		for j := range n {
			if dst[j] != *ptrs[off+j] {
				t.Fatalf("Gather(off %d, n %d): byte %d = %#x, want %#x", off, n, j, dst[j], *ptrs[off+j])
			}
		}
	}

	src := make([]byte, n)
	for j := range src {
		src[j] = byte(0x80 + j + off)
	}
	err = e.tb.Scatter(src, 1, sges, off)
	if err != wantErr {
		t.Fatalf("Scatter(off %d, n %d): err %v, want %v", off, n, err, wantErr)
	}
	if err != nil {
		return
	}
	got := e.snapshot()
	e.reset()
	for j := range n {
		*ptrs[off+j] = src[j]
	}
	if want := e.snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("Scatter(off %d, n %d): memory differs from reference", off, n)
	}
}

func TestGatherScatterVsReference(t *testing.T) {
	e := newSGEEnv(t)
	rng := rand.New(rand.NewPCG(1, 1))
	layouts := map[string][]SGE{
		"1 SGE":   {e.sge(0, 5, 50)},
		"2 SGEs":  {e.sge(1, 100, 30), e.sge(0, 0, 21)},
		"32 SGEs": e.randomSGEs(rng, 32, 7),
		"with empty SGEs": {e.sge(0, 0, 0), e.sge(1, 3, 4), e.sge(1, 200, 0),
			e.sge(0, envSize-5, 5), e.sge(1, 0, 0)},
		"none": nil,
	}
	for name, sges := range layouts {
		t.Run(name, func(t *testing.T) {
			total := int(TotalLength(sges))
			for off := 0; off <= total+1; off++ {
				for n := 0; off+n <= total+1; n++ {
					e.checkAgainstRef(t, sges, off, n)
				}
			}
		})
	}
}

func TestGatherScatterErrors(t *testing.T) {
	e := newSGEEnv(t)
	ro := mustRegister(t, e.tb, 1, e.bufs[0], 0, true, 0)
	good := e.sge(0, 0, 10)
	bad := SGE{Addr: 0, Length: 10, LKey: 0xbad}
	skipped := SGE{Addr: 0, Length: 0, LKey: 0xbad}
	buf := make([]byte, 20)
	for _, tc := range []struct {
		name    string
		sges    []SGE
		pd      PD
		off, n  int
		gather  error
		scatter error
	}{
		{"bad key not reached", []SGE{good, bad}, 1, 0, 10, nil, nil},
		{"bad key reached", []SGE{good, bad}, 1, 0, 11, ErrKey, ErrKey},
		{"bad key reached at offset", []SGE{good, bad}, 1, 10, 1, ErrKey, ErrKey},
		{"bad key skipped by offset", []SGE{bad, good}, 1, 10, 10, nil, nil},
		{"empty SGE not looked up", []SGE{skipped, good, skipped}, 1, 0, 10, nil, nil},
		{"wrong PD", []SGE{good}, 2, 0, 1, ErrPD, ErrPD},
		{"read-only region", []SGE{{ro.VA, 10, ro.LKey}}, 1, 0, 10, nil, ErrAccess},
		{"SGE partly out of bounds", []SGE{e.sge(0, envSize-5, 10)}, 1, 0, 2, ErrBounds, ErrBounds},
		{"SGE wraps", []SGE{{^uint64(0) - 1, 4, good.LKey}}, 1, 0, 1, ErrBounds, ErrBounds},
		{"list too short", []SGE{good, good}, 1, 5, 16, ErrLength, ErrLength},
		{"negative offset", []SGE{good}, 1, -1, 1, ErrLength, ErrLength},
		{"negative offset, empty", []SGE{good}, 1, -1, 0, ErrLength, ErrLength},
		{"offset past end, empty", []SGE{good}, 1, 11, 0, ErrLength, ErrLength},
		{"offset at end, empty", []SGE{good}, 1, 10, 0, nil, nil},
		{"empty list", nil, 1, 0, 1, ErrLength, ErrLength},
	} {
		if err := e.tb.Gather(buf[:tc.n], tc.pd, tc.sges, tc.off); err != tc.gather {
			t.Errorf("%s: Gather: %v, want %v", tc.name, err, tc.gather)
		}
		if err := e.tb.Scatter(buf[:tc.n], tc.pd, tc.sges, tc.off); err != tc.scatter {
			t.Errorf("%s: Scatter: %v, want %v", tc.name, err, tc.scatter)
		}
	}
}

// TestViewVsGather: View gives the registered memory itself for a range in
// one SGE (the bytes Gather copies, at the reference's addresses), and
// declines, checking nothing, a range across SGEs, past the list or empty;
// a range in one SGE whose check fails gives Gather's error.
func TestViewVsGather(t *testing.T) {
	e := newSGEEnv(t)
	rng := rand.New(rand.NewPCG(2, 2))
	for name, sges := range map[string][]SGE{
		"1 SGE":           {e.sge(0, 5, 50)},
		"2 SGEs":          {e.sge(1, 100, 30), e.sge(0, 0, 21)},
		"16 SGEs":         e.randomSGEs(rng, 16, 9),
		"with empty SGEs": {e.sge(0, 0, 0), e.sge(1, 3, 4), e.sge(1, 200, 0), e.sge(0, envSize-5, 5)},
		"none":            nil,
	} {
		t.Run(name, func(t *testing.T) {
			e.reset()
			ptrs := e.ref(sges)
			// ends[k] is where SGE k's bytes end in the message.
			var ends []int
			end := 0
			for _, s := range sges {
				end += int(s.Length)
				ends = append(ends, end)
			}
			oneSGE := func(off, n int) bool {
				for k, s := range sges {
					if begin := ends[k] - int(s.Length); off >= begin && off < ends[k] {
						return off+n <= ends[k]
					}
				}
				return false
			}
			for off := -1; off <= len(ptrs)+1; off++ {
				for n := -1; off+n <= len(ptrs)+1; n++ {
					b, ok, err := e.tb.View(1, sges, off, n)
					want := off >= 0 && n >= 1 && off+n <= len(ptrs) && oneSGE(off, n)
					if ok != want || err != nil {
						t.Fatalf("off %d n %d: ok %v err %v, want ok %v", off, n, ok, err, want)
					}
					if !ok {
						continue
					}
					if len(b) != n || cap(b) != n || &b[0] != ptrs[off] || &b[n-1] != ptrs[off+n-1] {
						t.Fatalf("off %d n %d: a view of %d bytes that is not the memory", off, n, len(b))
					}
					g := make([]byte, n)
					if err := e.tb.Gather(g, 1, sges, off); err != nil || !bytes.Equal(g, b) {
						t.Fatalf("off %d n %d: Gather %v %x, View %x", off, n, err, g, b)
					}
				}
			}
		})
	}
	good := e.sge(0, 0, 10)
	for _, tc := range []struct {
		name string
		sges []SGE
		pd   PD
		want error
	}{
		{"bad key", []SGE{{Addr: 0, Length: 10, LKey: 0xbad}}, 1, ErrKey},
		{"wrong PD", []SGE{good}, 2, ErrPD},
		{"SGE partly out of bounds", []SGE{e.sge(0, envSize-5, 10)}, 1, ErrBounds},
	} {
		if _, ok, err := e.tb.View(tc.pd, tc.sges, 0, 2); !ok || err != tc.want {
			t.Errorf("%s: View ok %v err %v, want %v", tc.name, ok, err, tc.want)
		}
		if err := e.tb.Gather(make([]byte, 2), tc.pd, tc.sges, 0); err != tc.want {
			t.Errorf("%s: Gather %v, want %v", tc.name, err, tc.want)
		}
	}
	sges := []SGE{e.sge(0, 0, 100), e.sge(1, 10, 100)}
	if a := testing.AllocsPerRun(100, func() { _, _, _ = e.tb.View(1, sges, 120, 50) }); a != 0 {
		t.Errorf("View allocates %v times", a)
	}
}

func TestTotalLength(t *testing.T) {
	if n := TotalLength(nil); n != 0 {
		t.Errorf("TotalLength(nil) = %d", n)
	}
	s := []SGE{{Length: 1<<32 - 1}, {Length: 1<<32 - 1}, {Length: 2}}
	if n := TotalLength(s); n != 1<<33 {
		t.Errorf("TotalLength = %d, want %d", n, uint64(1<<33))
	}
}

func TestGatherScatterDoNotAllocate(t *testing.T) {
	e := newSGEEnv(t)
	sges := []SGE{e.sge(0, 0, 100), e.sge(1, 10, 100), e.sge(0, 100, 100), e.sge(1, 150, 100)}
	buf := make([]byte, 300)
	for name, f := range map[string]func(){
		"Gather":  func() { _ = e.tb.Gather(buf, 1, sges, 50) },
		"Scatter": func() { _ = e.tb.Scatter(buf, 1, sges, 50) },
		"Gather error": func() {
			_ = e.tb.Gather(buf, 2, sges, 50)
		},
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

// FuzzGatherScatter checks Gather and Scatter against the reference over SGE
// layouts drawn from the fuzz input: each 3 bytes give an SGE's region and
// start, and a length of 0 to 15 bytes.
func FuzzGatherScatter(f *testing.F) {
	f.Add([]byte{0, 0, 10}, uint8(0), uint8(10))
	f.Add([]byte{0, 250, 5, 1, 0, 0, 0x81, 7, 15}, uint8(3), uint8(30))
	f.Add([]byte{1, 255, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint8(7), uint8(1))
	e := newSGEEnv(f)
	f.Fuzz(func(t *testing.T, layout []byte, off, n uint8) {
		if len(layout) > 3*32 {
			layout = layout[:3*32]
		}
		var sges []SGE
		for ; len(layout) >= 3; layout = layout[3:] {
			r, start, l := int(layout[0]&1), int(layout[1]), int(layout[2]&15)
			start = min(start, envSize-l)
			sges = append(sges, e.sge(r, start, l))
		}
		e.checkAgainstRef(t, sges, int(off), int(n))
	})
}

func BenchmarkGather(b *testing.B) {
	const size = 4096
	for _, nsge := range []int{1, 4} {
		b.Run(fmt.Sprintf("4KiB/%dSGE", nsge), func(b *testing.B) {
			tb := NewTable(nil)
			for range 1000 { // a populated table
				mustRegister(b, tb, 1, make([]byte, 8), 0, true, 0)
			}
			sges := make([]SGE, nsge)
			for i := range sges {
				mr := mustRegister(b, tb, 1, make([]byte, size/nsge), 0, true, LocalWrite)
				sges[i] = SGE{Addr: mr.VA, Length: uint32(size / nsge), LKey: mr.LKey}
			}
			dst := make([]byte, size)
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if err := tb.Gather(dst, 1, sges, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
