// Linux device memory: anonymous private mappings.

package mem

import (
	"fmt"
	"syscall"
)

func alloc(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, pageRound(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mem: mmap %d bytes: %w", n, err)
	}
	return b[:n], nil
}

func free(b []byte) error {
	// syscall.Munmap finds the mapping by its last byte, &b[cap(b)-1].
	if err := syscall.Munmap(b[:cap(b)]); err != nil {
		return fmt.Errorf("%w: munmap: %w", ErrInvalid, err)
	}
	return nil
}
