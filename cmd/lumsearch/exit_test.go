package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/bug"
	"github.com/lumsearch/lumsearch/search"
)

// TestInternalErrorsExitSeven: a bug (an error marked by package bug,
// search.KindInternal) exits 7 from any command, whatever code the command
// gave it, and its message says it is a bug and names the failing term;
// an unreadable or unsupported model stays 3.
func TestInternalErrorsExitSeven(t *testing.T) {
	broken := bug.Errorf("(kernel [reduce_max($0)])", "print kernel k0: a reduce_max reduction over i32")
	tests := []struct {
		name string
		err  error
		code int
	}{
		{"bug", broken, exitInternal},
		{"bug wrapped as input", exitCodes(fmt.Errorf("compile m: %w", broken)), exitInternal},
		{"bug under an input kind", withCode(exitInput, fmt.Errorf("model m: %w", broken)), exitInternal},
		{"unsupported model", exitCodes(&search.Error{Kind: search.KindInput, Err: errors.New("import: node n (Foo, opset 17): unsupported")}), exitInput},
		{"other failure", errors.New("verify kernel k2 differs"), exitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &command{name: "compile", synopsis: "compile", setup: func(*flag.FlagSet) action {
				return func(context.Context, []string, io.Writer) error { return tt.err }
			}}
			var stdout, stderr bytes.Buffer
			assert.Equal(t, tt.code, c.execute(context.Background(), nil, &stdout, &stderr))
			if tt.code == exitInternal {
				assert.Contains(t, stderr.String(), "a bug in lumsearch")
				assert.Contains(t, stderr.String(), "(kernel [reduce_max($0)])")
			}
		})
	}
}

// TestEveryHelpDocumentsTheExitStatuses: every command's help says what 7
// means, and the ones that exit 3 say what 3 means.
func TestEveryHelpDocumentsTheExitStatuses(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, c.name, "-h")
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "\nExit status:\n")
			assert.Contains(t, r.stdout, "7  an internal error: a bug in lumsearch")
			switch c.name {
			case "optimize", "compile":
				assert.Contains(t, r.stdout, "3  the model cannot be read or is unsupported")
			}
		})
	}
}
