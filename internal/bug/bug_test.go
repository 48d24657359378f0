package bug

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBugsAreMarkedThroughWrapping(t *testing.T) {
	cause := errors.New("the schedule does not print")
	tests := []struct {
		name string
		err  error
		bug  bool
	}{
		{"nil", nil, false},
		{"plain", cause, false},
		{"marked", New("(kernel [add($0, $1)])", cause), true},
		{"wrapped", fmt.Errorf("compile m: %w", Errorf("(kernel [exp($0)])", "print k0: %w", cause)), true},
		{"marked nil", New("t", nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.bug, Is(tt.err))
			if tt.bug {
				assert.Contains(t, tt.err.Error(), "a bug in lumsearch")
				assert.Contains(t, tt.err.Error(), "the failing term:\n(kernel")
				assert.ErrorIs(t, tt.err, cause)
			}
		})
	}
}
