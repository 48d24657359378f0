package search

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lumsearch/lumsearch/internal/bug"
)

// TestBugsAreInternal: an error marked as a bug is KindInternal wherever
// it sits in a chain, even under an Error of another kind (a bug met while
// compiling a model is not the model's fault).
func TestBugsAreInternal(t *testing.T) {
	broken := bug.Errorf("(kernel [attention($0, $1, $2)])", "the cost model's best schedule does not print")
	tests := []struct {
		name string
		err  error
		kind Kind
	}{
		{"bare", broken, KindInternal},
		{"wrapped", fmt.Errorf("compile m: %w", broken), KindInternal},
		{"under input", withKind(KindInput, fmt.Errorf("optimize m: %w", broken)), KindInternal},
		{"joined", errors.Join(withKind(KindOutput, errors.New("disk full")), broken), KindInternal},
		{"input alone", withKind(KindInput, errors.New("unsupported op Foo")), KindInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.kind, KindOf(tt.err))
		})
	}
}
