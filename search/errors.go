package search

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/lumsearch/lumsearch/internal/bug"
)

// Kind sorts the failures a caller acts on differently (the command line
// maps each to its own exit status).
type Kind int

// The kinds of Error.
const (
	// KindOther is every failure without a kind of its own.
	KindOther Kind = iota
	// KindOption is an option with a value the compiler cannot use (an
	// unknown target, an architecture NVRTC does not compile for). Its
	// message names the option as the command line spells it.
	KindOption
	// KindInput is a model that cannot be read or compiled.
	KindInput
	// KindNoDevice is a run that needs a GPU on a machine without one.
	KindNoDevice
	// KindOutput is an output folder that cannot be written.
	KindOutput
	// KindInternal is a bug in lumsearch: an invariant of the compiler
	// broke on a term (the cost model chose a schedule the printer
	// cannot print, say). Its message says so and names the term. It
	// wins over any kind an Error around it gives (a bug met while
	// compiling a model is not the model's fault).
	KindInternal
)

// Error is a failure of a kind; its message is the wrapped error's.
type Error struct {
	// Kind says whose fault it is.
	Kind Kind
	// Err is the failure itself.
	Err error
}

// Error is Err's message.
func (e *Error) Error() string {
	if e == nil || e.Err == nil {
		return "search: a failure of kind " + strconv.Itoa(int(e.kind()))
	}
	return e.Err.Error()
}

func (e *Error) kind() Kind {
	if e == nil {
		return KindOther
	}
	return e.Kind
}

// Unwrap returns the failure itself.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// KindOf is KindInternal when err's chain holds a bug, else the kind of
// the first Error in it (KindOther when there is none).
func KindOf(err error) Kind {
	if bug.Is(err) {
		return KindInternal
	}
	var e *Error
	if errors.As(err, &e) {
		return e.kind()
	}
	return KindOther
}

// withKind gives err a kind (nil stays nil).
func withKind(k Kind, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, Err: err}
}

// optionErrorf makes a KindOption error.
func optionErrorf(format string, a ...any) error {
	return &Error{Kind: KindOption, Err: fmt.Errorf(format, a...)}
}
