package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every element is covered by exactly one chunk, with chunk indexes and
// bounds that agree, whatever GOMAXPROCS is.
func TestChunksCoverOnce(t *testing.T) {
	for _, tc := range []struct{ n, chunk, procs int }{{0, 4, 2}, {1, 4, 2}, {10, 4, 1}, {10, 4, 3}, {1000, 7, 4}} {
		prev := runtime.GOMAXPROCS(tc.procs)
		hits := make([]atomic.Int32, tc.n)
		Chunks(tc.n, tc.chunk, func(c, lo, hi int) {
			require.Equal(t, c*tc.chunk, lo)
			require.Equal(t, min(lo+tc.chunk, tc.n), hi)
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		runtime.GOMAXPROCS(prev)
		for i := range hits {
			require.Equal(t, int32(1), hits[i].Load(), "n=%d element %d", tc.n, i)
		}
	}
}
