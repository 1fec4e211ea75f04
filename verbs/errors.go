// Errors of the verbs API. Every misuse returns an error wrapping one of these
// sentinels, so callers can test with errors.Is.

package verbs

import (
	"errors"
	"fmt"

	"github.com/softrdma/softrdma/wire"
)

// Sentinel errors.
var (
	// ErrInvalid: an argument or attribute is out of range or inconsistent (EINVAL).
	ErrInvalid = errors.New("verbs: invalid argument")
	// ErrState: the object is not in a state that allows the call.
	ErrState = errors.New("verbs: invalid state")
	// ErrClosed: the object or its device has been closed or destroyed.
	ErrClosed = errors.New("verbs: closed")
	// ErrBusy: the object is still in use (EBUSY).
	ErrBusy = errors.New("verbs: resource busy")
	// ErrQueueFull: a work queue has no free slot (ENOMEM in libibverbs).
	ErrQueueFull = errors.New("verbs: work queue full")
	// ErrLimit: a device capability would be exceeded.
	ErrLimit = errors.New("verbs: device limit exceeded")
	// ErrNotSupported: the operation is not supported (EOPNOTSUPP).
	ErrNotSupported = errors.New("verbs: not supported")
	// ErrCompletion: a work request completed with an error status
	// (WC.Err).
	ErrCompletion = errors.New("verbs: work request failed")
)

// Error makes a Status an error, so errors.Is can match the status of a
// failed completion (WC.Err): errors.Is(err, verbs.RetryExcErr).
func (s Status) Error() string { return s.String() }

// CompletionError is a failed work completion as an error: it matches
// ErrCompletion and its Status with errors.Is.
type CompletionError struct {
	WRID   uint64
	Status Status
	Opcode WCOpcode
	QPNum  wire.QPN
}

// Error describes the failure as ibv_wc_status_str does, with the work
// request and its QP.
func (e *CompletionError) Error() string {
	return fmt.Sprintf("verbs: work request %d (%v) on QP %#x failed: %v (%d)", e.WRID, e.Opcode, uint32(e.QPNum), e.Status, int(e.Status))
}

// Unwrap returns ErrCompletion and the status.
func (e *CompletionError) Unwrap() []error { return []error{ErrCompletion, e.Status} }

// Err returns nil for a successful completion, and otherwise a
// *CompletionError that matches ErrCompletion and wc.Status with errors.Is.
func (wc *WC) Err() error {
	if wc.Status == Success {
		return nil
	}
	return &CompletionError{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode, QPNum: wc.QPNum}
}

func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// WRError reports the work request a post call failed on. Requests before it
// were posted; it and the requests after it were not (libibverbs' bad_wr).
type WRError struct {
	Index int    // position in the slice passed to the post call
	WRID  uint64 // the failing request's ID
	Err   error
}

func (e *WRError) Error() string {
	return fmt.Sprintf("verbs: work request %d (wr_id %d): %v", e.Index, e.WRID, e.Err)
}

// Unwrap returns the cause.
func (e *WRError) Unwrap() error { return e.Err }
