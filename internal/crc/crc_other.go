//go:build !amd64

package crc

import "hash/crc32"

// useAVX512 is always false outside amd64. It is a variable, not a constant,
// so that the code shape and the tests are the same on every architecture.
var useAVX512 = false

// updateAVX512 is never called outside amd64 (useAVX512 is false).
func updateAVX512(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}
