// The memory-region table: registration and deregistration under a mutex,
// random key allocation, and the lock-free key lookups and protection checks
// that every data-path access to registered memory goes through.

package mem

import (
	crand "crypto/rand"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/wire"
)

// PD is a protection-domain handle. The verbs layer allocates them; this
// package only compares them.
type PD uint32

// MR is a registered memory region. Its exported fields are fixed at
// registration and must not be changed.
type MR struct {
	// PD is the protection domain the region belongs to.
	PD PD
	// Buf is the registered memory; VA corresponds to &Buf[0].
	Buf []byte
	// VA is the address of Buf[0] as the user and remote peers name it:
	// the real host address, 0 for a ZeroBased region, or an explicit iova.
	VA uint64
	// Length is len(Buf).
	Length uint64
	// LKey is the local key, used in SGEs.
	LKey wire.LKey
	// RKey is the remote key: the LKey value if Access has a remote flag
	// (as in Linux rxe), else 0, which is never a valid key.
	RKey wire.RKey
	// Access is the set of rights granted at registration.
	Access Access
	// Persist, if not nil, makes a part of Buf persistent (for a file
	// mapping, msync); a region with FlushPersistent access has one. A
	// FLUSH with persistent placement calls it (see Table.Flush).
	Persist func(b []byte) error

	// state counts references taken with Acquire in its low bits; the dead
	// bit is set, with no references left, by Deregister (for a memory
	// window's binding, when the binding ends).
	state atomic.Int64

	// A memory window's binding (mw.go) is an MR of its own in the key
	// map, under the window's R_Key: win is the window, target the region
	// it is bound to (Buf is a part of target's), qpn the QP a type 2
	// window is bound through (0 for type 1). Regions have win == nil.
	win    *MW
	target *MR
	qpn    uint32
}

const dead = 1 << 62

// Acquire takes a reference on the region, keeping Deregister from removing
// it: each memory window bound to the region holds one (mw.go). It reports
// false, taking nothing, if the region has already been deregistered.
func (mr *MR) Acquire() bool {
	for {
		s := mr.state.Load()
		if s&dead != 0 {
			return false
		}
		if mr.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// Release drops a reference taken with Acquire. It panics if none is held.
func (mr *MR) Release() {
	if mr.state.Add(-1) < 0 {
		panic("mem: MR.Release without Acquire")
	}
}

// Refs returns the number of references held with Acquire.
func (mr *MR) Refs() int { return int(mr.state.Load() &^ dead) }

// Valid reports whether the region is still registered.
func (mr *MR) Valid() bool { return mr.state.Load()&dead == 0 }

// slice returns Buf's bytes for [va, va+n), or false if that range is not
// inside the region. The arithmetic cannot overflow: off is only used once
// va >= VA, and n is compared against the room left after off.
func (mr *MR) slice(va, n uint64) ([]byte, bool) {
	if va < mr.VA {
		return nil, false
	}
	off := va - mr.VA
	if off > mr.Length || n > mr.Length-off {
		return nil, false
	}
	return mr.Buf[off : off+n : off+n], true
}

// keyMap maps issued keys (lkey values, which equal rkey values) to regions.
// A published keyMap is never modified: writers publish a modified copy.
type keyMap = map[uint32]*MR

// The key space is split by the low bits of the key into shards, each its
// own copy-on-write map, so Register and Deregister copy 1/256 of the table.
const (
	shardBits = 8
	shardMask = 1<<shardBits - 1
)

// Table is the memory-region table of one device. Register and Deregister
// serialize on a mutex and publish a new copy of one shard of the key map;
// Lookup, Local, Remote, Gather and Scatter read the current maps without
// locking and without allocating. All methods are safe for concurrent use.
type Table struct {
	shards [1 << shardBits]atomic.Pointer[keyMap]
	n      atomic.Int64 // regions registered

	mu  sync.Mutex  // serializes writers of shards; guards rng and mws
	rng rand.Source // draws keys
	// mws holds the memory windows by index (R_Key >> 8): all 256 keys
	// of an index belong to its window, and regions draw none of them.
	mws map[uint32]*MW
}

// NewTable returns an empty table that draws keys from src, which it uses
// only under its own lock. If src is nil it uses a ChaCha8 generator seeded
// from crypto/rand, which is what a device should do so that keys cannot be
// predicted; tests may pass a seeded source.
func NewTable(src rand.Source) *Table {
	if src == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:]) // never fails (Go 1.24+); panics otherwise
		src = rand.NewChaCha8(seed)
	}
	t := &Table{rng: src, mws: map[uint32]*MW{}}
	empty := &keyMap{} // shared by all shards until their first write
	for i := range t.shards {
		t.shards[i].Store(empty)
	}
	return t
}

