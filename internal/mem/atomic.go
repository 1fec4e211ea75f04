// Atomic operations of the transport (IBTA 9.4.5: CmpSwap and FetchAdd) on a
// 64-bit word of registered memory, as the responder applies them.

package mem

import (
	"sync/atomic"
	"unsafe"
)

// word returns b as a *uint64, or an error if it is not one 8-byte aligned
// word.
func word(b []byte) (*uint64, error) {
	if len(b) != 8 {
		return nil, ErrBounds
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)&7 != 0 {
		return nil, ErrAlign
	}
	return (*uint64)(p), nil
}

func mustWord(b []byte) *uint64 {
	p, err := word(b)
	if err != nil {
		panic(err)
	}
	return p
}

// CompareSwap atomically replaces the host-endian uint64 at b with swap if it
// equals compare, and returns the value it held before. b must be 8 bytes at
// an 8-byte aligned address, else CompareSwap panics; see word.
func CompareSwap(b []byte, compare, swap uint64) (orig uint64) {
	return compareSwap(mustWord(b), compare, swap)
}

// compareSwap returns the old value; a CAS failure means the word changed
// between the load and the CAS, so it retries with the new value.
func compareSwap(p *uint64, compare, swap uint64) uint64 {
	for {
		orig := atomic.LoadUint64(p)
		if orig != compare || atomic.CompareAndSwapUint64(p, orig, swap) {
			return orig
		}
	}
}

// FetchAdd atomically adds add (modulo 2^64) to the host-endian uint64 at b
// and returns the value it held before. b must be 8 bytes at an 8-byte
// aligned address, else FetchAdd panics; see word.
func FetchAdd(b []byte, add uint64) (orig uint64) {
	return atomic.AddUint64(mustWord(b), add) - add
}
