package emu

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

var tcKernels = []Kernel{
	{"mma", params("const unsigned* a", "const unsigned* b", "const float* c", "float* d", "int bf16")},
	{"pack", params("const float* x", "unsigned* y", "int n", "int bf16")},
	{"mma_returned", params("float* d")},
	{"mma_mixed", params("float* d")},
	{"cp_async", params("const float* src", "float* early", "float* late")},
	{"cp_async_misaligned", params("const float* src", "float* out")},
}

// runTC runs launches of testdata/tensorcore.cu.
func runTC(tb testing.TB, bufs []Buffer, launches []Launch, opt Options) ([][]byte, error) {
	tb.Helper()
	needCompiler(tb)
	src, err := os.ReadFile("testdata/tensorcore.cu")
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opt.CacheDir = testCache
	return Run(ctx, string(src), tcKernels, bufs, launches, opt)
}

func u32Bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// half16 rounds f to f16 or bf16 bits, through references that share no
// code with emu.h.
func half16(f float32, bf16 bool) uint16 {
	if bf16 {
		return bf16Ref(f)
	}
	return float16.Fromfloat32(f).Bits()
}

func halfValue(h uint16, bf16 bool) float64 {
	if bf16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	return float64(float16.Frombits(h).Float32())
}

// The m16n8k16 fragment layouts, from the PTX ISA's tables (section
// 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating point
// type"), written per register: with groupID g = lane >> 2 and
// threadID_in_group t = lane % 4, register r of A holds a(2r) in its low
// half and a(2r+1) in its high half, at row g + aRow[r] and columns
// 2t + aCol[r] and 2t + aCol[r] + 1 (a0,a1: row g; a2,a3: row g+8; a4,a5:
// row g, columns +8; a6,a7: row g+8, columns +8). Register r of B holds
// b(2r), b(2r+1) at rows (k) 2t + bRow[r] and 2t + bRow[r] + 1, column (n)
// g. Accumulator q is at row g + cRow[q], column 2t + cCol[q].
var (
	aRow = [4]int{0, 8, 0, 8}
	aCol = [4]int{0, 0, 8, 8}
	bRow = [2]int{0, 8}
	cRow = [4]int{0, 0, 8, 8}
	cCol = [4]int{0, 1, 0, 1}
)

// fragments lays the warp's A (16x16), B (16x8) and C (16x8), given as
// f16/bf16 bits and f32, out as each lane's registers.
func fragments(A [16][16]uint16, B [16][8]uint16, C [16][8]float32) (a, b []uint32, c []float32) {
	for lane := range 32 {
		g, t := lane>>2, lane%4
		for r := range 4 {
			row, col := g+aRow[r], 2*t+aCol[r]
			a = append(a, uint32(A[row][col])|uint32(A[row][col+1])<<16)
		}
		for r := range 2 {
			k := 2*t + bRow[r]
			b = append(b, uint32(B[k][g])|uint32(B[k+1][g])<<16)
		}
		for q := range 4 {
			c = append(c, C[g+cRow[q]][2*t+cCol[q]])
		}
	}
	return a, b, c
}

// unfragment reads D back from the lanes' accumulators.
func unfragment(d []float32) (D [16][8]float32) {
	for lane := range 32 {
		g, t := lane>>2, lane%4
		for q := range 4 {
			D[g+cRow[q]][2*t+cCol[q]] = d[4*lane+q]
		}
	}
	return D
}

