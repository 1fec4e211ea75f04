//go:build amd64

package crc

import "golang.org/x/sys/cpu"

// useAVX512 reports whether the AVX-512 VPCLMULQDQ code can run. The
// cpu.X86.HasAVX512* fields are only true when the OS saves the ZMM state.
// Tests clear it to exercise the fallback.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ

// The assembly reads at least 64 bytes.
const _ = uint(minAVX512Len - 64)

// foldAVX512 returns the CRC state (not inverted) after processing p, starting
// from state. len(p) must be at least 64; k must point to foldConsts. It is
// implemented in crc_amd64.s.
//
//go:noescape
func foldAVX512(state uint32, p []byte, k *[28]uint64) uint32

// updateAVX512 is Update for len(p) >= minAVX512Len on CPUs with AVX-512
// VPCLMULQDQ.
func updateAVX512(crc uint32, p []byte) uint32 {
	return ^foldAVX512(^crc, p, &foldConsts)
}
