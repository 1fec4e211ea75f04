//go:build !linux

// File mappings are supported on Linux only.

package mem

import (
	"fmt"
	"os"
)

// MapFile is not supported on this platform: it returns ErrInvalid.
func MapFile(f *os.File, off int64, n int) ([]byte, error) {
	return nil, fmt.Errorf("%w: file-backed memory needs Linux", ErrInvalid)
}

// Unmap is not supported on this platform.
func Unmap(b []byte) error { return fmt.Errorf("%w: no file mappings", ErrInvalid) }

// SyncFile is not supported on this platform.
func SyncFile(b []byte) error { return fmt.Errorf("%w: no file mappings", ErrInvalid) }
