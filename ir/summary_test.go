package ir

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteSummary: the sizes and the ops are two tables, each aligned on
// its own (the blank line between them ends the first).
func TestWriteSummary(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{
			name: "ops by count then by name",
			text: `graph mm
%0 = input "x" f32[2,4]
%1 = weight "w" f32[4,3]
%2 = matmul %0, %1 : f32[2,3]
%3 = exp %2 : f32[2,3]
%4 = neg %3 : f32[2,3]
%5 = exp %4 : f32[2,3]
output "y" = %5
`,
			want: "graph    mm\nops      6\nparams   12\ninputs   1\nweights  1\nstates   0\noutputs  1\n\n" +
				"exp     2\ninput   1\nmatmul  1\nneg     1\nweight  1\n",
		},
		{
			name: "leaves only",
			text: "graph id\n%0 = input \"x\" f32[5]\noutput \"y\" = %0\n",
			want: "graph    id\nops      1\nparams   0\ninputs   1\nweights  0\nstates   0\noutputs  1\n\ninput  1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Parse(tt.text)
			require.NoError(t, err)
			var b strings.Builder
			require.NoError(t, g.WriteSummary(&b))
			assert.Equal(t, tt.want, b.String())
		})
	}
}
