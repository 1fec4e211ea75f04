package mem

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/softrdma/softrdma/wire"
)

const rw = LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic

func mustRegister(t testing.TB, tb *Table, pd PD, buf []byte, va uint64, useReal bool, a Access) *MR {
	t.Helper()
	mr, err := tb.Register(pd, buf, va, useReal, a)
	if err != nil {
		t.Fatalf("Register(%v): %v", a, err)
	}
	return mr
}

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LocalWrite"},
		{LocalWrite | RemoteRead, "LocalWrite|RemoteRead"},
		{rw | MWBind | ZeroBased, "LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic|MWBind|ZeroBased"},
		{OnDemand | HugeTLB | RelaxedOrdering, "OnDemand|HugeTLB|RelaxedOrdering"},
		{RemoteRead | FlushGlobal | FlushPersistent, "RemoteRead|FlushGlobal|FlushPersistent"},
		{RemoteRead | 1<<10, "RemoteRead|0x400"},
		{1 << 31, "0x80000000"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tc.a), got, tc.want)
		}
	}
	// The values are libibverbs' enum ibv_access_flags.
	if LocalWrite != 1 || RemoteWrite != 2 || RemoteRead != 4 || RemoteAtomic != 8 ||
		MWBind != 16 || ZeroBased != 32 || OnDemand != 64 || HugeTLB != 128 || RelaxedOrdering != 1<<20 ||
		FlushGlobal != 256 || FlushPersistent != 512 {
		t.Error("access flag values differ from ibv_access_flags")
	}
	if OptionalAccess != 0x3ff00000 {
		t.Errorf("OptionalAccess = %#x, want 0x3ff00000", uint32(OptionalAccess))
	}
}

func TestRegisterAccessValidation(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 64)
	for _, tc := range []struct {
		a  Access
		ok bool
	}{
		{0, true},
		{LocalWrite, true},
		{RemoteRead, true},
		{LocalWrite | RemoteWrite, true},
		{LocalWrite | RemoteAtomic, true},
		{rw | MWBind | OnDemand | HugeTLB | RelaxedOrdering, true},
		{LocalWrite | 1<<25, true}, // optional range: ignored hint
		{RemoteWrite, false},
		{RemoteAtomic, false},
		{RemoteRead | RemoteWrite, false},
		{LocalWrite | FlushGlobal, true},
		{FlushGlobal, true},                   // FLUSH needs no local write
		{LocalWrite | FlushPersistent, false}, // not without a Persist hook
		{LocalWrite | 1<<10, false},
		{LocalWrite | 1<<31, false},
	} {
		mr, err := tb.Register(1, buf, 0, true, tc.a)
		if tc.ok != (err == nil) {
			t.Errorf("Register(%v) error = %v, want ok=%v", tc.a, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !errors.Is(err, ErrMem)) {
			t.Errorf("Register(%v) error %v does not wrap ErrInvalid and ErrMem", tc.a, err)
		}
		if err == nil {
			if mr.Access != tc.a {
				t.Errorf("mr.Access = %v, want %v", mr.Access, tc.a)
			}
			if (tc.a&(RemoteAccess|FlushAccess) != 0) != (mr.RKey != 0) {
				t.Errorf("Register(%v): RKey = %#x", tc.a, mr.RKey)
			}
			if mr.RKey != 0 && uint32(mr.RKey) != uint32(mr.LKey) {
				t.Errorf("RKey %#x != LKey %#x", mr.RKey, mr.LKey)
			}
		}
	}
}

