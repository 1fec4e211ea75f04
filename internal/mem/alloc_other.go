//go:build !linux

// Portable device memory: aligned Go slices.

package mem

func alloc(n int) ([]byte, error) { return allocHeap(n), nil }

func free([]byte) error { return nil }
