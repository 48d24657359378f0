package cuda

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

// EncodeTensor encodes large tensors in parallel chunks and float32
// storage on a fast path: every way must give the bytes DecodeTensor reads
// back as the same values, whatever GOMAXPROCS is, and tensorBytes (the
// copy-free view) the same bytes as EncodeTensor.
func TestEncodeTensorRoundTrip(t *testing.T) {
	// Not parallel: no other test encodes while the chunk is small. The
	// parallel path at 1/256 of its chunk size: the same code as at real
	// shapes, on tensors of thousands of elements rather than millions
	// (seconds each under the race detector).
	defer func(c int) { encodeChunk = c }(encodeChunk)
	encodeChunk = 1 << 12
	rng := rand.New(rand.NewPCG(5, 6))
	n := 5*encodeChunk + 1234 // past the parallel threshold, a partial last chunk
	for _, tc := range []struct {
		dt  ir.DType
		f32 bool
		// wide: integer elements in int64 storage rather than the
		// dtype's own width.
		wide bool
	}{
		{ir.F32, true, false}, {ir.F32, false, false}, {ir.BF16, true, false}, {ir.BF16, false, false},
		{ir.F16, true, false}, {ir.F16, false, false}, {ir.I32, false, false}, {ir.I32, false, true},
		{ir.I64, false, false}, {ir.Bool, false, false}, {ir.U8, false, false}, {ir.U8, false, true},
	} {
		name := tc.dt.String()
		if tc.wide {
			name += "/int64-storage"
		}
		t.Run(name, func(t *testing.T) {
			require.GreaterOrEqual(t, n, 2*encodeChunk, "the parallel path")
			vals := make([]float64, n)
			for i := range vals {
				switch {
				case tc.dt == ir.Bool:
					vals[i] = float64(rng.IntN(2))
				case tc.dt == ir.U8:
					vals[i] = float64(rng.IntN(256))
				case tc.dt.IsInt():
					vals[i] = float64(rng.IntN(2001) - 1000)
				default:
					vals[i] = rng.NormFloat64() * 10
				}
			}
			want, err := ir.TensorOf(tc.dt, ir.Shape{ir.Dim(n)}, vals...)
			require.NoError(t, err)
			src := want
			if tc.f32 {
				f := make([]float32, n)
				for i, v := range want.F64 {
					f[i] = float32(v)
				}
				src, err = ir.TensorOfFloat32(tc.dt, ir.Shape{ir.Dim(n)}, f)
				require.NoError(t, err)
			}
			if tc.wide {
				src = &ir.Tensor{DType: tc.dt, Shape: want.Shape, I64: want.Int64s()}
			}
			var encodings [][]byte
			for _, procs := range []int{1, 3} {
				prev := runtime.GOMAXPROCS(procs)
				encodings = append(encodings, EncodeTensor(src))
				runtime.GOMAXPROCS(prev)
			}
			require.Equal(t, encodings[0], encodings[1], "the bytes do not depend on GOMAXPROCS")
			require.Equal(t, encodings[0], TensorBytes(src))
			got, err := DecodeTensor(ir.ValueType{DType: tc.dt, Shape: ir.Shape{ir.Dim(n)}}, encodings[0])
			require.NoError(t, err)
			for i := range int64(n) {
				if got.At(i) != want.At(i) {
					require.Equal(t, want.At(i), got.At(i), "element %d", i)
				}
			}
		})
	}
}