func TestRegisterVA(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 100)
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))

	mr := mustRegister(t, tb, 1, buf, 12345, true, RemoteRead)
	if mr.VA != addr || mr.Length != 100 || mr.PD != 1 || &mr.Buf[0] != &buf[0] {
		t.Errorf("real VA: got VA %#x Length %d PD %d, want VA %#x", mr.VA, mr.Length, mr.PD, addr)
	}
	b, err := tb.Remote(mr.RKey, 1, addr+10, 5, RemoteRead)
	if err != nil || &b[0] != &buf[10] || len(b) != 5 || cap(b) != 5 {
		t.Errorf("Remote at real VA: %v, len %d cap %d", err, len(b), cap(b))
	}

	mr = mustRegister(t, tb, 1, buf, 0, false, RemoteRead|ZeroBased)
	if mr.VA != 0 {
		t.Errorf("ZeroBased VA = %#x", mr.VA)
	}
	if b, err := tb.Remote(mr.RKey, 1, 99, 1, RemoteRead); err != nil || &b[0] != &buf[99] {
		t.Errorf("ZeroBased Remote(99): %v", err)
	}

	mr = mustRegister(t, tb, 1, buf, 0x1000_0000, false, RemoteRead)
	if mr.VA != 0x1000_0000 {
		t.Errorf("iova VA = %#x", mr.VA)
	}
	if b, err := tb.Remote(mr.RKey, 1, 0x1000_0000+7, 3, RemoteRead); err != nil || &b[0] != &buf[7] {
		t.Errorf("iova Remote: %v", err)
	}

	// A region may end at 2^64-1, but not at 2^64, where VA+Length wraps to
	// 0 (like ib_umem_get's addr+size < addr check).
	mr = mustRegister(t, tb, 1, buf, math.MaxUint64-100, false, RemoteRead)
	if b, err := tb.Remote(mr.RKey, 1, math.MaxUint64-1, 1, RemoteRead); err != nil || &b[0] != &buf[99] {
		t.Errorf("last byte of a region at the top of the address space: %v", err)
	}
	if _, err := tb.Remote(mr.RKey, 1, math.MaxUint64, 1, RemoteRead); err != ErrBounds {
		t.Errorf("past a region at the top of the address space: %v, want ErrBounds", err)
	}
	for _, tc := range []struct {
		name    string
		va      uint64
		useReal bool
		a       Access
	}{
		{"ends at 2^64", math.MaxUint64 - 99, false, 0},
		{"ZeroBased with va", 8, false, ZeroBased},
		{"ZeroBased with real VA", 0, true, ZeroBased},
	} {
		if _, err := tb.Register(1, buf, tc.va, tc.useReal, tc.a); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}

	// Zero-length regions register, and nothing non-empty is inside them.
	mr = mustRegister(t, tb, 1, nil, 0, true, RemoteRead)
	if _, err := tb.Remote(mr.RKey, 1, mr.VA, 1, RemoteRead); !errors.Is(err, ErrBounds) {
		t.Errorf("empty region: %v, want ErrBounds", err)
	}
}

// TestKeys checks that keys are non-zero, distinct, and look random: no two
// consecutive registrations get nearby keys, and every bit is set in about
// half of them.
func TestKeys(t *testing.T) {
	const n = 4096
	tb := NewTable(nil)
	seen := make(map[wire.LKey]bool)
	keys := make([]uint32, 0, n)
	buf := make([]byte, 8)
	for range n {
		mr := mustRegister(t, tb, 1, buf, 0, true, LocalWrite|RemoteWrite)
		if mr.LKey == 0 {
			t.Fatal("key 0 issued")
		}
		if seen[mr.LKey] {
			t.Fatalf("key %#x issued twice", mr.LKey)
		}
		seen[mr.LKey] = true
		keys = append(keys, uint32(mr.LKey))
		if tb.Lookup(uint32(mr.LKey)) != mr {
			t.Fatalf("Lookup(%#x) is not the new region", mr.LKey)
		}
	}
	if tb.Len() != n {
		t.Errorf("Len = %d, want %d", tb.Len(), n)
	}
	near := 0
	for i := 1; i < n; i++ {
		d := int64(keys[i]) - int64(keys[i-1])
		if d > -1<<16 && d < 1<<16 {
			near++
		}
	}
	// Expected 4096 * 2^17 / 2^32 = 0.125 for random keys; a bound of 1
	// failed one run in about 140 (P(2 or more) = 0.7%, seen in CI), 3
	// fails one in 100,000, and a sequential allocator gives 4,095.
	if near > 3 {
		t.Errorf("%d of %d consecutive keys within 2^16 of each other", near, n-1)
	}
	for bit := range 32 {
		ones := 0
		for _, k := range keys {
			ones += int(k >> bit & 1)
		}
		if ones < n*4/10 || ones > n*6/10 { // 12 standard deviations
			t.Errorf("bit %d set in %d of %d keys", bit, ones, n)
		}
	}
	// Two devices do not share a key sequence.
	a, b := NewTable(nil), NewTable(nil)
	same := 0
	for range 8 {
		ma := mustRegister(t, a, 1, buf, 0, true, 0)
		mb := mustRegister(t, b, 1, buf, 0, true, 0)
		if ma.LKey == mb.LKey {
			same++
		}
	}
	if same > 1 {
		t.Errorf("two tables issued %d equal keys out of 8", same)
	}
}

