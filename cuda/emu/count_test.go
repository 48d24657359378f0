package emu

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var countKernels = []Kernel{
	{Name: "copy_scalar", Params: []Param{{"x", "const float*"}, {"y", "float*"}, {"n", "int"}}},
	{Name: "copy_vec", Params: []Param{{"x", "const float*"}, {"y", "float*"}, {"n", "int"}}},
	{Name: "dot_twice", Params: []Param{{"w", "const float*"}, {"x", "const float*"}, {"y", "float*"}, {"n", "int"}, {"passes", "int"}}},
	{Name: "sum_atomic", Params: []Param{{"x", "const float*"}, {"y", "float*"}, {"n", "int"}}},
	{Name: "stage_async", Params: []Param{{"x", "const float*"}, {"y", "float*"}}},
}

func f32s(n int, f func(i int) float32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return b
}

// TestCountTraffic checks the counting runner's figures on kernels whose
// traffic is known: every launch of one run, so that one compilation
// serves them all.
func TestCountTraffic(t *testing.T) {
	needCompiler(t)
	src, err := os.ReadFile("testdata/count.cu")
	require.NoError(t, err)
	const n, rows, k = 1000, 4, 2048
	ones := func(int) float32 { return 1 }
	bufs := []Buffer{
		{Bytes: 4 * 1024, Data: f32s(1024, func(i int) float32 { return float32(i) })}, // 0: x
		{Bytes: 4 * 1024}, // 1: y
		{Bytes: 4 * rows * k, Data: f32s(rows*k, ones)}, // 2: w
		{Bytes: 4 * k, Data: f32s(k, ones)},             // 3: x of dot_twice
		{Bytes: 4 * rows},                               // 4: y of dot_twice
		{Bytes: 4, Data: make([]byte, 4)},               // 5: the atomic sum
	}
	type want struct {
		loads, stores, loadBytes, storeBytes int64
		read, write                          int64
	}
	tests := []struct {
		name   string
		launch Launch
		l2     int64
		want   want
	}{
		{"scalar copy", launch1("copy_scalar", 8, 128, buf(0), buf(1), intArg(n)), 1 << 20,
			want{n, n, 4 * n, 4 * n, 4 * n, 4 * n}},
		{"vector copy", launch1("copy_vec", 2, 128, buf(0), buf(1), intArg(1024)), 1 << 20,
			want{256, 256, 4096, 4096, 4096, 4096}},
		// A partial sector written is a whole sector written back.
		{"one float", launch1("copy_scalar", 1, 32, buf(0), buf(1), intArg(1)), 1 << 20,
			want{1, 1, 4, 4, 32, 32}},
		// The weight and x once; y (16 bytes) a sector.
		{"weight once", Launch{Kernel: "dot_twice", Grid: grid(rows), Block: grid(128), Args: []Arg{buf(2), buf(3), buf(4), intArg(k), intArg(1)}}, 1 << 20,
			want{2 * rows * k, rows, 8 * rows * k, 4 * rows, 4*rows*k + 4*k, 32}},
		// Read twice, L2 holds it: DRAM sees it once.
		{"weight twice, L2 holds it", Launch{Kernel: "dot_twice", Grid: grid(rows), Block: grid(128), Args: []Arg{buf(2), buf(3), buf(4), intArg(k), intArg(2)}}, 1 << 20,
			want{4 * rows * k, rows, 16 * rows * k, 4 * rows, 4*rows*k + 4*k, 32}},
		// Read twice through an L2 of 4 KiB, less than a row and x (16
		// KiB): both passes of every block read row and x from DRAM, and
		// y's sector is written back by every block.
		{"weight twice, L2 too small", Launch{Kernel: "dot_twice", Grid: grid(rows), Block: grid(128), Args: []Arg{buf(2), buf(3), buf(4), intArg(k), intArg(2)}}, 4 << 10,
			want{4 * rows * k, rows, 16 * rows * k, 4 * rows, 2 * rows * (4*k + 4*k), rows * 32}},
		// A float atomicAdd is a load and a compare-and-swap (a load
		// and a store) here; its line stays in L2. x's 400 bytes are 13
		// sectors.
		{"atomics", launch1("sum_atomic", 2, 64, buf(0), buf(5), intArg(100)), 1 << 20,
			want{300, 100, 1200, 400, 13*32 + 32, 32}},
		// cp.async reads global memory; shared memory is not counted.
		{"cp.async", Launch{Kernel: "stage_async", Grid: grid(2), Block: grid(64), Args: []Arg{buf(0), buf(1)}}, 1 << 20,
			want{128, 128, 2048, 2048, 2048, 2048}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// One compilation: every case is a launch of one run per L2 size.
	for _, l2 := range []int64{1 << 20, 4 << 10} {
		var launches []Launch
		var idx []int
		for i, tt := range tests {
			if tt.l2 == l2 {
				launches = append(launches, tt.launch)
				idx = append(idx, i)
			}
		}
		_, traffic, err := Count(ctx, string(src), countKernels, bufs, launches, Options{CacheDir: testCache}, l2)
		require.NoError(t, err)
		require.Len(t, traffic, len(launches))
		for j, i := range idx {
			tt, got := tests[i], traffic[j]
			t.Run(tt.name, func(t *testing.T) {
				assert.Equal(t, tt.want, want{got.Loads, got.Stores, got.LoadBytes, got.StoreBytes, got.ReadBytes, got.WriteBytes}, "%+v", got)
				assert.Equal(t, got.ReadBytes+got.WriteBytes, got.DRAM())
			})
		}
	}
}

// TestCountComputes: the counting runner computes what Run computes.
func TestCountComputes(t *testing.T) {
	needCompiler(t)
	src, err := os.ReadFile("testdata/count.cu")
	require.NoError(t, err)
	bufs := []Buffer{{Bytes: 4 * 1024, Data: f32s(1024, func(i int) float32 { return float32(i) })}, {Bytes: 4 * 1024}}
	launches := []Launch{launch1("copy_vec", 2, 128, buf(0), buf(1), intArg(1024))}
	ctx := context.Background()
	got, _, err := Count(ctx, string(src), countKernels, bufs, launches, Options{CacheDir: testCache}, 1<<20)
	require.NoError(t, err)
	want, err := Run(ctx, string(src), countKernels, bufs, launches, Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, _, err = Count(ctx, string(src), countKernels, bufs, launches, Options{CacheDir: testCache}, 64)
	assert.ErrorContains(t, err, "holds no 128-byte line")
}
