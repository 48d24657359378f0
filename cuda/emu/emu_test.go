package emu

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testCache is a fresh compile cache shared by the tests of one run, so that
// the test kernels compile once and the user's cache is left alone.
var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lumsearch-emu-test-")
	if err != nil {
		panic(err)
	}
	testCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needCompiler(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		tb.Skip("g++ is not installed")
	}
}

// params parses "const float* a" into a Param.
func params(decls ...string) []Param {
	ps := make([]Param, len(decls))
	for i, d := range decls {
		j := strings.LastIndexAny(d, " *")
		ps[i] = Param{Name: d[j+1:], Type: strings.TrimSpace(d[:j+1])}
	}
	return ps
}

// testKernels lists every kernel of testdata/kernels.cu, so that all tests
// share one compiled runner.
var testKernels = []Kernel{
	{"vadd", params("const float* a", "const float* b", "float* c", "int n")},
	{"vadd4", params("const float* a", "const float* b", "float* c", "int n")},
	{"block_sum", params("const float* x", "float* out", "int n")},
	{"warp_sum", params("const float* x", "float* out", "int n")},
	{"f32_to_f16", params("const float* x", "lum_f16* y", "int n")},
	{"f16_to_f32", params("const lum_f16* x", "float* y", "int n")},
	{"f32_to_bf16", params("const float* x", "lum_bf16* y", "int n")},
	{"bf16_to_f32", params("const lum_bf16* x", "float* y", "int n")},
	{"oob_write", params("float* y", "int n")},
	{"oob_read_before", params("const float* x", "float* y")},
	{"tail_write", params("float* y", "int n")},
	{"misaligned", params("const float* x", "float* y")},
	{"divergent_barrier", params("float* y")},
	{"barrier_vs_shuffle", params("float* y")},
	{"early_return", params("const float* x", "float* y", "int active")},
	{"shift_racy", params("const float* x", "float* y")},
	{"shift_fixed", params("const float* x", "float* y")},
	{"spin", params("const int* flag")},
	{"sync_loop", params("float* y", "int iters")},
	{"warp_ops", params("const int* x", "int* out")},
	{"shfl_exited", params("float* y")},
	{"index3d", params("int* out")},
	{"grid_ids", params("int* out")},
	{"scalars", params("double* y", "long long a", "float b", "unsigned c")},
	{"math_ops", params("const float* x", "float* y", "int n")},
	{"stack_hog", params("float* y", "int n")},
	{"half_masks", params("const int* x", "int* y")},
	{"diverged_warp", params("int* y")},
	{"shared_unwritten", params("float* y", "int helper")},
}

func testSource(tb testing.TB) string {
	tb.Helper()
	src, err := os.ReadFile("testdata/kernels.cu")
	require.NoError(tb, err)
	return string(src)
}

// run runs launches of the test kernels with a generous deadline.
func run(tb testing.TB, bufs []Buffer, launches []Launch, opt Options) ([][]byte, error) {
	tb.Helper()
	needCompiler(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if opt.CacheDir == "" {
		opt.CacheDir = testCache
	}
	return Run(ctx, testSource(tb), testKernels, bufs, launches, opt)
}

func buf(i int) Arg      { return Arg{Buffer: i} }
func intArg(v int64) Arg { return Arg{Int: v, IsInt: true} }
func grid(x int) [3]int  { return [3]int{x, 1, 1} }
func launch1(k string, g, b int, args ...Arg) Launch {
	return Launch{Kernel: k, Grid: grid(g), Block: grid(b), Args: args}
}

// randFloats returns n random non-zero values of magnitude 0.5 to 1.5.
func randFloats(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(0.5 + rng.Float64())
		if rng.IntN(2) == 0 {
			v[i] = -v[i]
		}
	}
	return v
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func u32s(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

func TestVectorAdd(t *testing.T) {
	t.Parallel()
	for _, kernel := range []string{"vadd", "vadd4"} {
		for _, n := range []int{1, 5, 1000, 1027} {
			for _, block := range []int{1, 64, 256} {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(block)))
				a, b := randFloats(rng, n), randFloats(rng, n)
				threads := n
				if kernel == "vadd4" {
					threads = n/4 + n%4
				}
				out, err := run(t, []Buffer{{4 * n, f32Bytes(a)}, {4 * n, f32Bytes(b)}, {4 * n, nil}},
					[]Launch{launch1(kernel, (threads+block-1)/block, block, buf(0), buf(1), buf(2), intArg(int64(n)))}, Options{})
				require.NoError(t, err, "%s n=%d block=%d", kernel, n, block)
				c := bytesF32(out[2])
				for i := range c {
					require.Equal(t, a[i]+b[i], c[i], "%s n=%d block=%d: c[%d]", kernel, n, block, i)
				}
				assert.Equal(t, f32Bytes(a), out[0], "inputs come back unchanged")
			}
		}
	}
}

