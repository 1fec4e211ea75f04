// FLUSH and ATOMIC WRITE (IBTA 1.5, Annex A19) on registered memory: the
// range a FLUSH names and what making it persistent means, and the 8-byte
// store of an ATOMIC WRITE.

package mem

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/softrdma/softrdma/wire"
)

// FlushRange checks a FLUSH through rkey key from a QP of protection domain
// pd and returns the region and the part of its memory the FLUSH covers:
// [va, va+n) if whole is false (selectivity "memory range"), the whole
// region if it is true (selectivity "memory region"; va and n are then not
// looked at, as in rxe). need is the region's access the placement type
// requires (FlushGlobal, FlushPersistent or both). Unlike Remote, a FLUSH
// of length 0 still names a region: its key, PD and access are checked,
// and va must lie within the region. Errors are Remote's.
func (t *Table) FlushRange(key wire.RKey, pd PD, va, n uint64, whole bool, need Access) (*MR, []byte, error) {
	mr := t.get(uint32(key))
	if mr == nil || mr.RKey != key || !mr.Valid() {
		return nil, nil, ErrKey
	}
	if whole {
		va, n = mr.VA, mr.Length
	}
	b, err := mr.check(pd, va, n, need)
	return mr, b, err
}

// AtomicWrite stores the 8 bytes v into b as one atomic 64-bit store, so a
// concurrent atomic or aligned 8-byte load sees either the old or the new
// value, never a mix: the responder's ATOMIC WRITE. The bytes land in memory
// in their order in v (the payload is copied, not converted). b must be 8
// bytes at an 8-byte aligned address, else AtomicWrite returns ErrBounds or
// ErrAlign and stores nothing.
func AtomicWrite(b []byte, v *[8]byte) error {
	p, err := word(b)
	if err != nil {
		return err
	}
	atomic.StoreUint64(p, binary.NativeEndian.Uint64(v[:]))
	return nil
}

// AtomicRead loads the 8 bytes at b with one atomic 64-bit load (the
// counterpart of AtomicWrite, for readers that must not see a torn value).
// b must be 8 bytes at an 8-byte aligned address.
func AtomicRead(b []byte) ([8]byte, error) {
	var v [8]byte
	p, err := word(b)
	if err != nil {
		return v, err
	}
	binary.NativeEndian.PutUint64(v[:], atomic.LoadUint64(p))
	return v, nil
}
