// Access flags of memory regions, bit for bit those of libibverbs'
// enum ibv_access_flags, and their validation at registration.

package mem

import (
	"fmt"
	"strings"
)

// Access is a set of memory access rights, with the values of libibverbs'
// enum ibv_access_flags. Local reads are always allowed and have no flag.
type Access uint32

// Access flags.
const (
	LocalWrite      Access = 1 << 0  // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite     Access = 1 << 1  // IBV_ACCESS_REMOTE_WRITE
	RemoteRead      Access = 1 << 2  // IBV_ACCESS_REMOTE_READ
	RemoteAtomic    Access = 1 << 3  // IBV_ACCESS_REMOTE_ATOMIC
	MWBind          Access = 1 << 4  // IBV_ACCESS_MW_BIND
	ZeroBased       Access = 1 << 5  // IBV_ACCESS_ZERO_BASED
	OnDemand        Access = 1 << 6  // IBV_ACCESS_ON_DEMAND (accepted, no effect)
	HugeTLB         Access = 1 << 7  // IBV_ACCESS_HUGETLB (accepted, no effect)
	FlushGlobal     Access = 1 << 8  // IBV_ACCESS_FLUSH_GLOBAL
	FlushPersistent Access = 1 << 9  // IBV_ACCESS_FLUSH_PERSISTENT (needs a Persist hook)
	RelaxedOrdering Access = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING (accepted, no effect)

	// RemoteAccess is the union of the flags that give a peer access and
	// so make the region's RKey valid.
	RemoteAccess = RemoteWrite | RemoteRead | RemoteAtomic

	// FlushAccess is the union of the FLUSH flags; a region with one of
	// them has a valid RKey too, since a FLUSH names it by R_Key.
	FlushAccess = FlushGlobal | FlushPersistent

	// OptionalAccess is libibverbs' IBV_ACCESS_OPTIONAL_RANGE, bits 20-29:
	// hints a provider may ignore. Register accepts them all.
	OptionalAccess Access = (RelaxedOrdering<<10 - 1) &^ (RelaxedOrdering - 1)
)

// knownAccess is every flag Register accepts.
const knownAccess = LocalWrite | RemoteAccess | MWBind | ZeroBased | OnDemand | HugeTLB | FlushAccess | OptionalAccess

var accessNames = [...]struct {
	a    Access
	name string
}{
	{LocalWrite, "LocalWrite"},
	{RemoteWrite, "RemoteWrite"},
	{RemoteRead, "RemoteRead"},
	{RemoteAtomic, "RemoteAtomic"},
	{MWBind, "MWBind"},
	{ZeroBased, "ZeroBased"},
	{OnDemand, "OnDemand"},
	{HugeTLB, "HugeTLB"},
	{FlushGlobal, "FlushGlobal"},
	{FlushPersistent, "FlushPersistent"},
	{RelaxedOrdering, "RelaxedOrdering"},
}

// String returns the flag names joined by "|", for example
// "LocalWrite|RemoteRead"; bits without a name are appended in hex, and the
// empty set is "0".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	for _, n := range accessNames {
		if a&n.a != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.name)
			a &^= n.a
		}
	}
	if a != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(a))
	}
	return b.String()
}

// validate checks a registration's access flags: no unknown bits, and remote
// write or remote atomic only together with local write (IBTA 10.6.3.1 and
// libibverbs' ibv_reg_mr, which fails with EINVAL).
func (a Access) validate() error {
	if a&^knownAccess != 0 {
		return fmt.Errorf("%w: unknown access flags %#x", ErrInvalid, uint32(a&^knownAccess))
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return fmt.Errorf("%w: access %v: remote write or atomic requires LocalWrite", ErrInvalid, a)
	}
	return nil
}