// TestMmaFragmentLayout runs lum_mma_m16n8k16_{f16,bf16} on tiles laid out
// per the PTX tables and compares with a direct product: with integer
// values the f32 result is exact whatever the order, so a single misplaced
// element shows; zero and identity operands check each layout against the
// accumulators'.
func TestMmaFragmentLayout(t *testing.T) {
	t.Parallel()
	type tile struct {
		A [16][16]float32
		B [16][8]float32
		C [16][8]float32
	}
	distinct := func(seed uint64) tile {
		rng := rand.New(rand.NewPCG(seed, 1))
		var x tile
		sign := func() float32 { return float32(1 - 2*rng.IntN(2)) }
		for m := range 16 {
			for k := range 16 {
				x.A[m][k] = sign() * float32(m*16+k+1) // up to 256: exact in f16 and bf16
			}
		}
		for k := range 16 {
			for n := range 8 {
				x.B[k][n] = sign() * float32(k*8+n+1)
			}
		}
		for m := range 16 {
			for n := range 8 {
				x.C[m][n] = float32(m*8+n) + 0.5
			}
		}
		return x
	}
	tests := []struct {
		name  string
		tiles func() tile
		exact bool
	}{
		{"distinct integers", func() tile { return distinct(1) }, true},
		{"A zero: D is C", func() tile {
			x := distinct(2)
			x.A = [16][16]float32{}
			return x
		}, true},
		{"A identity: D is C plus B", func() tile {
			x := distinct(3)
			x.A = [16][16]float32{}
			for i := range 16 {
				x.A[i][i] = 1
			}
			return x
		}, true},
		{"B identity on top: D is C plus A's first columns", func() tile {
			x := distinct(4)
			x.B = [16][8]float32{}
			for i := range 8 {
				x.B[i][i] = 1
			}
			return x
		}, true},
		{"B identity below: D is C plus A's columns 8 to 15", func() tile {
			x := distinct(5)
			x.B = [16][8]float32{}
			for i := range 8 {
				x.B[i+8][i] = 1
			}
			return x
		}, true},
		{"random", func() tile {
			rng := rand.New(rand.NewPCG(6, 1))
			var x tile
			for m := range 16 {
				for k := range 16 {
					x.A[m][k] = float32(rng.NormFloat64())
				}
			}
			for k := range 16 {
				for n := range 8 {
					x.B[k][n] = float32(rng.NormFloat64())
				}
			}
			for m := range 16 {
				for n := range 8 {
					x.C[m][n] = float32(rng.NormFloat64())
				}
			}
			return x
		}, false},
	}
	for _, tc := range tests {
		for _, bf16 := range []bool{false, true} {
			// Two warps with different tiles: each warp's mma is its own.
			x0, x1 := tc.tiles(), tc.tiles()
			for m := range 16 {
				for n := range 8 {
					x1.C[m][n] = -x1.C[m][n]
				}
			}
			var a, b []uint32
			var c []float32
			var want [2][16][8]float64
			var mag [2][16][8]float64
			for w, x := range []tile{x0, x1} {
				var A [16][16]uint16
				var B [16][8]uint16
				for m := range 16 {
					for k := range 16 {
						A[m][k] = half16(x.A[m][k], bf16)
					}
				}
				for k := range 16 {
					for n := range 8 {
						B[k][n] = half16(x.B[k][n], bf16)
					}
				}
				for m := range 16 {
					for n := range 8 {
						s, abs := float64(x.C[m][n]), math.Abs(float64(x.C[m][n]))
						for k := range 16 {
							p := halfValue(A[m][k], bf16) * halfValue(B[k][n], bf16)
							s += p
							abs += math.Abs(p)
						}
						want[w][m][n], mag[w][m][n] = s, abs
					}
				}
				wa, wb, wc := fragments(A, B, x.C)
				a, b, c = append(a, wa...), append(b, wb...), append(c, wc...)
			}
			flag := int64(0)
			if bf16 {
				flag = 1
			}
			for _, opt := range []Options{{}, {Shuffle: true, Seed: 9}} {
				out, err := runTC(t, []Buffer{{4 * len(a), u32Bytes(a)}, {4 * len(b), u32Bytes(b)}, {4 * len(c), f32Bytes(c)}, {4 * len(c), nil}},
					[]Launch{launch1("mma", 1, 64, buf(0), buf(1), buf(2), buf(3), intArg(flag))}, opt)
				require.NoError(t, err, tc.name)
				d := bytesF32(out[3])
				for w := range 2 {
					D := unfragment(d[128*w : 128*(w+1)])
					for m := range 16 {
						for n := range 8 {
							if tc.exact {
								require.Equal(t, want[w][m][n], float64(D[m][n]), "%s (bf16 %v) warp %d: D[%d][%d]", tc.name, bf16, w, m, n)
							} else {
								require.InDelta(t, want[w][m][n], float64(D[m][n]), 20*0x1p-24*mag[w][m][n], "%s (bf16 %v) warp %d: D[%d][%d]", tc.name, bf16, w, m, n)
							}
						}
					}
				}
			}
		}
	}
}