func TestBlockReduce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kernel string
		blocks []int
	}{
		{"block_sum", []int{1, 3, 32, 100, 256, 1024}},
		{"warp_sum", []int{32, 64, 96, 256, 1024}},
	}
	const rows = 3
	for _, tc := range tests {
		for _, block := range tc.blocks {
			for _, n := range []int{1, 1000, 4099} {
				rng := rand.New(rand.NewPCG(uint64(block), uint64(n)))
				x := randFloats(rng, rows*n)
				out, err := run(t, []Buffer{{4 * rows * n, f32Bytes(x)}, {4 * rows, nil}},
					[]Launch{launch1(tc.kernel, rows, block, buf(0), buf(1), intArg(int64(n)))}, Options{})
				require.NoError(t, err, "%s block=%d n=%d", tc.kernel, block, n)
				got := bytesF32(out[1])
				for r := range rows {
					var sum, mag float64
					for _, v := range x[r*n : (r+1)*n] {
						sum += float64(v)
						mag += math.Abs(float64(v))
					}
					assert.InDelta(t, sum, float64(got[r]), 1e-6*mag+1e-30, "%s block=%d n=%d row %d", tc.kernel, block, n, r)
				}
			}
		}
	}
}

func TestIndex3D(t *testing.T) {
	t.Parallel()
	g, b := [3]int{2, 3, 2}, [3]int{4, 2, 3}
	nb, nt := g[0]*g[1]*g[2], b[0]*b[1]*b[2]
	out, err := run(t, []Buffer{{4 * 6 * nb * nt, nil}}, []Launch{{Kernel: "index3d", Grid: g, Block: b, Args: []Arg{buf(0)}}}, Options{})
	require.NoError(t, err)
	v := u32s(out[0])
	for bz := range g[2] {
		for by := range g[1] {
			for bx := range g[0] {
				for tz := range b[2] {
					for ty := range b[1] {
						for tx := range b[0] {
							lb := bx + g[0]*(by+g[1]*bz)
							lt := tx + b[0]*(ty+b[1]*tz)
							o := v[6*(lb*nt+lt):][:6]
							require.Equal(t, []uint32{uint32(bx), uint32(by), uint32(bz), uint32(tx), uint32(ty), uint32(tz)}, o)
						}
					}
				}
			}
		}
	}
}

