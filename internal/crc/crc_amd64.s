//go:build amd64

#include "textflag.h"

// Offsets into foldConsts (see consts.go).
#define K2048 0
#define K1536 16
#define K1024 32
#define K512 48
#define KLANES 64
#define K128 96
#define K32 128
#define K64 144
#define KBARRETT 160
#define KSHUF 176

// func foldAVX512(state uint32, p []byte, k *[28]uint64) uint32
//
// Bit-reflected CRC-32 by carry-less folding. Z1-Z4 are four independent
// 512-bit accumulators covering 256 consecutive bytes. Each loop iteration
// multiplies the low and high quadword of every 128-bit lane by the two
// constants that move it 2048 bits forward (modulo P), and xors in the next
// 256 bytes. The accumulators are then merged, the remaining 64- and 16-byte
// blocks and the last partial block are folded in, and the final 128 bits are
// reduced to 32 with a fold by 32 bits, a fold by 64 bits and a Barrett
// reduction. Inputs of 64 to 255 bytes start with one 512-bit accumulator.
TEXT ·foldAVX512(SB), NOSPLIT, $0-44
	MOVL state+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	// The state is xored into the first four bytes of the message.
	VMOVD AX, X0
	CMPQ  CX, $256
	JAE   start256

	// 64 <= len(p) < 256: a single 512-bit accumulator.
	VMOVDQU64       0(SI), Z4
	VPXORQ          Z0, Z4, Z4
	ADDQ            $64, SI
	SUBQ            $64, CX
	VBROADCASTI32X4 K512(DX), Z7
	JMP             tail64

start256:
	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VPXORQ    Z0, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX

	VBROADCASTI32X4 K2048(DX), Z0
	CMPQ            CX, $256
	JB              merge4

	PCALIGN $32
loop256:
	VMOVDQU64  0(SI), Z5
	VMOVDQU64  64(SI), Z6
	VMOVDQU64  128(SI), Z7
	VMOVDQU64  192(SI), Z8
	VPCLMULQDQ $0x00, Z0, Z1, Z9
	VPCLMULQDQ $0x11, Z0, Z1, Z1
	VPCLMULQDQ $0x00, Z0, Z2, Z10
	VPCLMULQDQ $0x11, Z0, Z2, Z2
	VPCLMULQDQ $0x00, Z0, Z3, Z11
	VPCLMULQDQ $0x11, Z0, Z3, Z3
	VPCLMULQDQ $0x00, Z0, Z4, Z12
	VPCLMULQDQ $0x11, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z9, Z5, Z1
	VPTERNLOGD $0x96, Z10, Z6, Z2
	VPTERNLOGD $0x96, Z11, Z7, Z3
	VPTERNLOGD $0x96, Z12, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

merge4:
	// Move Z1, Z2, Z3 forward by 1536, 1024 and 512 bits onto Z4.
	VBROADCASTI32X4 K1536(DX), Z5
	VBROADCASTI32X4 K1024(DX), Z6
	VBROADCASTI32X4 K512(DX), Z7
	VPCLMULQDQ      $0x00, Z5, Z1, Z8
	VPCLMULQDQ      $0x11, Z5, Z1, Z1
	VPCLMULQDQ      $0x00, Z6, Z2, Z9
	VPCLMULQDQ      $0x11, Z6, Z2, Z2
	VPCLMULQDQ      $0x00, Z7, Z3, Z10
	VPCLMULQDQ      $0x11, Z7, Z3, Z3
	VPTERNLOGD      $0x96, Z8, Z1, Z4
	VPTERNLOGD      $0x96, Z9, Z2, Z4
	VPTERNLOGD      $0x96, Z10, Z3, Z4

	// Remaining 64-byte blocks, one accumulator.
tail64:
	CMPQ CX, $64
	JB   merge1

loop64:
	VMOVDQU64  0(SI), Z5
	VPCLMULQDQ $0x00, Z7, Z4, Z8
	VPCLMULQDQ $0x11, Z7, Z4, Z4
	VPTERNLOGD $0x96, Z8, Z5, Z4
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

merge1:
	// Move lanes 0, 1, 2 of Z4 forward by 384, 256 and 128 bits (the
	// constants for lane 3 are zero) and xor everything into X8.
	VMOVDQU64      KLANES(DX), Z5
	VPCLMULQDQ     $0x00, Z5, Z4, Z8
	VPCLMULQDQ     $0x11, Z5, Z4, Z9
	VPXORQ         Z8, Z9, Z8
	VEXTRACTI32X4  $3, Z4, X9
	VEXTRACTI64X4  $1, Z8, Y10
	VPXORQ         Y10, Y8, Y8
	VEXTRACTI32X4  $1, Y8, X10
	VPTERNLOGD     $0x96, X9, X10, X8

	// Remaining 16-byte blocks.
	VMOVDQU K128(DX), X5
	CMPQ    CX, $16
	JB      partial

loop16:
	VMOVDQU    0(SI), X6
	VPCLMULQDQ $0x00, X5, X8, X9
	VPCLMULQDQ $0x11, X5, X8, X8
	VPTERNLOGD $0x96, X9, X6, X8
	ADDQ       $16, SI
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

	// A final partial block of r = CX bytes (1..15). With X the 16 folded
	// bytes, the message ends in X[0:16] followed by the r tail bytes. Split
	// that into A = X[0:r], zero-extended in front to 16 bytes, and
	// B = X[r:16] followed by the tail (the last 16 bytes of p with the
	// first 16-r bytes replaced). A precedes B by 128 bits, so fold A by 128
	// bits and xor it into B.
partial:
	TESTQ CX, CX
	JZ    reduce
	VMOVDQU    -16(SI)(CX*1), X6
	LEAQ       KSHUF(DX), BX
	VMOVDQU    16(BX)(CX*1), X7
	VMOVDQU    0(BX)(CX*1), X9
	VPSHUFB    X7, X8, X7
	VPSHUFB    X9, X8, X10
	VPBLENDVB  X9, X7, X6, X6
	VPCLMULQDQ $0x00, X5, X10, X11
	VPCLMULQDQ $0x11, X5, X10, X10
	VPTERNLOGD $0x96, X11, X10, X6
	VMOVDQA    X6, X8

reduce:
	// Fold by 32 bits: X8 = value * x^32, degree < 96.
	VMOVDQU    K32(DX), X5
	VPCLMULQDQ $0x00, X5, X8, X9
	VPCLMULQDQ $0x11, X5, X8, X8
	VPXOR      X9, X8, X8

	// Fold the low quadword into the high one: degree < 64, in the high
	// quadword of X8 (the low quadword is now unused).
	VMOVDQU    K64(DX), X5
	VPCLMULQDQ $0x00, X5, X8, X9
	VPXOR      X9, X8, X8

	// Barrett: q = floor(hi32 * mu / x^32), state = lo32 xor (q * P) mod x^32.
	VPSLLQ     $32, X8, X9
	VMOVDQU    KBARRETT(DX), X6
	VPCLMULQDQ $0x01, X6, X9, X10
	VPCLMULQDQ $0x10, X6, X10, X10
	VPEXTRD    $2, X10, AX
	VPEXTRD    $3, X8, BX
	XORL       BX, AX
	MOVL       AX, ret+40(FP)
	VZEROUPPER
	RET
