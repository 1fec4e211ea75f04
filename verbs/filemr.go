package verbs

import (
	"os"

	"github.com/softrdma/softrdma/internal/mem"
)

// RegFile maps n bytes of f, from offset off (a multiple of the page size),
// into memory shared with the file and registers them: the one kind of
// region whose contents a FLUSH can make persistent, so the only kind that
// may have AccessFlushPersistent (RegMR and AllocMR refuse it with
// ErrInvalid, as Linux rxe refuses it for memory that is not pmem). A
// FLUSH with persistent placement writes the pages holding its range (or
// the whole region) back to the file and waits for the writes (msync
// MS_SYNC) before it is answered. f must be a regular file open for
// reading and writing that holds off+n bytes already; it may be closed
// once RegFile returns. The file must not be truncated while the region is
// registered (a store into a page past its end would fault). Dereg unmaps
// the memory. File-backed regions need Linux: elsewhere RegFile fails with
// ErrNotSupported.
func (pd *PD) RegFile(f *os.File, off int64, n int, access Access) (*MR, error) {
	if n <= 0 || n > MaxMRSize {
		return nil, errf(ErrInvalid, "MR size %d", n)
	}
	if !fileMapping {
		return nil, errf(ErrNotSupported, "file-backed memory regions need Linux")
	}
	buf, err := mem.MapFile(f, off, n)
	if err != nil {
		return nil, errf(ErrInvalid, "%v", err)
	}
	mr, err := pd.regMR(buf, access, true, mem.SyncFile)
	if err != nil {
		_ = mem.Unmap(buf)
	}
	return mr, err
}
