package mem

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// mwSetup registers a 4 KiB region at VA 0x10000 that allows windows.
func mwSetup(t *testing.T) (*Table, *MR) {
	t.Helper()
	tb := NewTable(rand.NewPCG(1, 2))
	mr := mustRegister(t, tb, 1, make([]byte, 4096), 0x10000, false, rw|MWBind)
	return tb, mr
}

func TestMWKeys(t *testing.T) {
	tb, mr := mwSetup(t)
	mw, err := tb.AllocMW(1, MWType1)
	if err != nil {
		t.Fatal(err)
	}
	k := tb.MWKey(mw)
	if uint32(k)>>8 != mw.index || mw.index == 0 {
		t.Fatalf("key %#x, index %#x", uint32(k), mw.index)
	}
	if tb.indexUsedLocked(mw.index) {
		t.Fatal("a region holds a key of the window's index")
	}
	if typ, ok := tb.Window(k); !ok || typ != MWType1 {
		t.Fatalf("Window(%#x) = %v, %v", uint32(k), typ, ok)
	}
	// An unbound window's key gives no access.
	if _, err := tb.Remote(k, 1, 0x10000, 8, RemoteRead); !errors.Is(err, ErrKey) {
		t.Fatalf("unbound window: %v", err)
	}
	if err := tb.BindMW(mw, 0, 1, Bind{MR: mr, Addr: 0x10100, Length: 256, Access: RemoteRead, KeyByte: uint8(k) + 1}); err != nil {
		t.Fatal(err)
	}
	nk := tb.MWKey(mw)
	if nk != k&^0xff|(k+1)&0xff {
		t.Fatalf("key after bind %#x, was %#x", uint32(nk), uint32(k))
	}
	// The old key is gone, the new one reads the window and only it.
	if _, err := tb.Remote(k, 1, 0x10100, 8, RemoteRead); !errors.Is(err, ErrKey) {
		t.Fatalf("old key: %v", err)
	}
	mr.Buf[0x100] = 0xAB
	b, err := tb.Remote(nk, 1, 0x10100, 256, RemoteRead)
	if err != nil || len(b) != 256 || b[0] != 0xAB {
		t.Fatalf("read through window: %v %d", err, len(b))
	}
	for _, tc := range []struct {
		va   uint64
		n    int
		need Access
		pd   PD
		want error
	}{
		{0x100ff, 8, RemoteRead, 1, ErrBounds},  // before the window, inside the region
		{0x101f9, 8, RemoteRead, 1, ErrBounds},  // past its end
		{0x10100, 8, RemoteWrite, 1, ErrAccess}, // the region allows it, the window not
		{0x10100, 8, RemoteRead, 2, ErrPD},
	} {
		if _, err := tb.Remote(nk, tc.pd, tc.va, tc.n, tc.need); !errors.Is(err, tc.want) {
			t.Errorf("Remote(%#x, +%d, %v, pd %d) = %v, want %v", tc.va, tc.n, tc.need, tc.pd, err, tc.want)
		}
	}
	// A window's key is no lkey.
	if _, err := tb.Local(wire.LKey(nk), 1, 0x10100, 8, 0); !errors.Is(err, ErrKey) {
		t.Fatalf("window key as lkey: %v", err)
	}
	if tb.Lookup(uint32(nk)) != nil {
		t.Fatal("Lookup found a window")
	}
	// The bound region cannot be deregistered.
	if err := tb.Deregister(mr); !errors.Is(err, ErrBusy) {
		t.Fatalf("Deregister with a window bound: %v", err)
	}
	// A type 1 window is not invalidated by key.
	if err := tb.Invalidate(nk); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Invalidate type 1: %v", err)
	}
	// A zero-length bind unbinds: the key changes again and works no more.
	if err := tb.BindMW(mw, 0, 1, Bind{KeyByte: uint8(nk) + 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Remote(nk, 1, 0x10100, 8, RemoteRead); !errors.Is(err, ErrKey) {
		t.Fatalf("after unbind: %v", err)
	}
	if mr.Refs() != 0 {
		t.Fatalf("region refs %d after unbind", mr.Refs())
	}
	// Rebind, then deallocate: the binding ends with it.
	if err := tb.BindMW(mw, 0, 1, Bind{MR: mr, Addr: 0x10000, Length: 4096, Access: RemoteRead | RemoteWrite, KeyByte: 7}); err != nil {
		t.Fatal(err)
	}
	k7 := tb.MWKey(mw)
	if err := tb.DeallocMW(mw); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Remote(k7, 1, 0x10000, 8, RemoteRead); !errors.Is(err, ErrKey) {
		t.Fatalf("after dealloc: %v", err)
	}
	if err := tb.DeallocMW(mw); !errors.Is(err, ErrKey) {
		t.Fatalf("second dealloc: %v", err)
	}
	if err := tb.Deregister(mr); err != nil {
		t.Fatalf("Deregister after dealloc: %v", err)
	}
	if tb.MWs() != 0 {
		t.Fatalf("%d windows left", tb.MWs())
	}
}

func TestMWType2(t *testing.T) {
	tb, mr := mwSetup(t)
	mw, _ := tb.AllocMW(1, MWType2)
	k := tb.MWKey(mw)
	if err := tb.Invalidate(k); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalidate a free window: %v", err)
	}
	bind := Bind{MR: mr, Addr: 0x10800, Length: 64, Access: RemoteWrite | ZeroBased, KeyByte: 0x42}
	if err := tb.BindMW(mw, 9, 1, bind); err != nil {
		t.Fatal(err)
	}
	k = tb.MWKey(mw)
	if k&0xff != 0x42 {
		t.Fatalf("key %#x", uint32(k))
	}
	// Zero-based: address 0 is the window's first byte; only QP 9 may use it.
	b, err := tb.RemoteQP(k, 1, 9, 0, 64, RemoteWrite)
	if err != nil || &b[0] != &mr.Buf[0x800] {
		t.Fatalf("zero-based write: %v", err)
	}
	if _, err := tb.RemoteQP(k, 1, 8, 0, 8, RemoteWrite); !errors.Is(err, ErrKey) {
		t.Fatalf("other QP: %v", err)
	}
	if _, err := tb.Remote(k, 1, 0, 8, RemoteWrite); !errors.Is(err, ErrKey) {
		t.Fatalf("no QP: %v", err)
	}
	// Bound: no second bind until invalidated.
	if err := tb.BindMW(mw, 9, 1, bind); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bind a bound type 2 window: %v", err)
	}
	if err := tb.Invalidate(k ^ 1); !errors.Is(err, ErrKey) {
		t.Fatalf("invalidate with a stale key byte: %v", err)
	}
	if err := tb.Invalidate(k); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.RemoteQP(k, 1, 9, 0, 8, RemoteWrite); !errors.Is(err, ErrKey) {
		t.Fatalf("after invalidate: %v", err)
	}
	if mr.Refs() != 0 {
		t.Fatal("region still referenced")
	}
	if err := tb.Invalidate(k); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second invalidate: %v", err)
	}
	if err := tb.BindMW(mw, 9, 1, bind); err != nil {
		t.Fatalf("bind after invalidate: %v", err)
	}
	// Destroying another QP leaves it bound; destroying QP 9 frees it.
	if n := tb.UnbindQP(8); n != 0 {
		t.Fatalf("UnbindQP(8) ended %d", n)
	}
	k = tb.MWKey(mw)
	if n := tb.UnbindQP(9); n != 1 || mr.Refs() != 0 {
		t.Fatalf("UnbindQP(9) ended %d, refs %d", n, mr.Refs())
	}
	if _, err := tb.RemoteQP(k, 1, 9, 0, 8, RemoteWrite); !errors.Is(err, ErrKey) {
		t.Fatalf("after the QP's destruction: %v", err)
	}
	if err := tb.BindMW(mw, 9, 1, bind); err != nil {
		t.Fatalf("bind after the QP's destruction: %v", err)
	}
	// A region's R_Key is not invalidated (user-space regions keep theirs).
	if err := tb.Invalidate(mr.RKey); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalidate a region: %v", err)
	}
	if err := tb.Invalidate(0x12345678); !errors.Is(err, ErrKey) {
		t.Fatalf("invalidate nothing: %v", err)
	}
}

