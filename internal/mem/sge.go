// Scatter/gather: payload bytes flow between packets and the SGE lists of
// work requests, each SGE checked against the key table as it is reached.

package mem

import "github.com/softrdma/softrdma/wire"

// SGE is a scatter/gather element of a work request: Length bytes at
// address Addr of the region with local key LKey (struct ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   wire.LKey
}

// TotalLength returns the sum of the SGE lengths.
func TotalLength(sges []SGE) uint64 {
	var n uint64
	for i := range sges {
		n += uint64(sges[i].Length)
	}
	return n
}

// Gather copies len(dst) bytes, starting at byte offset off of the message
// described by the concatenation of sges, into dst. It is a local read, so it
// needs no access flag. See Scatter for the checks and errors.
func (t *Table) Gather(dst []byte, pd PD, sges []SGE, off int) error {
	return t.copySGEs(dst, pd, sges, off, false, nil)
}

// View returns the n bytes at byte offset off of the message described by
// sges as the registered memory itself, not a copy, if they lie within one
// SGE: a sender may then hand them to the kernel where they are. That SGE
// is checked whole with Local, as Gather checks each SGE it reaches, and a
// failed check is returned as Gather would return it. If the bytes span
// SGEs, or the list is shorter than off+n, or n < 1, View returns ok false
// and checks nothing: the caller gathers a copy (and gets Gather's errors).
// It allocates nothing.
func (t *Table) View(pd PD, sges []SGE, off, n int) (b []byte, ok bool, err error) {
	if off < 0 || n < 1 {
		return nil, false, nil
	}
	i, skip := seek(sges, uint64(off))
	if i == len(sges) {
		return nil, false, nil
	}
	s := &sges[i]
	l := uint64(s.Length)
	if skip+uint64(n) > l {
		return nil, false, nil
	}
	mem, err := t.local(s.LKey, pd, s.Addr, l, 0)
	if err != nil {
		return nil, true, err
	}
	return mem[skip : skip+uint64(n) : skip+uint64(n)], true, nil
}

// seek returns the index of the SGE that holds byte off of the message
// sges describe, and off's offset in it; len(sges) if the message is no
// longer than off. SGEs of length zero hold no byte.
func seek(sges []SGE, off uint64) (int, uint64) {
	for i := range sges {
		l := uint64(sges[i].Length)
		if off < l {
			return i, off
		}
		off -= l
	}
	return len(sges), off
}

// Scatter copies src into the message described by the concatenation of
// sges, starting at byte offset off. Every SGE region must have LocalWrite.
//
// Each SGE the copy reaches is checked whole with Local, so an SGE that is
// partly outside its region fails even if the copy would not reach the bad
// part; SGEs of length zero and SGEs the copy does not reach are not looked
// at (as in rxe's copy_data). It fails with the first check's error, or with
// ErrLength if off < 0 or the list holds fewer than off+len(src) bytes; on
// error some bytes may already have been copied. It allocates nothing.
func (t *Table) Scatter(src []byte, pd PD, sges []SGE, off int) error {
	return t.copySGEs(src, pd, sges, off, true, nil)
}

// GatherLast is Gather for a caller that keeps, in *last, the region its
// previous local access found, as RemoteQPLast keeps a remote one: a
// region still valid under an SGE's L_Key is taken without the key map's
// lookup.
func (t *Table) GatherLast(last **MR, dst []byte, pd PD, sges []SGE, off int) error {
	return t.copySGEs(dst, pd, sges, off, false, last)
}

// ScatterLast is Scatter with GatherLast's kept region.
func (t *Table) ScatterLast(last **MR, src []byte, pd PD, sges []SGE, off int) error {
	return t.copySGEs(src, pd, sges, off, true, last)
}

func (t *Table) copySGEs(buf []byte, pd PD, sges []SGE, off int, write bool, last **MR) error {
	if off < 0 {
		return ErrLength
	}
	skip := uint64(off)
	if len(buf) == 0 {
		if skip > TotalLength(sges) {
			return ErrLength
		}
		return nil
	}
	need := Access(0)
	if write {
		need = LocalWrite
	}
	first, skip := seek(sges, skip)
	for i := first; i < len(sges); i++ {
		s := &sges[i]
		l := uint64(s.Length)
		if l == 0 {
			continue // looked at by no one (rxe's copy_data)
		}
		mem, err := t.localLast(last, s.LKey, pd, s.Addr, l, need)
		if err != nil {
			return err
		}
		var c int
		if write {
			c = copy(mem[skip:], buf)
		} else {
			c = copy(buf, mem[skip:])
		}
		buf = buf[c:]
		if len(buf) == 0 {
			return nil
		}
		skip = 0
	}
	return ErrLength
}