// TestBlockSubset runs a few blocks of a 3-D grid: only their threads
// write, blockIdx and gridDim describe the whole grid, and the other
// blocks' elements keep the NaN pattern of a buffer given without data.
func TestBlockSubset(t *testing.T) {
	t.Parallel()
	g, b := [3]int{3, 2, 2}, [3]int{4, 2, 1}
	nb, nt := g[0]*g[1]*g[2], b[0]*b[1]*b[2]
	tests := []struct {
		name   string
		blocks []int
		opt    Options
	}{
		{"first and last", []int{0, nb - 1}, Options{}},
		{"unordered", []int{7, 2, 11, 5}, Options{}},
		{"shuffled, one worker", []int{9, 1, 4}, Options{Shuffle: true, Seed: 5, Workers: 1}},
		{"more workers than blocks", []int{3}, Options{Workers: 8}},
		{"every block listed", []int{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, Options{Shuffle: true, Seed: 2}},
	}
	for _, tc := range tests {
		out, err := run(t, []Buffer{{4 * 6 * nb * nt, nil}},
			[]Launch{{Kernel: "grid_ids", Grid: g, Block: b, Args: []Arg{buf(0)}, Blocks: tc.blocks}}, tc.opt)
		require.NoError(t, err, tc.name)
		v := u32s(out[0])
		for lb := range nb {
			bx, by, bz := lb%g[0], lb/g[0]%g[1], lb/(g[0]*g[1])
			want := []uint32{uint32(bx), uint32(by), uint32(bz), uint32(g[0]), uint32(g[1]), uint32(g[2])}
			if !slices.Contains(tc.blocks, lb) {
				want = []uint32{NaNPattern, NaNPattern, NaNPattern, NaNPattern, NaNPattern, NaNPattern}
			}
			for lt := range nt {
				at := 6 * (lb*nt + lt)
				require.Equal(t, want, v[at:][:6], "%s: block %d thread %d", tc.name, lb, lt)
				require.Equal(t, !slices.Contains(tc.blocks, lb), Unwritten(out[0], 4*at, 24), "%s: block %d thread %d", tc.name, lb, lt)
			}
		}
	}
}

// TestBlockSubsetFailures: a failure in a selected block is reported with
// that block's index; blocks left out never run.
func TestBlockSubsetFailures(t *testing.T) {
	t.Parallel()
	_, err := run(t, []Buffer{{4 * 64, nil}}, []Launch{{Kernel: "divergent_barrier", Grid: [3]int{4, 2, 1}, Block: grid(64),
		Args: []Arg{buf(0)}, Blocks: []int{6}}}, Options{})
	var ke *KernelError
	require.ErrorAs(t, err, &ke)
	assert.Equal(t, "deadlock", ke.Kind)
	assert.Equal(t, []int{2, 1, 0}, ke.Block)

	// oob_write's threads past n write out of bounds; with n covering the
	// first block only, running just that block succeeds.
	_, err = run(t, []Buffer{{4 * 32, nil}}, []Launch{{Kernel: "oob_write", Grid: grid(3), Block: grid(32),
		Args: []Arg{buf(0), intArg(32)}, Blocks: []int{0}}}, Options{})
	require.NoError(t, err)
	_, err = run(t, []Buffer{{4 * 32, nil}}, []Launch{{Kernel: "oob_write", Grid: grid(3), Block: grid(32),
		Args: []Arg{buf(0), intArg(32)}, Blocks: []int{0, 2}}}, Options{})
	require.ErrorAs(t, err, &ke)
	assert.Equal(t, "out-of-bounds", ke.Kind)
	assert.Equal(t, []int{2, 0, 0}, ke.Block)
}

func TestScalarArgs(t *testing.T) {
	t.Parallel()
	out, err := run(t, []Buffer{{24, nil}}, []Launch{launch1("scalars", 1, 1, buf(0), intArg(1<<40+3), Arg{Float: 1.5, IsFloat: true}, intArg(4000000000))}, Options{})
	require.NoError(t, err)
	y := make([]float64, 3)
	for i := range y {
		y[i] = math.Float64frombits(binary.LittleEndian.Uint64(out[0][8*i:]))
	}
	assert.Equal(t, []float64{1<<40 + 3, 1.5, 4000000000}, y)
}

func TestMathFunctions(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	x := randFloats(rng, 64)
	x = append(x, 3.5, -2.25, 0.125, -7)
	n := len(x)
	out, err := run(t, []Buffer{{4 * n, f32Bytes(x)}, {4 * 12 * n, nil}}, []Launch{launch1("math_ops", 1, 128, buf(0), buf(1), intArg(int64(n)))}, Options{})
	require.NoError(t, err)
	y := bytesF32(out[1])
	for i, xf := range x {
		v, a := float64(xf), math.Abs(float64(xf))
		want := []float64{math.Exp(v), math.Log(a), math.Sqrt(a), 1 / math.Sqrt(a), math.Tanh(v), math.Erf(v),
			math.Pow(a, 1.5), math.Max(v, 0.25), math.Min(v, 0.25), math.Exp(v), math.Inf(int(math.Copysign(1, v))), a}
		for k, w := range want {
			got := float64(y[12*i+k])
			if math.IsInf(w, 0) {
				assert.Equal(t, w, got, "x=%v op %d", v, k)
				continue
			}
			assert.InDelta(t, w, got, 4e-7*math.Abs(w)+1e-7, "x=%v op %d", v, k)
		}
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	k := []Kernel{{"k", params("float* y", "int n")}}
	tests := []struct {
		name     string
		kernels  []Kernel
		bufs     []Buffer
		launches []Launch
		want     string
	}{
		{"unknown kernel", k, []Buffer{{4, nil}}, []Launch{launch1("nope", 1, 1, buf(0), intArg(1))}, `unknown kernel "nope"`},
		{"arg count", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 1, buf(0))}, "1 arguments for 2 parameters"},
		{"int for pointer", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 1, intArg(0), intArg(1))}, "argument y does not match its type float*"},
		{"pointer for int", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 1, buf(0), buf(0))}, "argument n does not match its type int"},
		{"no buffer", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 1, buf(3), intArg(1))}, "no buffer 3"},
		{"offset", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 1, Arg{Buffer: 0, Offset: 8}, intArg(1))}, "offset 8 outside buffer 0"},
		{"block too big", k, []Buffer{{4, nil}}, []Launch{launch1("k", 1, 2048, buf(0), intArg(1))}, "exceeds CUDA's limits"},
		{"zero grid", k, []Buffer{{4, nil}}, []Launch{launch1("k", 0, 1, buf(0), intArg(1))}, "must be positive"},
		{"data length", k, []Buffer{{8, []byte{1}}}, nil, "1 bytes of data for a buffer of 8 bytes"},
		{"bad type", []Kernel{{"k", []Param{{"y", "float&"}}}}, nil, nil, `unsupported parameter type "float&"`},
		{"bad name", []Kernel{{"k-1", nil}}, nil, nil, "not a C identifier"},
		{"duplicate", []Kernel{{"k", nil}, {"k", nil}}, nil, nil, "listed twice"},
		{"block outside the grid", k, []Buffer{{4, nil}}, []Launch{{Kernel: "k", Grid: [3]int{2, 3, 1}, Block: grid(1), Args: []Arg{buf(0), intArg(1)}, Blocks: []int{0, 6}}},
			"grid [2 3 1]: selected block 6 (Blocks[1]) is outside the grid's 6 blocks"},
		{"negative block", k, []Buffer{{4, nil}}, []Launch{{Kernel: "k", Grid: grid(4), Block: grid(1), Args: []Arg{buf(0), intArg(1)}, Blocks: []int{-1}}},
			"selected block -1 (Blocks[0]) is outside the grid's 4 blocks"},
		{"block twice", k, []Buffer{{4, nil}}, []Launch{{Kernel: "k", Grid: grid(4), Block: grid(1), Args: []Arg{buf(0), intArg(1)}, Blocks: []int{3, 1, 3}}},
			"block 3 is selected twice (Blocks[0] and Blocks[2])"},
	}
	for _, tc := range tests {
		_, err := Run(context.Background(), "", tc.kernels, tc.bufs, tc.launches, Options{CacheDir: testCache})
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
}

