package mem

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// aligned returns a 16-byte slice whose first byte is 8-byte aligned.
func aligned() []byte {
	w := make([]uint64, 2)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 16)
}

func host(b []byte) uint64 { return *(*uint64)(unsafe.Pointer(&b[0])) }

func TestCompareSwap(t *testing.T) {
	b := aligned()[:8]
	*(*uint64)(unsafe.Pointer(&b[0])) = 5
	if orig := CompareSwap(b, 4, 9); orig != 5 || host(b) != 5 {
		t.Errorf("mismatch: orig %d value %d, want 5 5", orig, host(b))
	}
	if orig := CompareSwap(b, 5, 9); orig != 5 || host(b) != 9 {
		t.Errorf("match: orig %d value %d, want 5 9", orig, host(b))
	}
	if orig, err := Atomic(b, OpCompareSwap, 9, 1<<63); err != nil || orig != 9 || host(b) != 1<<63 {
		t.Errorf("Atomic CmpSwap: %d %v value %d", orig, err, host(b))
	}
}

func TestFetchAdd(t *testing.T) {
	b := aligned()[8:]
	if orig := FetchAdd(b, 3); orig != 0 || host(b) != 3 {
		t.Errorf("orig %d value %d", orig, host(b))
	}
	if orig := FetchAdd(b, ^uint64(0)); orig != 3 || host(b) != 2 { // wraps: 3 + (2^64-1)
		t.Errorf("wrap: orig %d value %d", orig, host(b))
	}
	if orig, err := Atomic(b, OpFetchAdd, 10, 12345); err != nil || orig != 2 || host(b) != 12 {
		t.Errorf("Atomic FetchAdd: %d %v value %d", orig, err, host(b))
	}
}

// TestConcurrentFetchAdd adds from several goroutines: the sum is exact and
// every original value is returned exactly once.
func TestConcurrentFetchAdd(t *testing.T) {
	const workers, per = 8, 5000
	b := aligned()[:8]
	origs := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range per {
				orig, err := Atomic(b, OpFetchAdd, 1, 0)
				if err != nil {
					t.Error(err)
					return
				}
				origs[w] = append(origs[w], orig)
			}
		})
	}
	wg.Wait()
	if got := host(b); got != workers*per {
		t.Fatalf("sum %d, want %d", got, workers*per)
	}
	seen := make([]bool, workers*per)
	for _, os := range origs {
		for _, o := range os {
			if seen[o] {
				t.Fatalf("original value %d returned twice", o)
			}
			seen[o] = true
		}
	}
}

// TestConcurrentCompareSwap builds a counter from CompareSwap loops racing
// with FetchAdd: no update may be lost.
func TestConcurrentCompareSwap(t *testing.T) {
	const workers, per = 4, 5000
	b := aligned()[:8]
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range per {
				for cur := uint64(0); ; {
					orig := CompareSwap(b, cur, cur+1)
					if orig == cur {
						break
					}
					cur = orig
				}
			}
		})
		wg.Go(func() {
			for range per {
				FetchAdd(b, 1)
			}
		})
	}
	wg.Wait()
	if got := host(b); got != 2*workers*per {
		t.Fatalf("counter %d, want %d", got, 2*workers*per)
	}
}

func TestAtomicRejects(t *testing.T) {
	b := aligned()
	for off := 1; off < 8; off++ {
		if _, err := Atomic(b[off:off+8], OpFetchAdd, 1, 0); err != ErrAlign {
			t.Errorf("offset %d: %v, want ErrAlign", off, err)
		}
	}
	for _, n := range []int{0, 4, 7, 9, 16} {
		if _, err := Atomic(b[:n], OpFetchAdd, 1, 0); err != ErrBounds {
			t.Errorf("length %d: %v, want ErrBounds", n, err)
		}
	}
	if _, err := Atomic(b[:8], 0, 1, 0); err != ErrInvalid {
		t.Errorf("unknown op: %v, want ErrInvalid", err)
	}
	if host(b) != 0 || host(b[8:]) != 0 {
		t.Error("a rejected atomic changed memory")
	}
	for name, f := range map[string]func(){
		"CompareSwap": func() { CompareSwap(b[4:12], 0, 1) },
		"FetchAdd":    func() { FetchAdd(b[:4], 1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s on a bad word did not panic", name)
				}
			}()
			f()
		}()
	}
}

// TestRemoteAtomic runs the responder's path: check the R_Key for an 8-byte
// atomic, then apply it to device memory.
func TestRemoteAtomic(t *testing.T) {
	buf, err := Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Free(buf) }()
	tb := NewTable(nil)
	mr := mustRegister(t, tb, 1, buf, 0, false, LocalWrite|RemoteAtomic|ZeroBased)
	w, err := tb.Remote(mr.RKey, 1, 16, 8, RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if orig, err := Atomic(w, OpFetchAdd, 7, 0); err != nil || orig != 0 {
		t.Fatalf("FetchAdd: %d %v", orig, err)
	}
	if orig, err := Atomic(w, OpCompareSwap, 7, 42); err != nil || orig != 7 || host(buf[16:]) != 42 {
		t.Fatalf("CompareSwap: %d %v", orig, err)
	}
	w, _ = tb.Remote(mr.RKey, 1, 20, 8, RemoteAtomic)
	if _, err := Atomic(w, OpFetchAdd, 1, 0); err != ErrAlign {
		t.Errorf("misaligned remote atomic: %v, want ErrAlign", err)
	}
}

func TestAtomicDoesNotAllocate(t *testing.T) {
	b := aligned()[:8]
	if a := testing.AllocsPerRun(100, func() { _, _ = Atomic(b, OpCompareSwap, 1, 2) }); a != 0 {
		t.Errorf("%v allocations", a)
	}
}

// The tests drive both operations through one function, with the checks
// the responder makes first (word).

// AtomicOp selects an atomic operation for Atomic (tests).
type AtomicOp uint8

// Atomic operations.
const (
	OpCompareSwap AtomicOp = iota + 1 // ATOMIC CmpSwap
	OpFetchAdd                        // ATOMIC FetchAdd
)

// Atomic (tests) applies op to the host-endian uint64 at b and returns its original
// value: for OpCompareSwap, a is the compare and c the swap operand; for
// OpFetchAdd, a is the addend and c is ignored. The transport converts the
// big-endian AtomicETH operands to host values before calling, and the
// original value back for the AtomicAckETH. Atomic operations from any
// goroutines are atomic with respect to each other (not to plain copies such
// as Scatter into the same bytes). It fails with ErrBounds unless len(b) is 8,
// with ErrAlign unless b's address is 8-byte aligned (the responder answers
// with a misaligned-atomic NAK), and with ErrInvalid for an unknown op.
func Atomic(b []byte, op AtomicOp, a, c uint64) (orig uint64, err error) {
	p, err := word(b)
	if err != nil {
		return 0, err
	}
	switch op {
	case OpCompareSwap:
		return compareSwap(p, a, c), nil
	case OpFetchAdd:
		return atomic.AddUint64(p, a) - a, nil
	}
	return 0, ErrInvalid
}