// seqSource replays a fixed sequence of values, then a counter.
type seqSource struct {
	vals []uint64
	next uint64
}

func (s *seqSource) Uint64() uint64 {
	if len(s.vals) > 0 {
		v := s.vals[0]
		s.vals = s.vals[1:]
		return v
	}
	s.next++
	return s.next
}

func TestKeyDrawSkipsZeroAndUsed(t *testing.T) {
	src := &seqSource{vals: []uint64{0xabcd_0000_0042, 1 << 32, 0x42, 0x1_0000_0042, 0x77}}
	tb := NewTable(src)
	buf := make([]byte, 8)
	if mr := mustRegister(t, tb, 1, buf, 0, true, 0); mr.LKey != 0x42 {
		t.Errorf("first key %#x, want 0x42 (low 32 bits of the draw)", mr.LKey)
	}
	// 1<<32 truncates to 0; 0x42 and 0x1_0000_0042 are taken.
	if mr := mustRegister(t, tb, 1, buf, 0, true, 0); mr.LKey != 0x77 {
		t.Errorf("second key %#x, want 0x77", mr.LKey)
	}
	// Seeded sources give reproducible keys.
	k := func() wire.LKey {
		return mustRegister(t, NewTable(rand.NewPCG(1, 2)), 1, buf, 0, true, 0).LKey
	}
	if k1, k2 := k(), k(); k1 != k2 {
		t.Error("same seed, different keys")
	}
}

func TestLookupDeregister(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 64)
	mr := mustRegister(t, tb, 3, buf, 0, true, rw)
	other := mustRegister(t, tb, 3, buf, 0, true, rw)
	if tb.Lookup(uint32(mr.LKey)) != mr || !mr.Valid() {
		t.Fatal("Lookup of a registered key failed")
	}
	if tb.Lookup(0) != nil || tb.Lookup(uint32(mr.LKey)^0x80) != nil {
		t.Error("Lookup of an unissued key succeeded")
	}
	if err := tb.Deregister(mr); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if mr.Valid() || tb.Lookup(uint32(mr.LKey)) != nil {
		t.Error("region still valid after Deregister")
	}
	if _, err := tb.Local(mr.LKey, 3, mr.VA, 1, 0); err != ErrKey {
		t.Errorf("Local after Deregister: %v, want ErrKey", err)
	}
	if _, err := tb.Remote(mr.RKey, 3, mr.VA, 1, RemoteRead); err != ErrKey {
		t.Errorf("Remote after Deregister: %v, want ErrKey", err)
	}
	if err := tb.Deregister(mr); err != ErrKey {
		t.Errorf("second Deregister: %v, want ErrKey", err)
	}
	if err := tb.Deregister(nil); err != ErrKey {
		t.Errorf("Deregister(nil): %v, want ErrKey", err)
	}
	if err := NewTable(nil).Deregister(other); err != ErrKey {
		t.Errorf("Deregister in another table: %v, want ErrKey", err)
	}
	if tb.Lookup(uint32(other.LKey)) != other || tb.Len() != 1 {
		t.Error("Deregister disturbed another region")
	}
	if mr.Acquire() {
		t.Error("Acquire succeeded on a deregistered region")
	}
}

func TestDeregisterBusy(t *testing.T) {
	tb := NewTable(nil)
	mr := mustRegister(t, tb, 1, make([]byte, 8), 0, true, RemoteRead)
	ok1, ok2 := mr.Acquire(), mr.Acquire()
	if !ok1 || !ok2 || mr.Refs() != 2 {
		t.Fatalf("Acquire: refs %d", mr.Refs())
	}
	if err := tb.Deregister(mr); err != ErrBusy || !errors.Is(err, ErrMem) {
		t.Fatalf("Deregister while in use: %v, want ErrBusy", err)
	}
	if _, err := tb.Remote(mr.RKey, 1, mr.VA, 8, RemoteRead); err != nil {
		t.Errorf("region unusable after failed Deregister: %v", err)
	}
	mr.Release()
	if err := tb.Deregister(mr); err != ErrBusy {
		t.Errorf("Deregister with one reference: %v, want ErrBusy", err)
	}
	mr.Release()
	if err := tb.Deregister(mr); err != nil {
		t.Errorf("Deregister after Release: %v", err)
	}
	if mr.Refs() != 0 || mr.Acquire() {
		t.Error("deregistered region can be acquired")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Release without Acquire did not panic")
			}
		}()
		mr2 := mustRegister(t, tb, 1, make([]byte, 8), 0, true, 0)
		mr2.Release()
	}()
}

