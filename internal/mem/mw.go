// Memory windows (IBTA 10.6.7; Linux rxe's rxe_mw.c): allocation, binding
// to a part of a registered region, invalidation and deallocation. A bound
// window is an entry of the key map under its R_Key, so remote accesses
// through it take the same lock-free path as those through a region's.

package mem

import (
	"fmt"
	"maps"

	"github.com/softrdma/softrdma/wire"
)

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

// The window types. Type 2 is IBTA's type 2B: bound by a work request on a
// QP, valid only on that QP, invalidated by LOCAL_INV or SEND_WITH_INV.
const (
	MWType1 MWType = 1 // bound by the bind call; never invalidated remotely
	MWType2 MWType = 2
)

// MW is a memory window. Its fields other than PD and Type change only
// under the table's lock.
type MW struct {
	// PD is the protection domain the window belongs to.
	PD PD
	// Type is the window's type.
	Type MWType
	// index is the upper 24 bits of every R_Key the window has.
	index uint32
	// key is the window's current R_Key (index<<8 | key byte).
	key wire.RKey
	// bound is the current binding (nil if none).
	bound *MR
	dead  bool
}

// MWKey returns the window's current R_Key. A type 1 window's changes with
// each bind; a type 2 window's with each bind by work request.
func (t *Table) MWKey(mw *MW) wire.RKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	return mw.key
}

// MWs returns the number of allocated windows.
func (t *Table) MWs() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mws)
}

// AllocMW allocates a window of protection domain pd. Its R_Key is a fresh
// index (upper 24 bits) none of whose 256 keys a region has, and a random
// key byte, as rxe's rxe_alloc_mw. A type 1 window starts valid and unbound;
// a type 2 window starts free. It fails with ErrInvalid for an unknown type.
func (t *Table) AllocMW(pd PD, typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("%w: memory window type %d", ErrInvalid, typ)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		r := t.rng.Uint64()
		idx := uint32(r) >> 8
		if idx == 0 || t.mws[idx] != nil || t.indexUsedLocked(idx) {
			continue
		}
		mw := &MW{PD: pd, Type: typ, index: idx, key: wire.RKey(idx<<8 | uint32(r>>32)&0xff)}
		t.mws[idx] = mw
		return mw, nil
	}
}

// indexUsedLocked reports whether a region has one of index idx's keys.
func (t *Table) indexUsedLocked(idx uint32) bool {
	for b := range uint32(256) {
		if t.get(idx<<8|b) != nil {
			return true
		}
	}
	return false
}

// DeallocMW frees the window, ending its binding first: as rxe's
// rxe_dealloc_mw, a bound window may be deallocated, and the region it was
// bound to may be deregistered afterwards. It fails with ErrKey for a
// window already deallocated.
func (t *Table) DeallocMW(mw *MW) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if mw.dead {
		return ErrKey
	}
	t.unbindLocked(mw)
	mw.dead = true
	delete(t.mws, mw.index)
	return nil
}

// Bind describes a bind of a window (ibv_mw_bind_info with the new key).
type Bind struct {
	// MR is the region to bind to; nil with Length 0 unbinds a type 1
	// window.
	MR *MR
	// Addr and Length are the window's range, inside MR.
	Addr, Length uint64
	// Access is the window's rights: remote read, write, atomic, and
	// ZeroBased (type 2 only) for a window whose addresses start at 0.
	Access Access
	// KeyByte is the low byte of the window's new R_Key.
	KeyByte uint8
}

// mwAccess is the access a window may be given (rxe's
// RXE_ACCESS_SUPPORTED_MW).
const mwAccess = LocalWrite | RemoteAccess | MWBind | ZeroBased

// BindMW binds mw through QP qpn of protection domain qpPD, with the checks
// of rxe's rxe_check_bind_mw (IBTA C10-72 to C10-75, o10-36.2.2,
// o10-37.2.30/40): a type 1 window must be valid and not zero-based; a
// type 2 window must be free, of the QP's protection domain, and get a
// region and a non-zero length; the region must not be zero-based, must
// allow MWBind, must allow LocalWrite if the window allows remote write or
// atomic, must be of the window's protection domain, and must hold the
// range. Every failure wraps ErrInvalid (the work request completes with
// MW_BIND_ERR) and leaves the window as it was. On success the window's
// R_Key takes b.KeyByte, its old binding ends, and a non-empty new one
// holds a reference on the region (Deregister then fails with ErrBusy).
// A zero-length bind of a type 1 window leaves it valid and unbound.
func (t *Table) BindMW(mw *MW, qpn uint32, qpPD PD, b Bind) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkBindLocked(mw, qpPD, &b); err != nil {
		return err
	}
	t.unbindLocked(mw)
	old := mw.key
	mw.key = wire.RKey(mw.index<<8 | uint32(b.KeyByte))
	if b.Length == 0 {
		return nil
	}
	if !b.MR.Acquire() {
		mw.key = old
		return fmt.Errorf("%w: region deregistered", ErrInvalid)
	}
	off := b.Addr - b.MR.VA
	va := b.Addr
	if b.Access&ZeroBased != 0 {
		va = 0
	}
	w := &MR{PD: mw.PD, Buf: b.MR.Buf[off : off+b.Length : off+b.Length], VA: va, Length: b.Length,
		RKey: mw.key, Access: b.Access, win: mw, target: b.MR}
	if mw.Type == MWType2 {
		w.qpn = qpn
	}
	mw.bound = w
	t.publishLocked(uint32(mw.key), w)
	return nil
}

