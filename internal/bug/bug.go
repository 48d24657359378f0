// Package bug marks the compiler's own faults. An Error says that an
// invariant of lumsearch broke (the cost model chose a schedule the CUDA
// printer cannot print, a lowered kernel no form computes), names the term
// it broke on, and asks for a report, so that a user can tell it from a
// model lumsearch cannot read or does not support. The driver (package
// search) gives it a kind of its own and the command line an exit status
// of its own. It imports nothing of the project.
package bug

import (
	"errors"
	"fmt"
)

// Error is a fault of the compiler's, on a term.
type Error struct {
	// Term is what the invariant broke on, in the text format (a kernel
	// body, say), so that the report reproduces it.
	Term string
	// Err says what broke.
	Err error
}

// Error says that this is a bug, what broke, and the failing term.
func (e *Error) Error() string {
	return fmt.Sprintf("internal error, a bug in lumsearch (please report it with this message): %v\nthe failing term:\n%s", e.Err, e.Term)
}

// Unwrap returns what broke.
func (e *Error) Unwrap() error { return e.Err }

// New marks err as a bug on term (nil stays nil).
func New(term string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Term: term, Err: err}
}

// Errorf marks a formatted error as a bug on term.
func Errorf(term, format string, a ...any) error {
	return &Error{Term: term, Err: fmt.Errorf(format, a...)}
}

// Is reports whether err's chain holds a bug.
func Is(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
