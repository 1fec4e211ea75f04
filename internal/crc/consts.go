package crc

// foldConsts holds the carry-less multiplication constants used by the
// AVX-512 code. They are generated and checked by TestConstants in
// consts_test.go (see genConstants there for what each entry is); the byte
// offsets are relied on by crc_amd64.s.
//
// Each pair {a, b} folds a 128-bit lane forward by F bits: a is
// reflect64(x^(F+63) mod P) and b is reflect64(x^(F-1) mod P).
var foldConsts = [28]uint64{
	// 0: fold by 2048 bits (4 accumulators of 512 bits).
	0x7cc8e1e700000000, 0x03f9f86300000000,
	// 16: fold by 1536 bits.
	0x67f7947600000000, 0xc56d949600000000,
	// 32: fold by 1024 bits.
	0x7d657a1000000000, 0x7406fa9500000000,
	// 48: fold by 512 bits.
	0x653d982200000000, 0xcad38e8f00000000,
	// 64: fold the four lanes of a 512-bit register by 384, 256, 128, 0 bits.
	0x69ccfc0d00000000, 0x2a28386200000000,
	0x9570d49500000000, 0x01b5fd1d00000000,
	0x65673b4600000000, 0x9ba54c6f00000000,
	0, 0,
	// 128: fold by 32 bits (appends the 32 zero bits of the CRC).
	0xccaa009e00000000, 0x0000000100000000,
	// 144: reflect64(x^63 mod P), 0.
	0xb8bc676500000000, 0,
	// 160: Barrett: reflect64(floor(x^64/P) * x^31), reflect64(P * x^31).
	0x00000001f7011641, 0x00000001db710641,
	// 176: 48 bytes of VPSHUFB indices: 16 x 0x80 (a zero byte), 0..15,
	// 16 x 0x80. Loading 16 bytes at offset r or 16+r shifts a register
	// left or right by 16-r or r bytes.
	0x8080808080808080, 0x8080808080808080,
	0x0706050403020100, 0x0f0e0d0c0b0a0908,
	0x8080808080808080, 0x8080808080808080,
}
