// The AETH syndrome: ACK with an end-to-end credit count, RNR NAK with a timer
// code, or NAK with an error code; and the IBTA timer encodings the transport
// uses (RNR timer codes, local ACK timeout exponents).

package wire

import (
	"fmt"
	"time"
)

// Syndrome is the first byte of an AETH.
type Syndrome uint8

// SyndromeKind is the class of a syndrome (bits 7:5).
type SyndromeKind uint8

// Syndrome classes.
const (
	KindACK      SyndromeKind = 0 // ACK; low bits: credit count code
	KindRNR      SyndromeKind = 1 // RNR NAK; low bits: RNR timer code
	KindReserved SyndromeKind = 2
	KindNAK      SyndromeKind = 3 // NAK; low bits: NAK code
)

// NAKCode is the low five bits of a NAK syndrome.
type NAKCode uint8

// NAK codes (IBTA table 44).
const (
	NAKPSNSequence  NAKCode = 0 // PSN sequence error
	NAKInvalidReq   NAKCode = 1 // invalid request
	NAKRemoteAccess NAKCode = 2 // remote access error
	NAKRemoteOp     NAKCode = 3 // remote operational error
	NAKInvalidRDReq NAKCode = 4 // invalid RD request
)

var nakNames = [...]string{"PSN sequence error", "invalid request", "remote access error",
	"remote operational error", "invalid RD request"}

func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return fmt.Sprintf("NAK code %d", uint8(c))
}

// CreditsInvalid is the credit code meaning "no end-to-end flow control";
// Linux rxe always sends it.
const CreditsInvalid = 0x1F

// Syndromes commonly sent.
const (
	SyndromeACKUnlimited Syndrome = CreditsInvalid // ACK, credits not tracked
)

// ACKSyndrome returns an ACK syndrome with credit code c (0-31).
func ACKSyndrome(c uint8) Syndrome { return Syndrome(c & 0x1F) }

// RNRSyndrome returns an RNR NAK syndrome with RNR timer code t (0-31).
func RNRSyndrome(t uint8) Syndrome { return Syndrome(0x20 | t&0x1F) }

// NAKSyndrome returns a NAK syndrome with code c.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1F) }

// Kind returns the class of the syndrome.
func (s Syndrome) Kind() SyndromeKind { return SyndromeKind(s >> 5 & 3) }

// Reserved reports whether bit 7, which must be zero, is set.
func (s Syndrome) Reserved() bool { return s&0x80 != 0 }

// Value returns the low five bits: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Kind() == KindACK && !s.Reserved() }

// IsRNR reports whether s is a receiver-not-ready NAK.
func (s Syndrome) IsRNR() bool { return s.Kind() == KindRNR && !s.Reserved() }

// IsNAK reports whether s is a NAK (not RNR).
func (s Syndrome) IsNAK() bool { return s.Kind() == KindNAK && !s.Reserved() }

// NAKCode returns the NAK code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// RNRTimer returns the RNR delay of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() time.Duration { return RNRTimerDuration(s.Value()) }

// Credits returns the end-to-end credit count of an ACK syndrome, and false
// if the code says credits are not tracked.
func (s Syndrome) Credits() (int, bool) {
	c := s.Value()
	if c == CreditsInvalid {
		return 0, false
	}
	return creditTable[c], true
}

func (s Syndrome) String() string {
	switch {
	case s.Reserved() || s.Kind() == KindReserved:
		return fmt.Sprintf("reserved syndrome 0x%02x", uint8(s))
	case s.IsACK():
		if n, ok := s.Credits(); ok {
			return fmt.Sprintf("ACK (credits %d)", n)
		}
		return "ACK"
	case s.IsRNR():
		return fmt.Sprintf("RNR NAK (timer %v)", s.RNRTimer())
	default:
		return "NAK (" + s.NAKCode().String() + ")"
	}
}

// creditTable maps an ACK credit code to the number of receive WQEs it
// advertises (IBTA table 42).
var creditTable = [32]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
	24576, 32768, 0}

// CreditCode returns the largest credit code whose count does not exceed n.
func CreditCode(n int) uint8 {
	c := uint8(0)
	for i := 1; i < CreditsInvalid; i++ {
		if creditTable[i] <= n {
			c = uint8(i)
		}
	}
	return c
}

// rnrTimerMicros maps an RNR timer code to microseconds (IBTA table 45).
// Code 0 is the longest delay, 655.36 ms.
var rnrTimerMicros = [32]int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320,
	480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}

// RNRTimerDuration returns the delay an RNR timer code stands for.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&0x1F]) * time.Microsecond
}

// ACKTimeout returns the local ACK timeout for the 5-bit exponent t:
// 4.096 us x 2^t. Zero means the timer is disabled; it returns 0.
func ACKTimeout(t uint8) time.Duration {
	t &= 0x1F
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}