// TestAcquireDeregisterRace races Acquire/Release against Deregister: once
// Deregister succeeds no reference may be taken, and none may be held.
func TestAcquireDeregisterRace(t *testing.T) {
	for range 20 {
		tb := NewTable(nil)
		mr := mustRegister(t, tb, 1, make([]byte, 8), 0, true, RemoteRead)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if mr.Acquire() {
						if !mr.Valid() {
							t.Error("acquired reference on a dead region")
						}
						mr.Release()
					}
				}
			})
		}
		for tb.Deregister(mr) != nil {
		}
		if mr.Acquire() || mr.Refs() != 0 {
			t.Error("reference after Deregister")
		}
		close(stop)
		wg.Wait()
	}
}

func TestLocalChecks(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = byte(i)
	}
	ro := mustRegister(t, tb, 1, buf, 0x1000, false, 0)
	wr := mustRegister(t, tb, 1, buf, 0x1000, false, LocalWrite)
	for _, tc := range []struct {
		name string
		key  wire.LKey
		pd   PD
		va   uint64
		n    int
		need Access
		want error
		off  int // expected start in buf when want == nil
	}{
		{"read", ro.LKey, 1, 0x1000, 64, 0, nil, 0},
		{"read middle", ro.LKey, 1, 0x1010, 16, 0, nil, 16},
		{"write", wr.LKey, 1, 0x1000, 64, LocalWrite, nil, 0},
		{"last byte", wr.LKey, 1, 0x103f, 1, LocalWrite, nil, 63},
		{"zero length, bad key", 0xdead, 9, math.MaxUint64, 0, LocalWrite, nil, -1},
		{"bad key", ro.LKey ^ 1, 1, 0x1000, 1, 0, ErrKey, 0},
		{"key 0", 0, 1, 0x1000, 1, 0, ErrKey, 0},
		{"wrong PD", ro.LKey, 2, 0x1000, 1, 0, ErrPD, 0},
		{"write without LocalWrite", ro.LKey, 1, 0x1000, 1, LocalWrite, ErrAccess, 0},
		{"before start", ro.LKey, 1, 0xfff, 1, 0, ErrBounds, 0},
		{"straddles start", ro.LKey, 1, 0xfff, 2, 0, ErrBounds, 0},
		{"one past end", ro.LKey, 1, 0x1000, 65, 0, ErrBounds, 0},
		{"at end", ro.LKey, 1, 0x1040, 1, 0, ErrBounds, 0},
		{"far past end", ro.LKey, 1, 0x2000, 1, 0, ErrBounds, 0},
		{"va+n wraps", ro.LKey, 1, math.MaxUint64, 2, 0, ErrBounds, 0},
		{"n wraps from inside", ro.LKey, 1, 0x1001, math.MaxInt, 0, ErrBounds, 0},
		{"negative n", ro.LKey, 1, 0x1000, -1, 0, ErrBounds, 0},
	} {
		b, err := tb.Local(tc.key, tc.pd, tc.va, tc.n, tc.need)
		if err != tc.want {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrMem) || b != nil {
				t.Errorf("%s: %v does not wrap ErrMem or slice non-nil", tc.name, err)
			}
			continue
		}
		if len(b) != tc.n || cap(b) != tc.n {
			t.Errorf("%s: len %d cap %d, want %d", tc.name, len(b), cap(b), tc.n)
		}
		if tc.n > 0 && &b[0] != &buf[tc.off] {
			t.Errorf("%s: slice does not start at buf[%d]", tc.name, tc.off)
		}
	}
}

