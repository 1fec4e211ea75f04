// Typed number spaces of the InfiniBand transport: 24-bit PSNs and QPNs with
// wrapping arithmetic, partition and queue keys, memory keys and the MSN.

package wire

import (
	"fmt"
	"net/netip"
)

// Mask24 keeps the low 24 bits of a value; PSNs, QPNs and MSNs are 24 bits.
const Mask24 = 1<<24 - 1

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons use the signed 24-bit distance, as the IBTA requires.
type PSN uint32

// Add returns p+n modulo 2^24. n may be negative.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & Mask24) }

// Diff returns the signed distance p-q in the range [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p)<<8-uint32(q)<<8) >> 8 }

// Before reports whether p comes strictly before q in sequence space.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q in sequence space.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= Mask24 }

// QPN is a 24-bit queue pair number.
type QPN uint32

// Well-known queue pair numbers.
const (
	QP0 QPN = 0 // subnet management QP (not used on RoCE)
	QP1 QPN = 1 // general services interface (GSI): CM MADs travel here
	// QPMulticast is the destination QPN of multicast packets.
	QPMulticast QPN = 0xFFFFFF
)

// Valid reports whether n fits in 24 bits.
func (n QPN) Valid() bool { return n <= Mask24 }

// Format prints the QPN as String does for %v and %s, and as a number for
// the other verbs (%d, %x, %#x, %06x...), so a QPN prints as a number
// wherever a number is asked for.
func (n QPN) Format(f fmt.State, verb rune) {
	switch verb {
	case 'v', 's':
		fmt.Fprintf(f, fmt.FormatString(f, 's'), n.String())
	default:
		fmt.Fprintf(f, fmt.FormatString(f, verb), uint32(n))
	}
}

func (n QPN) String() string { return fmt.Sprintf("0x%06x", uint32(n)) }

// PKey is a 16-bit partition key. The high bit marks full membership.
type PKey uint16

// DefaultPKey is the default partition key, full member.
const DefaultPKey PKey = 0xFFFF

// Full reports whether the key carries full membership.
func (k PKey) Full() bool { return k&0x8000 != 0 }

// Base returns the 15-bit partition number without the membership bit.
func (k PKey) Base() uint16 { return uint16(k) & 0x7FFF }

// Matches reports whether packets with key k may be accepted by a QP with key
// q: the partition numbers must be equal, at least one side must be a full
// member, and the invalid partition 0 never matches (IBTA 10.9.3).
func (k PKey) Matches(q PKey) bool {
	if k.Base() == 0 || k.Base() != q.Base() {
		return false
	}
	return k.Full() || q.Full()
}

func (k PKey) String() string { return fmt.Sprintf("0x%04x", uint16(k)) }

// QKey is a 32-bit queue key, checked on UD and GSI receives.
type QKey uint32

// GSIQKey is the well-known Q_Key of QP1.
const GSIQKey QKey = 0x80010000

// Controlled reports whether the high-order bit is set. In a UD work request
// such a key means "use the QP's own Q_Key" and a QP may not send it.
func (k QKey) Controlled() bool { return k&0x80000000 != 0 }

// LKey is a local memory key, used in scatter/gather elements. Keys are
// opaque 32-bit values: softrdma draws them at random, and a peer's keys have
// no structure a requester may rely on.
type LKey uint32

// RKey is a remote memory key carried in RETH, AtomicETH and IETH; opaque
// like LKey.
type RKey uint32

// MSN is a 24-bit message sequence number carried in AETH.
type MSN uint32

// Add returns m+n modulo 2^24.
func (m MSN) Add(n int) MSN { return MSN((int64(m) + int64(n)) & Mask24) }

// GID is a 128-bit global identifier. On RoCEv2 it is an IPv6 address or an
// IPv4-mapped IPv6 address (the GRH's addresses, carried by the IP header).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address the GID stands for (IPv4 unmapped).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String returns the GID as an IPv6 address (IPv4-mapped for IPv4).
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// ParseGID parses a GID written as an IPv6 address, or as an IPv4 address
// (which becomes its IPv4-mapped GID).
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, fmt.Errorf("wire: GID %q: %w", s, err)
	}
	if a.Zone() != "" {
		return GID{}, fmt.Errorf("wire: GID %q: a GID has no zone", s)
	}
	return GIDFromAddr(a), nil
}

// MarshalText writes the GID as String does (encoding.TextMarshaler).
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses a GID as ParseGID does (encoding.TextUnmarshaler).
func (g *GID) UnmarshalText(b []byte) error {
	v, err := ParseGID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}