func (t *Table) checkBindLocked(mw *MW, qpPD PD, b *Bind) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: bind: "+format, append([]any{ErrInvalid}, a...)...)
	}
	if mw.dead {
		return bad("window deallocated")
	}
	if b.Access&^mwAccess != 0 {
		return bad("access %v not supported on a window", b.Access)
	}
	switch mw.Type {
	case MWType1:
		if b.Access&ZeroBased != 0 {
			return bad("zero-based type 1 window")
		}
	case MWType2:
		if mw.bound != nil {
			return bad("type 2 window not free")
		}
		if qpPD != mw.PD {
			return bad("type 2 window of another protection domain than the QP's")
		}
		if b.MR == nil || b.Length == 0 {
			return bad("type 2 window with no region or zero length")
		}
	}
	if b.MR == nil {
		if b.Length != 0 || b.Addr != 0 {
			return bad("range without a region")
		}
		return nil
	}
	mr := b.MR
	switch {
	case !mr.Valid() || mr.win != nil:
		return bad("region not registered")
	case mr.Access&ZeroBased != 0:
		return bad("zero-based region")
	case mr.Access&MWBind == 0:
		return bad("region without MWBind access")
	case b.Access&(RemoteWrite|RemoteAtomic) != 0 && mr.Access&LocalWrite == 0:
		return bad("writable window on a region without LocalWrite")
	case mr.PD != mw.PD:
		return bad("region of another protection domain")
	case b.Addr < mr.VA || b.Length > mr.Length || b.Addr-mr.VA > mr.Length-b.Length:
		return bad("range [%#x, +%d) outside the region", b.Addr, b.Length)
	}
	if t.get(uint32(mr.LKey)) != mr {
		return bad("region of another table")
	}
	return nil
}

// unbindLocked ends mw's binding, if any: its R_Key stops working and the
// region's reference goes.
func (t *Table) unbindLocked(mw *MW) {
	w := mw.bound
	if w == nil {
		return
	}
	mw.bound = nil
	w.state.Store(dead)
	t.publishLocked(uint32(w.RKey), nil)
	w.target.Release()
}

// publishLocked sets (mr != nil) or deletes key's entry in the key map.
func (t *Table) publishLocked(key uint32, mr *MR) {
	shard := &t.shards[key&shardMask]
	m := maps.Clone(*shard.Load())
	if mr != nil {
		m[key] = mr
	} else {
		delete(m, key)
	}
	shard.Store(&m)
}

// Invalidate invalidates the R_Key key (LOCAL_INV, SEND_WITH_INV; rxe's
// rxe_invalidate_mw and rxe_invalidate_mr): a bound type 2 window's binding
// ends and the window is free again. The key of a type 1 window (which
// only a bind may invalidate, o10-37.2.26), of a free window, or of a
// region (whose keys a user-space region keeps for life: rxe invalidates
// only fast-registration regions, which user space cannot create) fails
// with an error wrapping ErrInvalid; a key that names nothing fails with
// ErrKey.
func (t *Table) Invalidate(key wire.RKey) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	mw := t.mws[uint32(key)>>8]
	if mw == nil {
		if mr := t.get(uint32(key)); mr != nil && mr.win == nil {
			return fmt.Errorf("%w: invalidate: R_Key %#x is a registered region's", ErrInvalid, uint32(key))
		}
		return ErrKey
	}
	switch {
	case mw.key != key:
		return ErrKey
	case mw.Type == MWType1:
		return fmt.Errorf("%w: invalidate: type 1 window", ErrInvalid)
	case mw.bound == nil:
		return fmt.Errorf("%w: invalidate: window not bound", ErrInvalid)
	}
	t.unbindLocked(mw)
	return nil
}

// Window reports whether key names an allocated memory window (bound or
// not), and its type.
func (t *Table) Window(key wire.RKey) (MWType, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mw := t.mws[uint32(key)>>8]
	if mw == nil || mw.key != key {
		return 0, false
	}
	return mw.Type, true
}

// Reregister changes a region's protection domain and access (rxe's
// rxe_rereg_user_mr, which supports those two): the region keeps its
// memory, address and L_Key, and its R_Key is the L_Key again if the new
// access has a remote flag, else 0. The returned region replaces mr, which
// is retired. It fails with ErrInvalid for access that Register would
// refuse or that adds or drops ZeroBased (a change of translation), ErrKey
// if mr is not registered in t, and ErrBusy while windows are bound to it.
func (t *Table) Reregister(mr *MR, pd PD, access Access) (*MR, error) {
	if err := access.validate(); err != nil {
		return nil, err
	}
	if mr == nil {
		return nil, ErrKey
	}
	if (access^mr.Access)&ZeroBased != 0 {
		return nil, fmt.Errorf("%w: reregistration cannot change ZeroBased", ErrInvalid)
	}
	key := uint32(mr.LKey)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.get(key) != mr || mr.win != nil {
		return nil, ErrKey
	}
	if !mr.state.CompareAndSwap(0, dead) {
		return nil, ErrBusy
	}
	n := &MR{PD: pd, Buf: mr.Buf, VA: mr.VA, Length: mr.Length, LKey: mr.LKey, Access: access}
	if access&RemoteAccess != 0 {
		n.RKey = wire.RKey(key)
	}
	t.publishLocked(key, n)
	return n, nil
}

// UnbindQP ends the bindings of the type 2 windows bound through QP qpn,
// which is being destroyed: they become free, and a later QP given the same
// number cannot use them (rxe keeps the destroyed QP referenced instead, so
// its number is not reused while they are bound). It returns how many it
// ended.
func (t *Table) UnbindQP(qpn uint32) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, mw := range t.mws {
		if w := mw.bound; w != nil && mw.Type == MWType2 && w.qpn == qpn {
			t.unbindLocked(mw)
			n++
		}
	}
	return n
}