// TestPackHalf2 checks lum_pack_f16x2 and lum_pack_bf16x2 against the
// rounding references: the low half from the first value, ties to even,
// NaN canonical.
func TestPackHalf2(t *testing.T) {
	t.Parallel()
	x := halfInputs()
	if len(x)%2 == 1 {
		x = x[:len(x)-1]
	}
	n := len(x) / 2
	for _, bf16 := range []bool{false, true} {
		flag := int64(0)
		if bf16 {
			flag = 1
		}
		out, err := runTC(t, []Buffer{{4 * len(x), f32Bytes(x)}, {4 * n, nil}},
			[]Launch{launch1("pack", (n+255)/256, 256, buf(0), buf(1), intArg(int64(n)), intArg(flag))}, Options{})
		require.NoError(t, err)
		got := u32s(out[1])
		for i := range n {
			lo, hi := x[2*i], x[2*i+1]
			want := func(f float32) uint16 {
				if f != f {
					return 0x7fff
				}
				return half16(f, bf16)
			}
			require.Equal(t, uint32(want(lo))|uint32(want(hi))<<16, got[i], "bf16 %v: pack(%g, %g)", bf16, lo, hi)
		}
	}
}

// TestMmaNeedsTheWholeWarp: a lane that returned, or lanes in the other
// precision's mma, are a diverged warp, reported rather than computed.
func TestMmaNeedsTheWholeWarp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kernel   string
		threads  int
		contains []string
	}{
		{"mma_returned", 32, []string{"warp 0 diverged", "lum_mma_m16n8k16_f16 needs all 32 lanes", "lanes 5", "have returned"}},
		{"mma_mixed", 32, []string{"warp 0 diverged", "lum_mma_m16n8k16_f16", "lum_mma_m16n8k16_bf16"}},
	}
	for _, tc := range tests {
		_, err := runTC(t, []Buffer{{4 * 64, nil}}, []Launch{launch1(tc.kernel, 1, tc.threads, buf(0))}, Options{})
		ke := kernelError(t, err)
		assert.Equal(t, "deadlock", ke.Kind, tc.kernel)
		for _, s := range tc.contains {
			assert.Contains(t, err.Error(), s, "%s with %d threads", tc.kernel, tc.threads)
		}
	}
	// A warp cut short by the block's size: threads 32 to 47.
	_, err := runTC(t, []Buffer{{4 * 4 * 48, nil}, {4 * 2 * 48, nil}, {4 * 4 * 48, nil}, {4 * 4 * 48, nil}},
		[]Launch{launch1("mma", 1, 48, buf(0), buf(1), buf(2), buf(3), intArg(0))}, Options{})
	ke := kernelError(t, err)
	assert.Equal(t, "deadlock", ke.Kind)
	assert.Contains(t, err.Error(), "warp 1 diverged: lum_mma_m16n8k16_f16 needs all 32 lanes of the warp, but lanes 16-31 (threads 32 + lane) are beyond the block")
}

// TestCpAsync: the copy lands at the wait, not before (a kernel reading
// early reads stale data, as it may on the GPU), and other threads see it
// after the barrier; misaligned addresses are reported.
func TestCpAsync(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	src := randFloats(rng, 64*4)
	out, err := runTC(t, []Buffer{{4 * len(src), f32Bytes(src)}, {4 * len(src), nil}, {4 * len(src), nil}},
		[]Launch{launch1("cp_async", 1, 64, buf(0), buf(1), buf(2))}, Options{Shuffle: true, Seed: 1})
	require.NoError(t, err)
	early, late := bytesF32(out[1]), bytesF32(out[2])
	for i := range 64 {
		j := (i + 1) % 64
		for q := range 4 {
			assert.Equal(t, float32(-1), early[4*i+q], "thread %d read its slot before waiting", i)
			assert.Equal(t, src[4*j+q], late[4*i+q], "thread %d reads thread %d's copy", i, j)
		}
	}
	_, err = runTC(t, []Buffer{{64, f32Bytes(src[:16])}, {4, nil}}, []Launch{launch1("cp_async_misaligned", 1, 1, buf(0), buf(1))}, Options{})
	ke := kernelError(t, err)
	assert.Equal(t, "misaligned", ke.Kind)
	assert.Contains(t, err.Error(), "lum_cp_async16 source")
}