func TestMWBindChecks(t *testing.T) {
	tb, mr := mwSetup(t)
	noBind := mustRegister(t, tb, 1, make([]byte, 64), 0x20000, false, rw)
	roBind := mustRegister(t, tb, 1, make([]byte, 64), 0x30000, false, RemoteRead|MWBind)
	zb := mustRegister(t, tb, 1, make([]byte, 64), 0, false, rw|MWBind|ZeroBased)
	otherPD := mustRegister(t, tb, 2, make([]byte, 64), 0x40000, false, rw|MWBind)
	t1, _ := tb.AllocMW(1, MWType1)
	t2, _ := tb.AllocMW(1, MWType2)
	ok := Bind{MR: mr, Addr: 0x10000, Length: 16, Access: RemoteRead}
	for _, tc := range []struct {
		name string
		mw   *MW
		pd   PD
		b    Bind
	}{
		{"type 1 zero-based", t1, 1, Bind{MR: mr, Addr: 0x10000, Length: 16, Access: ZeroBased}},
		{"type 2 zero length", t2, 1, Bind{MR: mr, Addr: 0x10000}},
		{"type 2 no region", t2, 1, Bind{}},
		{"type 2 QP of another PD", t2, 2, ok},
		{"range without region", t1, 1, Bind{Addr: 1, Length: 1}},
		{"region without MWBind", t1, 1, Bind{MR: noBind, Addr: 0x20000, Length: 8, Access: RemoteRead}},
		{"writable window, region without LocalWrite", t1, 1, Bind{MR: roBind, Addr: 0x30000, Length: 8, Access: RemoteWrite}},
		{"atomic window, region without LocalWrite", t1, 1, Bind{MR: roBind, Addr: 0x30000, Length: 8, Access: RemoteAtomic}},
		{"zero-based region", t1, 1, Bind{MR: zb, Addr: 0, Length: 8, Access: RemoteRead}},
		{"region of another PD", t1, 1, Bind{MR: otherPD, Addr: 0x40000, Length: 8, Access: RemoteRead}},
		{"before the region", t1, 1, Bind{MR: mr, Addr: 0xffff, Length: 8, Access: RemoteRead}},
		{"past the region", t1, 1, Bind{MR: mr, Addr: 0x10ff9, Length: 8, Access: RemoteRead}},
		{"longer than the region", t1, 1, Bind{MR: mr, Addr: 0x10000, Length: 4097, Access: RemoteRead}},
		{"unknown access", t1, 1, Bind{MR: mr, Addr: 0x10000, Length: 8, Access: HugeTLB}},
	} {
		before := tb.MWKey(tc.mw)
		if err := tb.BindMW(tc.mw, 5, tc.pd, tc.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
		if tb.MWKey(tc.mw) != before {
			t.Errorf("%s: failed bind changed the key", tc.name)
		}
	}
	// A read-only window on a read-only region is fine.
	if err := tb.BindMW(t1, 0, 1, Bind{MR: roBind, Addr: 0x30000, Length: 64, Access: RemoteRead}); err != nil {
		t.Fatal(err)
	}
	// Rebinding a type 1 window moves its reference to the new region.
	if err := tb.BindMW(t1, 0, 1, ok); err != nil || roBind.Refs() != 0 || mr.Refs() != 1 {
		t.Fatalf("rebind: %v, refs %d %d", err, roBind.Refs(), mr.Refs())
	}
	if err := tb.Deregister(roBind); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AllocMW(1, 3); !errors.Is(err, ErrInvalid) {
		t.Fatalf("type 3: %v", err)
	}
}

// script is a rand.Source that returns its values in turn.
type script []uint64

func (s *script) Uint64() uint64 { v := (*s)[0]; *s = (*s)[1:]; return v }

// Regions never take a key of a window's index: a draw that falls in one is
// drawn again.
func TestMWIndexReserved(t *testing.T) {
	src := script{0x123456_05, 0x123456_09, 0x77}
	tb := NewTable(&src)
	mw, _ := tb.AllocMW(1, MWType1)
	if mw.index != 0x123456 {
		t.Fatalf("index %#x", mw.index)
	}
	mr := mustRegister(t, tb, 1, make([]byte, 8), 0, false, rw)
	if mr.LKey != 0x77 {
		t.Fatalf("region key %#x, want the draw after the window's index", uint32(mr.LKey))
	}
}

func TestReregister(t *testing.T) {
	tb, mr := mwSetup(t)
	key := mr.RKey
	n, err := tb.Reregister(mr, 2, LocalWrite|RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if n.LKey != mr.LKey || n.RKey != key || &n.Buf[0] != &mr.Buf[0] || mr.Valid() {
		t.Fatalf("reregistered %+v", n)
	}
	if _, err := tb.Remote(key, 1, 0x10000, 8, RemoteRead); !errors.Is(err, ErrPD) {
		t.Fatalf("old PD: %v", err)
	}
	if _, err := tb.Remote(key, 2, 0x10000, 8, RemoteWrite); !errors.Is(err, ErrAccess) {
		t.Fatalf("dropped access: %v", err)
	}
	if _, err := tb.Remote(key, 2, 0x10000, 8, RemoteRead); err != nil {
		t.Fatal(err)
	}
	// Without remote access the R_Key goes.
	n2, err := tb.Reregister(n, 2, LocalWrite|MWBind)
	if err != nil || n2.RKey != 0 {
		t.Fatalf("%v, rkey %#x", err, uint32(n2.RKey))
	}
	if _, err := tb.Remote(key, 2, 0x10000, 8, RemoteRead); !errors.Is(err, ErrKey) {
		t.Fatalf("no remote access: %v", err)
	}
	if _, err := tb.Reregister(n, 2, LocalWrite); !errors.Is(err, ErrKey) {
		t.Fatalf("retired region: %v", err)
	}
	for _, a := range []Access{RemoteWrite, LocalWrite | ZeroBased} {
		if _, err := tb.Reregister(n2, 2, a); !errors.Is(err, ErrInvalid) {
			t.Errorf("access %v: %v", a, err)
		}
	}
	mw, _ := tb.AllocMW(2, MWType1)
	if err := tb.BindMW(mw, 0, 2, Bind{MR: n2, Addr: 0x10000, Length: 8, KeyByte: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Reregister(n2, 2, LocalWrite|MWBind|RemoteRead); !errors.Is(err, ErrBusy) {
		t.Fatalf("with a window bound: %v", err)
	}
}

// Accesses through a window take the regions' path: no allocation.
func TestMWChecksDoNotAllocate(t *testing.T) {
	tb, mr := mwSetup(t)
	w1, _ := tb.AllocMW(1, MWType1)
	w2, _ := tb.AllocMW(1, MWType2)
	if err := tb.BindMW(w1, 0, 1, Bind{MR: mr, Addr: 0x10000, Length: 1024, Access: RemoteWrite, KeyByte: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tb.BindMW(w2, 7, 1, Bind{MR: mr, Addr: 0x10400, Length: 1024, Access: RemoteWrite | ZeroBased, KeyByte: 2}); err != nil {
		t.Fatal(err)
	}
	k1, k2 := tb.MWKey(w1), tb.MWKey(w2)
	for name, f := range map[string]func(){
		"type 1":            func() { _, _ = tb.RemoteQP(k1, 1, 3, 0x10008, 100, RemoteWrite) },
		"type 2":            func() { _, _ = tb.RemoteQP(k2, 1, 7, 8, 100, RemoteWrite) },
		"type 2, other QP":  func() { _, _ = tb.RemoteQP(k2, 1, 8, 8, 100, RemoteWrite) },
		"type 1, too long":  func() { _, _ = tb.RemoteQP(k1, 1, 3, 0x10008, 2000, RemoteWrite) },
		"type 1 as an lkey": func() { _, _ = tb.Local(wire.LKey(k1), 1, 0x10008, 8, 0) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s: %v allocations", name, a)
		}
	}
}

// TestMWConcurrent binds, invalidates and rebinds a window while other
// goroutines access the region through it, for the race detector: every
// access either succeeds inside the window's current range or fails with
// ErrKey.
func TestMWConcurrent(t *testing.T) {
	tb, mr := mwSetup(t)
	mw, _ := tb.AllocMW(1, MWType2)
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
				k := tb.MWKey(mw)
				b, err := tb.RemoteQP(k, 1, 5, 0, 64, RemoteWrite)
				if err == nil && len(b) != 64 {
					t.Errorf("%d bytes", len(b))
				} else if err != nil && !errors.Is(err, ErrKey) {
					t.Error(err)
				}
			}
		})
	}
	for i := range 500 {
		if err := tb.BindMW(mw, 5, 1, Bind{MR: mr, Addr: 0x10000 + uint64(i%8)*64, Length: 512, Access: RemoteWrite | ZeroBased, KeyByte: uint8(i)}); err != nil {
			t.Fatal(err)
		}
		if err := tb.Invalidate(tb.MWKey(mw)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if mr.Refs() != 0 {
		t.Fatalf("refs %d", mr.Refs())
	}
}

func BenchmarkRemoteLookupWindow(b *testing.B) {
	tb := NewTable(nil)
	buf := make([]byte, 4096)
	var mr *MR
	for i := range 1024 {
		m := mustRegister(b, tb, 1, buf, 0, true, rw|MWBind)
		if i == 517 {
			mr = m
		}
	}
	mw, _ := tb.AllocMW(1, MWType2)
	if err := tb.BindMW(mw, 9, 1, Bind{MR: mr, Addr: mr.VA, Length: 4096, Access: RemoteWrite, KeyByte: 1}); err != nil {
		b.Fatal(err)
	}
	k := tb.MWKey(mw)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.RemoteQP(k, 1, 9, mr.VA+64, 1024, RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRemoteQPLast: the region kept from the last lookup serves the next
// access through its key, and every way a key leaves the table (a
// reregistration, a deregistration, a window's invalidation) makes the
// next access see the table as RemoteQP does.
func TestRemoteQPLast(t *testing.T) {
	tb, mr := mwSetup(t)
	var last *MR
	access := func(key wire.RKey, pd PD, qpn uint32) error {
		t.Helper()
		_, err := tb.RemoteQPLast(&last, key, pd, qpn, 0x10000, 8, RemoteWrite)
		_, want := tb.RemoteQP(key, pd, qpn, 0x10000, 8, RemoteWrite)
		if !errors.Is(err, want) && !(err == nil && want == nil) {
			t.Fatalf("RemoteQPLast: %v, RemoteQP: %v", err, want)
		}
		return err
	}
	if err := access(mr.RKey, 1, 0); err != nil || last != mr {
		t.Fatalf("first access: %v, kept %p want %p", err, last, mr)
	}
	if err := access(mr.RKey, 1, 0); err != nil {
		t.Fatal(err)
	}
	// Reregistered: the old region is retired, the new one found and kept.
	n, err := tb.Reregister(mr, 1, rw|MWBind)
	if err != nil {
		t.Fatal(err)
	}
	if err := access(n.RKey, 1, 0); err != nil || last != n {
		t.Fatalf("after reregistration: %v, kept %p want %p", err, last, n)
	}
	// A window bound for QP 9 through its key, then invalidated.
	mw, _ := tb.AllocMW(1, MWType2)
	if err := tb.BindMW(mw, 9, 1, Bind{MR: n, Addr: 0x10000, Length: 64, Access: RemoteWrite, KeyByte: 7}); err != nil {
		t.Fatal(err)
	}
	k := tb.MWKey(mw)
	if err := access(k, 1, 9); err != nil {
		t.Fatal(err)
	}
	if err := access(k, 1, 8); !errors.Is(err, ErrKey) {
		t.Fatalf("the window through another QP: %v", err)
	}
	if err := access(k, 1, 9); err != nil {
		t.Fatal(err)
	}
	if err := tb.Invalidate(k); err != nil {
		t.Fatal(err)
	}
	if err := access(k, 1, 9); !errors.Is(err, ErrKey) {
		t.Fatalf("after invalidation: %v", err)
	}
	// Deregistered while kept.
	if err := access(n.RKey, 1, 0); err != nil || last != n {
		t.Fatal(err)
	}
	if err := tb.Deregister(n); err != nil {
		t.Fatal(err)
	}
	if err := access(n.RKey, 1, 0); !errors.Is(err, ErrKey) {
		t.Fatalf("after deregistration: %v", err)
	}
}

// TestGatherLast: the region kept from the last local access serves the
// next one through its L_Key until it leaves the table (reregistered, then
// deregistered), and a window's key is no L_Key even when kept.
func TestGatherLast(t *testing.T) {
	tb, mr := mwSetup(t)
	copy(mr.Buf, "kept region")
	var last *MR
	dst := make([]byte, 4)
	gather := func(key wire.LKey) error {
		t.Helper()
		err := tb.GatherLast(&last, dst, 1, []SGE{{Addr: 0x10000, Length: 4, LKey: key}}, 0)
		want := tb.Gather(dst, 1, []SGE{{Addr: 0x10000, Length: 4, LKey: key}}, 0)
		if !errors.Is(err, want) && !(err == nil && want == nil) {
			t.Fatalf("GatherLast: %v, Gather: %v", err, want)
		}
		return err
	}
	if err := gather(mr.LKey); err != nil || last != mr || string(dst) != "kept" {
		t.Fatalf("first gather: %v, %q, kept %p want %p", err, dst, last, mr)
	}
	if err := tb.ScatterLast(&last, []byte("KEPT"), 1, []SGE{{Addr: 0x10000, Length: 4, LKey: mr.LKey}}, 0); err != nil || string(mr.Buf[:4]) != "KEPT" {
		t.Fatalf("scatter: %v, %q", err, mr.Buf[:4])
	}
	n, err := tb.Reregister(mr, 1, rw|MWBind)
	if err != nil {
		t.Fatal(err)
	}
	if err := gather(n.LKey); err != nil || last != n {
		t.Fatalf("after reregistration: %v, kept %p want %p", err, last, n)
	}
	mw, _ := tb.AllocMW(1, MWType1)
	if err := tb.BindMW(mw, 0, 1, Bind{MR: n, Addr: 0x10000, Length: 64, Access: RemoteRead, KeyByte: 3}); err != nil {
		t.Fatal(err)
	}
	k := tb.MWKey(mw)
	last = tb.get(uint32(k)) // a window kept (as RemoteQPLast would)
	if err := gather(wire.LKey(k)); !errors.Is(err, ErrKey) {
		t.Fatalf("a window's key as an L_Key: %v", err)
	}
	if err := tb.BindMW(mw, 0, 1, Bind{MR: n, Addr: 0x10000}); err != nil { // unbinds
		t.Fatal(err)
	}
	if err := gather(n.LKey); err != nil || last != n {
		t.Fatal(err)
	}
	if err := tb.Deregister(n); err != nil {
		t.Fatal(err)
	}
	if err := gather(n.LKey); !errors.Is(err, ErrKey) {
		t.Fatalf("after deregistration: %v", err)
	}
}