// get returns the region registered under key, or nil. It takes no lock.
func (t *Table) get(key uint32) *MR {
	return (*t.shards[key&shardMask].Load())[key]
}

// Len returns the number of registered regions.
func (t *Table) Len() int { return int(t.n.Load()) }

// Register registers buf for protection domain pd with the given access and
// returns the new region with fresh keys. The region's VA is 0 if access has
// ZeroBased (then va must be 0 and useRealVA false), else the host address of
// buf's first byte if useRealVA, else va (ibv_reg_mr_iova). It fails with an
// error wrapping ErrInvalid on unknown access flags, on RemoteWrite or
// RemoteAtomic without LocalWrite, or if [VA, VA+len(buf)) would wrap.
// A zero-length buf is allowed; no non-empty range is ever inside it.
func (t *Table) Register(pd PD, buf []byte, va uint64, useRealVA bool, access Access) (*MR, error) {
	return t.RegisterPersist(pd, buf, va, useRealVA, access, nil)
}

// RegisterPersist is Register for memory that can be made persistent:
// persist makes a part of buf persistent (see MR.Persist). FlushPersistent
// access needs one: Register, whose memory cannot be, refuses that flag with
// ErrInvalid, as Linux rxe refuses it for memory that is not pmem.
func (t *Table) RegisterPersist(pd PD, buf []byte, va uint64, useRealVA bool, access Access, persist func([]byte) error) (*MR, error) {
	if err := access.validate(); err != nil {
		return nil, err
	}
	if access&FlushPersistent != 0 && persist == nil {
		return nil, fmt.Errorf("%w: access %v: the memory cannot be made persistent", ErrInvalid, access)
	}
	switch {
	case access&ZeroBased != 0:
		if useRealVA || va != 0 {
			return nil, fmt.Errorf("%w: ZeroBased region with a non-zero VA", ErrInvalid)
		}
	case useRealVA:
		va = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	n := uint64(len(buf))
	if va+n < va {
		return nil, fmt.Errorf("%w: VA %#x + length %d wraps", ErrInvalid, va, n)
	}
	mr := &MR{PD: pd, Buf: buf, VA: va, Length: n, Access: access, Persist: persist}

	t.mu.Lock()
	defer t.mu.Unlock()
	key := t.newKeyLocked()
	mr.LKey = wire.LKey(key)
	if access&(RemoteAccess|FlushAccess) != 0 {
		mr.RKey = wire.RKey(key)
	}
	shard := &t.shards[key&shardMask]
	old := *shard.Load()
	m := make(keyMap, len(old)+1)
	maps.Copy(m, old)
	m[key] = mr
	shard.Store(&m)
	t.n.Add(1)
	return mr, nil
}

// newKeyLocked draws random 32-bit values until one is non-zero and unused.
// With fewer than 2^31 regions each draw succeeds with probability > 1/2.
func (t *Table) newKeyLocked() uint32 {
	for {
		k := uint32(t.rng.Uint64())
		if k != 0 && t.get(k) == nil && t.mws[k>>8] == nil {
			return k
		}
	}
}

// Deregister removes mr from the table. It fails with ErrBusy while
// references taken with Acquire are held, and with ErrKey if mr is not
// registered in t. Once it returns nil, every later lookup of mr's keys
// fails; slices that Local, Remote and friends returned earlier still point
// into mr.Buf, so the caller must make sure no operation on mr is in flight.
func (t *Table) Deregister(mr *MR) error {
	if mr == nil {
		return ErrKey
	}
	key := uint32(mr.LKey)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get(key) != mr || mr.win != nil {
		return ErrKey
	}
	if !mr.state.CompareAndSwap(0, dead) {
		return ErrBusy // the dead bit is only set here, under mu
	}
	shard := &t.shards[key&shardMask]
	m := maps.Clone(*shard.Load())
	delete(m, key)
	shard.Store(&m)
	t.n.Add(-1)
	return nil
}

// Lookup returns the registered region whose lkey (and, if it has remote
// access, rkey) is key, or nil.
func (t *Table) Lookup(key uint32) *MR {
	mr := t.get(key)
	if mr == nil || !mr.Valid() || mr.win != nil {
		return nil
	}
	return mr
}

// Local checks a local access by a work request of protection domain pd to
// [va, va+n) through lkey key, and returns that part of the region's memory.
// need is 0 for a local read (always allowed) or LocalWrite to place data.
// The checks run in the order of rxe's lookup_mr and mr_check_range: key
// (ErrKey), protection domain (ErrPD), access (ErrAccess), bounds (ErrBounds;
// also for n < 0).
//
// n == 0 returns an empty slice without looking at the key: rxe's copy_data
// never looks up the lkey of a zero-length transfer or SGE.
func (t *Table) Local(key wire.LKey, pd PD, va uint64, n int, need Access) ([]byte, error) {
	if n <= 0 {
		if n == 0 {
			return nil, nil
		}
		return nil, ErrBounds
	}
	return t.local(key, pd, va, uint64(n), need)
}

func (t *Table) local(key wire.LKey, pd PD, va, n uint64, need Access) ([]byte, error) {
	return t.localLast(nil, key, pd, va, n, need)
}

// localLast is local with RemoteQPLast's kept region, for an L_Key.
func (t *Table) localLast(last **MR, key wire.LKey, pd PD, va, n uint64, need Access) ([]byte, error) {
	mr := t.lookupLast(last, uint32(key), false)
	if mr == nil || !mr.Valid() || mr.win != nil {
		return nil, ErrKey // a window's R_Key is no L_Key
	}
	return mr.check(pd, va, n, need)
}

// lookupLast returns the region the table holds under key (an R_Key if
// remote, else an L_Key): *last, if last is not nil and that region is
// valid and holds key (see RemoteQPLast), else the table's, which it then
// keeps in *last. The caller checks what it returns as any region.
func (t *Table) lookupLast(last **MR, key uint32, remote bool) *MR {
	if last == nil {
		return t.get(key)
	}
	if mr := *last; mr != nil && mr.Valid() && (remote && uint32(mr.RKey) == key || !remote && mr.win == nil && uint32(mr.LKey) == key) {
		return mr
	}
	mr := t.get(key)
	if mr != nil {
		*last = mr
	}
	return mr
}

// Remote checks a remote access (an RDMA READ, WRITE or atomic from a peer
// connected to a QP of protection domain pd) to [va, va+n) through rkey key
// and returns that part of the region's memory. need is RemoteRead,
// RemoteWrite or RemoteAtomic. Errors are as for Local; a key whose region
// has no remote access flag fails with ErrKey, like any key that is not an
// rkey.
//
// n == 0 returns an empty slice without looking at the key or address:
// "A zero-byte op is not required to set an addr or rkey" (IBTA 9.4.4,
// 9.4.5; Linux rxe check_rkey skips the R_Key check when the RETH DMA length
// is 0). Atomics always pass n = 8.
func (t *Table) Remote(key wire.RKey, pd PD, va uint64, n int, need Access) ([]byte, error) {
	return t.RemoteQP(key, pd, 0, va, n, need)
}

// RemoteQP is Remote for a request that arrived on QP qpn: a type 2 memory
// window's R_Key is valid only on the QP that bound it (IBTA 10.6.7.2.1;
// rxe's rxe_lookup_mw). Through a window's R_Key, the window's access and
// range are checked, and its protection domain is the window's.
func (t *Table) RemoteQP(key wire.RKey, pd PD, qpn uint32, va uint64, n int, need Access) ([]byte, error) {
	return t.RemoteQPLast(nil, key, pd, qpn, va, n, need)
}

// RemoteQPLast is RemoteQP for a caller that keeps, in *last, the region
// its previous lookup found (nil at first): if that region is still valid
// and its R_Key is key, it is taken without the table's lookup (a map
// access, whose lines a ping-pong's side finds out of cache each time) and
// checked as any other. It is then the region the table holds under key:
// every way out of the table (Deregister, Reregister, a window's unbinding
// or invalidation) marks a region dead, and no two valid regions or
// windows share a key.
func (t *Table) RemoteQPLast(last **MR, key wire.RKey, pd PD, qpn uint32, va uint64, n int, need Access) ([]byte, error) {
	if n <= 0 {
		if n == 0 {
			return nil, nil
		}
		return nil, ErrBounds
	}
	mr := t.lookupLast(last, uint32(key), true)
	if mr == nil || mr.RKey != key || !mr.Valid() || mr.qpn != qpn && mr.win != nil && mr.win.Type == MWType2 {
		return nil, ErrKey
	}
	return mr.check(pd, va, uint64(n), need)
}

// check applies the protection-domain, access and bounds checks.
func (mr *MR) check(pd PD, va, n uint64, need Access) ([]byte, error) {
	if mr.PD != pd {
		return nil, ErrPD
	}
	if mr.Access&need != need {
		return nil, ErrAccess
	}
	b, ok := mr.slice(va, n)
	if !ok {
		return nil, ErrBounds
	}
	return b, nil
}
