package emu

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const nanFill = NaNPattern

func TestEarlyReturnLeavesTheBarrier(t *testing.T) {
	t.Parallel()
	const block, blocks = 64, 2
	for _, active := range []int{1, 17, 33, 64} {
		x := randFloats(rand.New(rand.NewPCG(1, uint64(active))), block*blocks)
		for _, shuffle := range []bool{false, true} {
			out, err := run(t, []Buffer{{4 * len(x), f32Bytes(x)}, {4 * len(x), nil}},
				[]Launch{launch1("early_return", blocks, block, buf(0), buf(1), intArg(int64(active)))}, Options{Shuffle: shuffle, Seed: 9})
			require.NoError(t, err, "active=%d", active)
			y := u32s(out[1])
			for b := range blocks {
				for th := range block {
					i := b*block + th
					if th >= active {
						assert.Equal(t, uint32(nanFill), y[i], "active=%d: thread %d returned and wrote nothing", active, i)
						continue
					}
					want := 2 * x[b*block+(th+1)%active]
					assert.Equal(t, math.Float32bits(want), y[i], "active=%d: y[%d]", active, i)
				}
			}
		}
	}
}

// warpRef computes what warp_ops writes, by CUDA's definitions.
func warpRef(x []int32) []int32 {
	out := make([]int32, 10*len(x))
	for t := range x {
		base, l := t&^31, t&31
		v := func(src int) int32 { return x[base+src] }
		o := out[10*t:]
		o[0] = v(l ^ 5)
		o[1], o[2], o[5] = x[t], x[t], x[t]
		if l+3 < 32 {
			o[1] = v(l + 3)
		}
		if l >= 3 {
			o[2] = v(l - 3)
		}
		o[3] = v(31 - l)
		o[4] = x[t]
		if src := l ^ 8; src < l&^7+8 { // width 8: earlier segments only
			o[4] = v(src)
		}
		if l%16+5 < 16 {
			o[5] = v(l + 5)
		}
		var ballot uint32
		anyBig, all := int32(0), int32(1)
		for k := range 32 {
			if v(k)&1 != 0 {
				ballot |= 1 << k
			}
			if v(k) > 1000 {
				anyBig = 1
			}
			if v(k) <= 0 {
				all = 0
			}
		}
		o[6], o[7], o[8] = int32(ballot), anyBig, all
		down := x[t]
		if l+1 < 32 {
			down = v(l + 1)
		}
		o[9] = int32(math.Float32bits(float32(down)))
	}
	return out
}

func TestWarpCollectives(t *testing.T) {
	t.Parallel()
	const block = 64
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]int32, block)
	in := make([]byte, 4*block)
	for i := range x {
		x[i] = 1 + rng.Int32N(2000)
		binary.LittleEndian.PutUint32(in[4*i:], uint32(x[i]))
	}
	want := warpRef(x)
	for _, shuffle := range []bool{false, true} {
		out, err := run(t, []Buffer{{len(in), in}, {4 * 10 * block, nil}}, []Launch{launch1("warp_ops", 1, block, buf(0), buf(1))}, Options{Shuffle: shuffle, Seed: 3})
		require.NoError(t, err)
		got := u32s(out[1])
		for i := range want {
			require.Equal(t, uint32(want[i]), got[i], "thread %d op %d (shuffle %v)", i/10, i%10, shuffle)
		}
	}
}

func TestHalfWarpMasks(t *testing.T) {
	t.Parallel()
	in := make([]byte, 4*64)
	for i := range 64 {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(100+i))
	}
	out, err := run(t, []Buffer{{len(in), in}, {len(in), nil}}, []Launch{launch1("half_masks", 1, 64, buf(0), buf(1))}, Options{Shuffle: true})
	require.NoError(t, err)
	y := u32s(out[1])
	for i := range 64 {
		src := i ^ 1
		if i%32 >= 16 {
			src = i ^ 2
		}
		assert.Equal(t, uint32(100+src), y[i], "thread %d", i)
	}
}

func TestShuffleFromReturnedLaneIsPoison(t *testing.T) {
	t.Parallel()
	out, err := run(t, []Buffer{{4 * 32, make([]byte, 4*32)}}, []Launch{launch1("shfl_exited", 1, 32, buf(0))}, Options{})
	require.NoError(t, err)
	y := u32s(out[0])
	for l := range 32 {
		switch {
		case l < 8:
			assert.Equal(t, math.Float32bits(float32(l+9)), y[l], "lane %d", l)
		case l < 16:
			assert.Equal(t, uint32(nanFill), y[l], "lane %d read a returned lane", l)
		default:
			assert.Equal(t, uint32(0), y[l], "lane %d returned", l)
		}
	}
}

