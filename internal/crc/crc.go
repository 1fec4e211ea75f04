// Package crc computes the IEEE CRC-32 (the checksum of hash/crc32 with
// crc32.IEEETable, used for the RoCEv2 invariant CRC) faster than hash/crc32
// on amd64 CPUs that have AVX-512 with VPCLMULQDQ.
//
// Inputs of 256 bytes or more are folded with carry-less multiplication over
// four independent 512-bit accumulators (256 bytes per loop iteration), which
// keeps several VPCLMULQDQ instructions in flight instead of waiting on the
// latency of a single accumulator; inputs of 64 to 255 bytes use one. Inputs
// shorter than 64 bytes, other CPUs and other architectures use hash/crc32.
// The results are identical to hash/crc32 for every input.
package crc

import "hash/crc32"

// minAVX512Len is the shortest input that takes the AVX-512 path. The
// assembly needs at least 64 bytes; from 64 bytes on it is faster than
// hash/crc32 on an AMD Zen 4 (EPYC).
const minAVX512Len = 64

// Update returns the result of adding the bytes in p to crc, exactly as
// crc32.Update(crc, crc32.IEEETable, p) does.
func Update(crc uint32, p []byte) uint32 {
	if useAVX512 && len(p) >= minAVX512Len {
		return updateAVX512(crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}