func TestRemoteChecks(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 64)
	local := mustRegister(t, tb, 1, buf, 0, false, LocalWrite|ZeroBased)
	rd := mustRegister(t, tb, 1, buf, 0, false, RemoteRead|ZeroBased)
	all := mustRegister(t, tb, 1, buf, 1<<40, false, rw)
	for _, tc := range []struct {
		name string
		key  wire.RKey
		pd   PD
		va   uint64
		n    int
		need Access
		want error
	}{
		{"read", rd.RKey, 1, 0, 64, RemoteRead, nil},
		{"write", all.RKey, 1, 1 << 40, 64, RemoteWrite, nil},
		{"atomic", all.RKey, 1, 1<<40 + 56, 8, RemoteAtomic, nil},
		{"zero length, bad key", 0x1234, 7, math.MaxUint64, 0, RemoteWrite, nil},
		{"lkey of a local-only region", wire.RKey(local.LKey), 1, 0, 1, RemoteRead, ErrKey},
		{"rkey 0", 0, 1, 0, 1, RemoteRead, ErrKey},
		{"unknown", all.RKey + 1, 1, 1 << 40, 1, RemoteRead, ErrKey},
		{"wrong PD", all.RKey, 2, 1 << 40, 1, RemoteRead, ErrPD},
		{"write to read-only", rd.RKey, 1, 0, 1, RemoteWrite, ErrAccess},
		{"atomic to read-only", rd.RKey, 1, 0, 8, RemoteAtomic, ErrAccess},
		{"ZeroBased past end", rd.RKey, 1, 60, 5, RemoteRead, ErrBounds},
		{"iova below start", all.RKey, 1, 1<<40 - 1, 1, RemoteRead, ErrBounds},
		{"iova atomic past end", all.RKey, 1, 1<<40 + 57, 8, RemoteAtomic, ErrBounds},
		{"va+n wraps", rd.RKey, 1, math.MaxUint64 - 2, 8, RemoteRead, ErrBounds},
		{"negative n", rd.RKey, 1, 0, -8, RemoteRead, ErrBounds},
	} {
		b, err := tb.Remote(tc.key, tc.pd, tc.va, tc.n, tc.need)
		if err != tc.want {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		} else if err == nil && len(b) != tc.n {
			t.Errorf("%s: len %d, want %d", tc.name, len(b), tc.n)
		}
	}
}

func TestErrorsDistinct(t *testing.T) {
	errs := []error{ErrKey, ErrPD, ErrAccess, ErrBounds, ErrLength, ErrAlign, ErrBusy, ErrInvalid}
	for i, a := range errs {
		if !errors.Is(a, ErrMem) {
			t.Errorf("%v does not wrap ErrMem", a)
		}
		for j, b := range errs {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v matches %v", a, b)
			}
		}
	}
}

func TestChecksDoNotAllocate(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 4096)
	mr := mustRegister(t, tb, 1, buf, 0, true, rw)
	for name, f := range map[string]func(){
		"Local":       func() { _, _ = tb.Local(mr.LKey, 1, mr.VA+8, 100, LocalWrite) },
		"Remote":      func() { _, _ = tb.Remote(mr.RKey, 1, mr.VA+8, 100, RemoteWrite) },
		"Remote fail": func() { _, _ = tb.Remote(mr.RKey, 2, mr.VA+8, 100, RemoteWrite) },
		"Lookup":      func() { _ = tb.Lookup(uint32(mr.LKey)) },
		"Acquire":     func() { mr.Acquire(); mr.Release() },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

// TestConcurrentLookups runs data-path lookups while other regions come and
// go, for the race detector.
func TestConcurrentLookups(t *testing.T) {
	tb := NewTable(nil)
	buf := make([]byte, 64)
	mr := mustRegister(t, tb, 1, buf, 0, true, rw)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tb.Remote(mr.RKey, 1, mr.VA, 64, RemoteRead); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 500 {
		o := mustRegister(t, tb, 1, buf, 0, true, rw)
		if err := tb.Deregister(o); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
}

func BenchmarkRemoteLookup(b *testing.B) {
	tb := NewTable(nil)
	buf := make([]byte, 4096)
	var mrs []*MR
	for range 1024 {
		mrs = append(mrs, mustRegister(b, tb, 1, buf, 0, true, rw))
	}
	mr := mrs[517]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.Remote(mr.RKey, 1, mr.VA+64, 1024, RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}