func TestShuffledOrderExposesRace(t *testing.T) {
	t.Parallel()
	const block, blocks = 256, 4
	x := randFloats(rand.New(rand.NewPCG(11, 12)), block*blocks)
	want := make([]float32, len(x))
	for i := range x {
		if i%block > 0 {
			want[i] = x[i-1]
		}
	}
	bufs := []Buffer{{4 * len(x), f32Bytes(x)}, {4 * len(x), nil}}
	shift := func(kernel string, opt Options) []float32 {
		opt.Workers = 1 // stale shared memory then comes from a fixed block
		out, err := run(t, bufs, []Launch{launch1(kernel, blocks, block, buf(0), buf(1))}, opt)
		require.NoError(t, err)
		return bytesF32(out[1])
	}
	assert.Equal(t, want, shift("shift_racy", Options{}), "in thread order the racy kernel happens to work")
	assert.NotEqual(t, want, shift("shift_racy", Options{Shuffle: true, Seed: 1}), "shuffled order exposes the missing barrier")
	for seed := range uint64(3) {
		assert.Equal(t, want, shift("shift_fixed", Options{Shuffle: true, Seed: seed}))
	}
}

func TestCorrectKernelsAgreeShuffled(t *testing.T) {
	t.Parallel()
	const rows, n = 5, 777
	rng := rand.New(rand.NewPCG(13, 14))
	x := randFloats(rng, rows*n)
	xi := make([]byte, 4*64)
	for i := range 64 {
		binary.LittleEndian.PutUint32(xi[4*i:], uint32(1+rng.IntN(2000)))
	}
	tests := []struct {
		name   string
		bufs   []Buffer
		launch Launch
	}{
		{"block_sum 100", []Buffer{{4 * len(x), f32Bytes(x)}, {4 * rows, nil}}, launch1("block_sum", rows, 100, buf(0), buf(1), intArg(n))},
		{"block_sum 256", []Buffer{{4 * len(x), f32Bytes(x)}, {4 * rows, nil}}, launch1("block_sum", rows, 256, buf(0), buf(1), intArg(n))},
		{"warp_sum 256", []Buffer{{4 * len(x), f32Bytes(x)}, {4 * rows, nil}}, launch1("warp_sum", rows, 256, buf(0), buf(1), intArg(n))},
		{"warp_ops", []Buffer{{len(xi), xi}, {4 * 10 * 64, nil}}, launch1("warp_ops", 1, 64, buf(0), buf(1))},
		{"vadd4", []Buffer{{4 * len(x), f32Bytes(x)}, {4 * len(x), f32Bytes(x)}, {4 * len(x), nil}},
			launch1("vadd4", 4, 256, buf(0), buf(1), buf(2), intArg(int64(len(x))))},
	}
	for _, tc := range tests {
		ref, err := run(t, tc.bufs, []Launch{tc.launch}, Options{})
		require.NoError(t, err, tc.name)
		for seed := range uint64(3) {
			got, err := run(t, tc.bufs, []Launch{tc.launch}, Options{Shuffle: true, Seed: seed})
			require.NoError(t, err, tc.name)
			assert.Equal(t, ref, got, "%s seed %d", tc.name, seed)
		}
	}
}

func TestCacheHit(t *testing.T) {
	// Not parallel: it counts compilations.
	needCompiler(t)
	dir := t.TempDir()
	src := testSource(t)
	bufs := []Buffer{{16, f32Bytes([]float32{1, 2, 3, 4})}, {16, nil}}
	l := []Launch{launch1("vadd", 1, 4, buf(0), buf(0), buf(1), intArg(4))}
	before := compiles.Load()
	out, err := Run(context.Background(), src, testKernels, bufs, l, Options{CacheDir: dir})
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 4, 6, 8}, bytesF32(out[1]))
	require.Equal(t, before+1, compiles.Load(), "the first run compiles")
	bins, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	require.NoError(t, err)
	require.Len(t, bins, 1)
	st, err := os.Stat(bins[0])
	require.NoError(t, err)
	stamp := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	require.NoError(t, os.Chtimes(bins[0], stamp, stamp))

	out, err = Run(context.Background(), src, testKernels, bufs, l, Options{CacheDir: dir, Shuffle: true, Workers: 3})
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 4, 6, 8}, bytesF32(out[1]))
	assert.Equal(t, before+1, compiles.Load(), "the second run finds the runner in the cache")
	st2, err := os.Stat(bins[0])
	require.NoError(t, err)
	assert.True(t, st2.ModTime().Equal(stamp), "the cached runner was not rebuilt")
	assert.Equal(t, st.Size(), st2.Size())

	_, err = Run(context.Background(), src+"\n// changed\n", testKernels, bufs, l, Options{CacheDir: dir})
	require.NoError(t, err)
	assert.Equal(t, before+2, compiles.Load(), "another source is another runner")
}

// BenchmarkSyncthreads256 measures one __syncthreads of a 256-thread block:
// the time of a launch looping b.N times over a barrier, less the time of the
// same launch with no iterations (process start, compilation cached).
func BenchmarkSyncthreads256(b *testing.B) {
	needCompiler(b)
	src := testSource(b)
	once := func(iters int) time.Duration {
		start := time.Now()
		_, err := Run(context.Background(), src, testKernels, []Buffer{{4 * 256, nil}},
			[]Launch{launch1("sync_loop", 1, 256, buf(0), intArg(int64(iters)))}, Options{CacheDir: testCache, Workers: 1})
		require.NoError(b, err)
		return time.Since(start)
	}
	once(0)
	base := once(0)
	b.ResetTimer()
	total := once(b.N)
	b.StopTimer()
	b.ReportMetric(float64((total-base).Nanoseconds())/float64(b.N)/1e3, "us/sync")
}
