package cost

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimple(t *testing.T) {
	s := DefaultSimple
	tests := []struct {
		name     string
		in, out  int64
		wantMore struct{ in, out int64 } // a kernel moving more bytes
	}{
		{name: "empty", in: 0, out: 0, wantMore: struct{ in, out int64 }{1, 0}},
		{name: "matmul", in: 64 << 20, out: 256 << 10, wantMore: struct{ in, out int64 }{64 << 20, 512 << 10}},
		{name: "elementwise", in: 1 << 20, out: 1 << 20, wantMore: struct{ in, out int64 }{2 << 20, 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := s.Kernel(tt.in, tt.out)
			require.GreaterOrEqual(t, k, s.Launch, "a kernel costs at least its launch")
			assert.InDelta(t, s.Launch+float64(tt.in+tt.out)/s.Bandwidth, k, 1e-15)
			assert.Greater(t, s.Kernel(tt.wantMore.in, tt.wantMore.out), k, "more bytes never predict less time")
			assert.Less(t, s.Prep(tt.in, tt.out), k, "load-time work is charged a share")
		})
	}
}
