// The reader's bounded spin: its setting (the spin itself is Linux's,
// spin_linux.go).

package udp

import (
	"os"
	"strconv"
	"time"
)

// DefaultRxSpin is Config.RxSpin's default.
const DefaultRxSpin = 100 * time.Microsecond

// rxSpinEnv reads SOFTRDMA_RXSPIN, which overrides the default spin (a
// duration such as 30us, or a number of microseconds; 0 turns the spin
// off) for programs that cannot set Config, such as those over the C
// library.
func rxSpinEnv() (time.Duration, bool) {
	s := os.Getenv("SOFTRDMA_RXSPIN")
	if s == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(s); err == nil {
		return max(d, 0), true
	}
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(max(n, 0)) * time.Microsecond, true
	}
	return 0, false
}

// rxSpin resolves Config.RxSpin: 0 means no spin.
func rxSpin(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > 0:
		return d
	}
	if e, ok := rxSpinEnv(); ok {
		return e
	}
	return DefaultRxSpin
}
