// Device-allocated memory: page-aligned buffers for registration, outside
// the Go heap where the platform allows.

package mem

import (
	"fmt"
	"os"
	"unsafe"
)

// Alloc returns n bytes of zeroed, page-aligned memory for a device
// allocation. On Linux the memory is an anonymous private mapping outside
// the Go heap that must be returned with Free; elsewhere it is an aligned
// part of an over-allocated Go slice that the garbage collector reclaims.
// It fails with ErrInvalid if n <= 0.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: Alloc(%d)", ErrInvalid, n)
	}
	return alloc(n)
}

// Free releases memory returned by Alloc. b must be that slice, or a
// reslice of it with the same start and capacity; it must not be used
// afterwards, nor be registered.
func Free(b []byte) error {
	if cap(b) == 0 {
		return fmt.Errorf("%w: Free of an empty slice", ErrInvalid)
	}
	return free(b)
}

// pageRound rounds n up to a multiple of the page size.
func pageRound(n int) int {
	pg := os.Getpagesize()
	return (n + pg - 1) &^ (pg - 1)
}

// allocHeap is the portable Alloc: a Go slice over-allocated by a page and
// cut at the first page boundary.
func allocHeap(n int) []byte {
	pg := os.Getpagesize()
	raw := make([]byte, n+pg)
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	off := int(-addr & uintptr(pg-1))
	return raw[off : off+n : off+n]
}
