// Linux file mappings: memory that a FLUSH can make persistent.

package mem

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// MapFile maps n bytes of f from offset off (a multiple of the page size),
// shared and read-write, so that stores into the mapping reach the file
// through the page cache. The file must be open for reading and writing and
// already hold off+n bytes: a mapping past the end of a file faults on
// access. Unmap releases it.
func MapFile(f *os.File, off int64, n int) ([]byte, error) {
	if n <= 0 || off < 0 || off%int64(os.Getpagesize()) != 0 {
		return nil, fmt.Errorf("%w: MapFile offset %d length %d", ErrInvalid, off, n)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("mem: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() < off+int64(n) {
		return nil, fmt.Errorf("%w: %s holds %d bytes, not the %d mapped at %d", ErrInvalid, f.Name(), st.Size(), n, off)
	}
	b, err := syscall.Mmap(int(f.Fd()), off, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mem: mmap %s: %w", f.Name(), err)
	}
	return b, nil
}

// Unmap releases a mapping MapFile returned.
func Unmap(b []byte) error { return free(b) }

// SyncFile writes the pages of a MapFile mapping that hold b back to the
// file and waits for the writes to complete (msync with MS_SYNC): the
// persistence of a FLUSH. b is any part of the mapping.
func SyncFile(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	// msync wants a page-aligned start: widen b down to its first page.
	// The widened slice stays inside the mapping, which starts on a page.
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := p &^ uintptr(os.Getpagesize()-1)
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, start, p-start+uintptr(len(b)), syscall.MS_SYNC)
	runtime.KeepAlive(b)
	if e != 0 {
		return fmt.Errorf("mem: msync: %w", e)
	}
	return nil
}
