// Sentinel errors of the memory layer. Data-path checks return these values
// as they are, so failing a check allocates nothing.

package mem

import "errors"

// ErrMem is wrapped by every error of this package.
var ErrMem = errors.New("mem")

func memErr(text string) error { return &memError{text} }

type memError struct{ text string }

func (e *memError) Error() string { return "mem: " + e.text }
func (e *memError) Unwrap() error { return ErrMem }

// Sentinel errors, each wrapping ErrMem. Test with errors.Is.
var (
	// ErrKey: the key names no valid region (never issued, deregistered,
	// or an lkey used as an rkey of a region without remote access).
	ErrKey = memErr("invalid memory key")
	// ErrPD: the region belongs to another protection domain.
	ErrPD = memErr("protection domain mismatch")
	// ErrAccess: the region's access flags do not allow the operation.
	ErrAccess = memErr("access not permitted")
	// ErrBounds: the address range is not inside the region.
	ErrBounds = memErr("address range outside memory region")
	// ErrLength: the SGE list is shorter than the requested offset+length.
	ErrLength = memErr("scatter/gather list too short")
	// ErrAlign: an atomic target is not an 8-byte aligned 64-bit word.
	ErrAlign = memErr("atomic target not 8-byte aligned")
	// ErrBusy: the region is still referenced and cannot be deregistered.
	ErrBusy = memErr("memory region in use")
	// ErrInvalid: invalid argument to a control-path call.
	ErrInvalid = memErr("invalid argument")
)