func TestCompileError(t *testing.T) {
	t.Parallel()
	needCompiler(t)
	src := `extern "C" __global__ void bad(float* y) { y[0] = undefined_name; }`
	_, err := Run(context.Background(), src, []Kernel{{"bad", params("float* y")}}, []Buffer{{4, nil}},
		[]Launch{launch1("bad", 1, 1, buf(0))}, Options{CacheDir: testCache})
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Log, "undefined_name")
}

// TestUnwritten reads the NaN pattern at every element size and offset.
func TestUnwritten(t *testing.T) {
	fill := make([]byte, 32)
	for i := 0; i < len(fill); i += 4 {
		binary.LittleEndian.PutUint32(fill[i:], NaNPattern)
	}
	for _, size := range []int{1, 2, 4, 8} {
		for off := 0; off+size <= len(fill); off += size {
			assert.True(t, Unwritten(fill, off, size), "size %d offset %d", size, off)
			b := slices.Clone(fill)
			b[off+size-1] ^= 1
			assert.False(t, Unwritten(b, off, size), "size %d offset %d", size, off)
		}
	}
	half := make([]byte, 4)
	binary.LittleEndian.PutUint16(half, 0x7fff) // the canonical f16 and bf16 NaN a narrowing writes is written
	binary.LittleEndian.PutUint16(half[2:], 0x7e00)
	assert.False(t, Unwritten(half, 0, 2))
	assert.False(t, Unwritten(half, 2, 2))
}

// TestDiscard: buffers the caller discards come back nil, the others as
// computed; a discarded index out of range is an error.
func TestDiscard(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	a, b := randFloats(rng, 100), randFloats(rng, 100)
	bufs := []Buffer{{Bytes: 400, Data: f32Bytes(a)}, {Bytes: 400, Data: f32Bytes(b)}, {Bytes: 400}}
	launches := []Launch{launch1("vadd", 1, 128, buf(0), buf(1), buf(2), intArg(100))}
	out, err := run(t, bufs, launches, Options{Discard: []int{0, 1}})
	require.NoError(t, err)
	assert.Nil(t, out[0])
	assert.Nil(t, out[1])
	c := bytesF32(out[2])
	for i := range c {
		require.Equal(t, a[i]+b[i], c[i])
	}
	_, err = run(t, bufs, launches, Options{Discard: []int{3}})
	require.ErrorContains(t, err, "Discard names buffer 3")
}
