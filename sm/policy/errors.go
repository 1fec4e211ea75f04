package policy

import (
	"errors"
	"fmt"
)

// ErrSyntax is wrapped by every error of ParsePartitions and ParseQoS
// about their input.
var ErrSyntax = errors.New("policy: syntax error")

// SyntaxError is an error in a policy file: the line it was found on and
// what is wrong. It wraps ErrSyntax.
type SyntaxError struct {
	File string // "partitions", "qos" or "qos-policy"
	Line int    // 1-based
	Msg  string
}

// Error names the file kind, the line and the fault.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("policy: %s line %d: %s", e.File, e.Line, e.Msg)
}

// Unwrap returns ErrSyntax.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }
