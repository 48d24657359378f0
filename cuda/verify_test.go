package cuda

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func needGXX(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
}

// buildBody builds a one-output kernel body.
func buildBody(t testing.TB, f func(b *ir.Builder) ir.Value) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("kernel")
	b.Output("out0", f(b))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// bigMatmulBody is a matmul with a bias and residual epilogue, [300,256] x
// [256,520]: 156000 outputs over a 9x5 grid of 64x64 tiles.
func bigMatmulBody(t testing.TB) *ir.Graph {
	return buildBody(t, func(b *ir.Builder) ir.Value {
		x, w, bias, res := b.Input("$0", ir.F32, 300, 256), b.Input("$1", ir.F32, 520, 256), b.Input("$2", ir.F32, 520), b.Input("$3", ir.F32, 300, 520)
		y := b.MatMul(x, b.Permute(w, 1, 0))
		return b.Add(b.Add(y, b.BroadcastTo(bias, ir.Shape{300, 520})), res)
	})
}

// verifyBodies are the kernel bodies the verification tests print: small
// ones from the printer's tests and large ones that need sampling.
func verifyBodies(t testing.TB) map[string]*ir.Graph {
	eb := elementwiseBodies(t)
	bodies := map[string]*ir.Graph{}
	for _, name := range []string{"silu_mul", "odd_tail", "transpose_cast_f16", "gather_rows", "kv_update", "softmax", "residual_rms_norm"} {
		bodies[name] = eb[name]
	}
	bodies["mm_bias_residual"] = matmulBodies(t)["mm_bias_residual"]
	bodies["attention_prefill"] = attentionBody(t, 5, 5)
	bodies["attention_bf16"] = attentionBodyOf(t, ir.BF16, 5, 37)
	bodies["big_silu_mul"] = buildBody(t, func(b *ir.Builder) ir.Value {
		g, u := b.Input("$0", ir.F32, 512, 1000), b.Input("$1", ir.F32, 512, 1000)
		return b.Mul(b.Mul(g, b.Sigmoid(g)), u)
	})
	bodies["big_softmax"] = buildBody(t, func(b *ir.Builder) ir.Value {
		x := b.Input("$0", ir.F32, 1024, 96)
		m := b.ReduceMax(x, 1)
		ex := b.Exp(b.Sub(x, b.BroadcastTo(m, ir.Shape{1024, 96})))
		return b.Div(ex, b.BroadcastTo(b.Sum(ex, 1), ir.Shape{1024, 96}))
	})
	bodies["big_mm_epilogue"] = bigMatmulBody(t)
	return bodies
}

// printBodies prints bodies in name order.
func printBodies(t testing.TB, bodies map[string]*ir.Graph) ([]string, []*Kernel, []*ir.Graph) {
	t.Helper()
	var names []string
	for name := range bodies {
		names = append(names, name)
	}
	sort.Strings(names)
	var ks []*Kernel
	var gs []*ir.Graph
	for _, name := range names {
		k, err := PrintKernel(name, "verified kernel "+name, bodies[name])
		require.NoError(t, err, name)
		ks, gs = append(ks, k), append(gs, bodies[name])
	}
	return names, ks, gs
}

// TestVerifyKernels verifies real printed kernels in one run per mode: by
// default the large ones sampled and the small ones whole, then every
// kernel whole, then every kernel whose grid allows it sampled, in thread
// order and shuffled.
func TestVerifyKernels(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	names, ks, gs := printBodies(t, verifyBodies(t))
	large := map[string]bool{"big_silu_mul": true, "big_softmax": true, "big_mm_epilogue": true}
	tests := []struct {
		name    string
		opt     VerifyOptions
		sampled func(k *Kernel) bool
	}{
		{"default", VerifyOptions{Seed: 1}, func(k *Kernel) bool { return large[k.Name] }},
		{"whole", VerifyOptions{Seed: 2, MaxElements: 1 << 30, MaxWork: 1 << 62}, func(*Kernel) bool { return false }},
		// Few outputs but long reductions: sampled by work alone.
		{"sampled by work", VerifyOptions{Seed: 5, MaxElements: 1 << 30, MaxWork: 1},
			func(k *Kernel) bool { return k.Grid[0]*k.Grid[1]*k.Grid[2] > 8 }},
		{"sampled", VerifyOptions{Seed: 3, MaxElements: 1, MaxBlocks: 3},
			func(k *Kernel) bool { return k.Grid[0]*k.Grid[1]*k.Grid[2] > 3 }},
		{"sampled shuffled", VerifyOptions{Seed: 4, MaxElements: 1, MaxBlocks: 2, Emu: emu.Options{Shuffle: true, Seed: 9}},
			func(k *Kernel) bool { return k.Grid[0]*k.Grid[1]*k.Grid[2] > 2 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			names, ks, gs := names, ks, gs
			if tc.name == "whole" && testing.Short() {
				// The big matmul and SiLU whole are seconds of reference
				// under the race detector (40 million multiply-adds, half
				// a million elements): the long test command runs them;
				// here the softmax's 98,304 outputs, sampled by default,
				// show that the whole-run thresholds override sampling.
				names, ks, gs = slices.Clone(names), slices.Clone(ks), slices.Clone(gs)
				for _, name := range []string{"big_mm_epilogue", "big_silu_mul"} {
					i := slices.Index(names, name)
					names, ks, gs = slices.Delete(names, i, i+1), slices.Delete(ks, i, i+1), slices.Delete(gs, i, i+1)
				}
			}
			start := time.Now()
			checks, err := VerifyKernels(context.Background(), ks, gs, tc.opt)
			require.NoError(t, err)
			require.Len(t, checks, len(ks))
			t.Logf("%d kernels verified in %v", len(ks), time.Since(start))
			maxBlocks := tc.opt.MaxBlocks
			if maxBlocks == 0 {
				maxBlocks = 8
			}
			for i, c := range checks {
				k := ks[i]
				require.NotNil(t, c, names[i])
				assert.Equal(t, k.Name, c.Kernel)
				assert.Nil(t, c.Mismatch, names[i])
				assert.LessOrEqual(t, c.WorstRatio, 1.0, names[i])
				assert.Positive(t, c.Elements, names[i])
				grid := k.Grid[0] * k.Grid[1] * k.Grid[2]
				assert.Equal(t, grid, c.GridBlocks, names[i])
				require.Equal(t, tc.sampled(k), c.Sampled, names[i])
				if !c.Sampled {
					assert.Nil(t, c.Blocks, names[i])
					assert.Equal(t, grid, c.BlocksRun, names[i])
					var all int64
					for _, o := range gs[i].Outputs {
						all += gs[i].Node(o.Value).Shape.NumElements()
					}
					assert.Equal(t, all, c.Elements, "%s: a whole run compares every element", names[i])
					continue
				}
				assert.Len(t, c.Blocks, maxBlocks, names[i])
				assert.Equal(t, len(c.Blocks), c.BlocksRun, names[i])
				assert.True(t, slices.IsSorted(c.Blocks), names[i])
				assert.Equal(t, 0, c.Blocks[0], "%s: the first block is in every sample", names[i])
				assert.Equal(t, grid-1, c.Blocks[len(c.Blocks)-1], "%s: the last block is in every sample", names[i])
				if k.Name == "big_mm_epilogue" {
					var want int64 // the elements of the sampled 64x64 tiles
					for _, b := range c.Blocks {
						bx, by := b%k.Grid[0], b/k.Grid[0]
						want += int64(min(64, 520-64*bx) * min(64, 300-64*by))
					}
					// Every element of them, up to MaxCompare.
					assert.Equal(t, min(want, int64(defaultVerifyCompare)), c.Elements, "the sampled tiles' elements")
				}
			}
		})
	}
}

// TestVerifyKernelSampleIsDeterministic: the same seed gives the same
// sample and figures, alone or among other kernels; another seed another
// sample.
func TestVerifyKernelSampleIsDeterministic(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	names, ks, gs := printBodies(t, verifyBodies(t))
	i := slices.Index(names, "big_mm_epilogue")
	ctx := context.Background()
	alone, err := VerifyKernel(ctx, ks[i], gs[i], VerifyOptions{Seed: 1})
	require.NoError(t, err)
	all, err := VerifyKernels(ctx, ks, gs, VerifyOptions{Seed: 1})
	require.NoError(t, err)
	assert.Equal(t, alone, all[i])
	other, err := VerifyKernel(ctx, ks[i], gs[i], VerifyOptions{Seed: 2})
	require.NoError(t, err)
	assert.NotEqual(t, alone.Blocks, other.Blocks)
}

// editKernel copies k as the kernel named name with the one occurrence of
// old in its text replaced by repl.
func editKernel(t *testing.T, k *Kernel, name, old, repl string) *Kernel {
	t.Helper()
	require.Equal(t, 1, strings.Count(k.Text, old), "%s: the edit's anchor %q\n%s", k.Name, old, k.Text)
	c := *k
	c.Name = name
	c.Text = strings.Replace(strings.Replace(k.Text, old, repl, 1), "void "+k.Name+"(", "void "+name+"(", 1)
	return &c
}

// TestVerifyCatchesBrokenKernels edits printed kernels' text: a wrong
// index in the last column of tiles of a matmul's epilogue is caught in a
// sampled run (the last block is always run), a dropped term anywhere is
// caught, and a kernel that skips elements is caught in a whole run. The
// errors name the kernel, the output, the element and the figures.
func TestVerifyCatchesBrokenKernels(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	edit := func(t *testing.T, k *Kernel, old, repl string) *Kernel {
		return editKernel(t, k, k.Name+"_broken", old, repl)
	}
	mmBody := bigMatmulBody(t)
	mm, err := PrintKernel("mm", "", mmBody)
	require.NoError(t, err)
	require.Equal(t, [3]int{9, 5, 1}, mm.Grid)
	eb := elementwiseBodies(t)
	odd, err := PrintKernel("odd", "", eb["odd_tail"])
	require.NoError(t, err)
	rms, err := PrintKernel("rms", "", eb["residual_rms_norm"])
	require.NoError(t, err)
	tests := []struct {
		name  string
		k     *Kernel
		body  *ir.Graph
		opt   VerifyOptions
		never bool
		want  []string // in the error
		check func(t *testing.T, m *KernelMismatch)
	}{
		{"bias index in the last tile column, sampled", edit(t, mm, "float v0 = in2[n];", "float v0 = in2[n < 512LL ? n : 0];"), mmBody,
			VerifyOptions{Seed: 5}, false,
			[]string{"verify kernel mm_broken: output out0 (parameter out0, f32[300,520]) element", "got", "want", "allowed"},
			func(t *testing.T, m *KernelMismatch) {
				assert.GreaterOrEqual(t, m.At[1], int64(512), "only the last tile column is wrong")
				assert.Equal(t, m.Index, m.At[0]*520+m.At[1])
				assert.Greater(t, math.Abs(m.Got-m.Want), m.Allowed)
			}},
		{"dropped residual, sampled", edit(t, mm, "float v5 = v3 + v4;", "float v5 = v3;"), mmBody,
			VerifyOptions{Seed: 6, MaxBlocks: 2}, false, []string{"mm_broken", "output out0"}, nil},
		{"rms norm second output off by one row, sampled", edit(t, rms, "out1[i] = ", "out1[i] = (i >= 3072LL ? 0.5f : 0.0f) + "), eb["residual_rms_norm"],
			VerifyOptions{Seed: 7, MaxElements: 1, MaxBlocks: 2}, false, []string{"rms_broken: output out1 (parameter out1, f32[4,1024]) element"},
			func(t *testing.T, m *KernelMismatch) { assert.Equal(t, int64(3), m.At[0]) }},
		{"skipped elements, whole", edit(t, odd, "out0[i] = v2;", "if (i % 10 != 7) out0[i] = v2;"), eb["odd_tail"],
			VerifyOptions{Seed: 8}, true, []string{"odd_broken: output out0 (parameter out0, f32[7,13]) element 7 [0,7] never written", "9 elements of the output never written"},
			func(t *testing.T, m *KernelMismatch) { assert.Equal(t, int64(9), m.NeverWritten) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := VerifyKernel(context.Background(), tc.k, tc.body, tc.opt)
			require.Error(t, err)
			var m *KernelMismatch
			require.ErrorAs(t, err, &m)
			require.NotNil(t, c)
			assert.Same(t, m, c.Mismatch)
			assert.Greater(t, c.WorstRatio, 1.0)
			assert.Equal(t, tc.never, m.NeverWritten > 0)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			if tc.check != nil {
				tc.check(t, m)
			}
			t.Log(err)
		})
	}
}

// TestVerifyKernelsReportsEveryFailure: a kernel that fails under the
// emulation and one that computes wrong values are both reported, the
// others still verified, with one compilation for them all.
func TestVerifyKernelsReportsEveryFailure(t *testing.T) {
	needGXX(t)
	eb := elementwiseBodies(t)
	var ks []*Kernel
	var gs []*ir.Graph
	for _, name := range []string{"odd_tail", "softmax", "gather_rows", "silu_mul"} {
		k, err := PrintKernel(name, "", eb[name])
		require.NoError(t, err)
		ks, gs = append(ks, k), append(gs, eb[name])
	}
	ks[0] = editKernel(t, ks[0], ks[0].Name, "out0[i] = v2;", "out0[i + 1] = v2;")
	ks[2] = editKernel(t, ks[2], ks[2].Name, "v0 + 10LL", "v0 + 9LL")
	cache := t.TempDir()
	checks, err := VerifyKernels(context.Background(), ks, gs, VerifyOptions{Seed: 1, Emu: emu.Options{CacheDir: cache}})
	require.Error(t, err)
	require.Len(t, checks, 4)
	var ke *emu.KernelError
	require.ErrorAs(t, err, &ke)
	assert.Equal(t, "out-of-bounds", ke.Kind)
	assert.Contains(t, err.Error(), "verify kernel odd_tail: emu: kernel odd_tail")
	assert.Nil(t, checks[0], "the kernel that failed has no check")
	var m *KernelMismatch
	require.ErrorAs(t, err, &m)
	assert.Equal(t, "gather_rows", m.Kernel, "negative indices count from the end")
	assert.Same(t, m, checks[2].Mismatch)
	for _, i := range []int{1, 3} {
		require.NotNil(t, checks[i])
		assert.Nil(t, checks[i].Mismatch, ks[i].Name)
	}
	assert.Equal(t, 1, runners(t, cache), "one compilation serves every run")
}

// TestVerifyKernelsCompilesOnce: many kernels verify with one compiled
// runner, which a second verification finds in the cache.
func TestVerifyKernelsCompilesOnce(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	// The small bodies: the large ones only cost their reference here
	// (TestVerifyKernels verifies them).
	bodies := verifyBodies(t)
	maps.DeleteFunc(bodies, func(name string, _ *ir.Graph) bool { return strings.HasPrefix(name, "big_") })
	require.Greater(t, len(bodies), 5)
	_, ks, gs := printBodies(t, bodies)
	cache := t.TempDir()
	opt := VerifyOptions{Seed: 1, Emu: emu.Options{CacheDir: cache}}
	// The same kernel twice is verified once.
	ks, gs = append(ks, ks[0]), append(gs, gs[0])
	checks, err := VerifyKernels(context.Background(), ks, gs, opt)
	require.NoError(t, err)
	assert.Same(t, checks[0], checks[len(checks)-1])
	assert.Equal(t, 1, runners(t, cache))
	_, err = VerifyKernels(context.Background(), ks, gs, opt)
	require.NoError(t, err)
	assert.Equal(t, 1, runners(t, cache))
}

// runners counts the compiled runners in an emulation cache.
func runners(t *testing.T, cache string) int {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	}))
	return n
}

// BenchmarkVerifyKernel measures what verifications cost (figures only,
// a benchmark rather than a test since the full-size runs take seconds
// each under the race detector; TestVerifyKernels verifies the same
// kernels by default and whole): for each kernel and mode, "compiling"
// builds the emulation's runner into an empty cache on every iteration,
// "cached" finds it there. proj is a projection at the size of a small
// language model's (256 blocks of 64x64 tiles, 2048 terms each, 8 of them
// run by default).
//
//	go test ./cuda -run '^$' -bench VerifyKernel -benchtime 3x
func BenchmarkVerifyKernel(b *testing.B) {
	if _, err := exec.LookPath("g++"); err != nil {
		b.Skip("g++ is missing:", err)
	}
	names, ks, gs := printBodies(b, verifyBodies(b))
	proj := buildBody(b, func(b *ir.Builder) ir.Value {
		x, w, bias := b.Input("$0", ir.F32, 256, 2048), b.Input("$1", ir.F32, 2048, 2048), b.Input("$2", ir.F32, 2048)
		return b.Add(b.MatMul(x, b.Permute(w, 1, 0)), b.BroadcastTo(bias, ir.Shape{256, 2048}))
	})
	pk, err := PrintKernel("proj", "", proj)
	require.NoError(b, err)
	type target struct {
		name string
		k    *Kernel
		body *ir.Graph
	}
	var targets []target
	for _, name := range []string{"silu_mul", "big_silu_mul", "big_softmax", "big_mm_epilogue", "attention_bf16"} {
		i := slices.Index(names, name)
		targets = append(targets, target{name, ks[i], gs[i]})
	}
	targets = append(targets, target{"proj", pk, proj})
	ctx := context.Background()
	for _, tg := range targets {
		for _, mode := range []struct {
			name string
			opt  VerifyOptions
		}{{"default", VerifyOptions{Seed: 1}}, {"whole", VerifyOptions{Seed: 1, MaxElements: 1 << 30, MaxWork: 1 << 62}}} {
			if tg.name == "proj" && mode.name == "whole" {
				continue // 1G multiply-adds in the reference: minutes
			}
			for _, run := range []string{"compiling", "cached"} {
				b.Run(tg.name+"/"+mode.name+"/"+run, func(b *testing.B) {
					opt := mode.opt
					opt.Emu.CacheDir = b.TempDir()
					if run == "cached" {
						_, err := VerifyKernel(ctx, tg.k, tg.body, opt)
						require.NoError(b, err)
					}
					var c *KernelCheck
					for b.Loop() {
						if run == "compiling" {
							b.StopTimer()
							opt.Emu.CacheDir = b.TempDir()
							b.StartTimer()
						}
						c, err = VerifyKernel(ctx, tg.k, tg.body, opt)
						require.NoError(b, err)
					}
					b.ReportMetric(float64(c.BlocksRun), "blocks")
					b.ReportMetric(float64(c.Elements), "elements")
				})
			}
		}
	}
	b.Run("VerifyKernels/all/compiling", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			opt := VerifyOptions{Seed: 2, Emu: emu.Options{CacheDir: b.TempDir()}}
			b.StartTimer()
			_, err := VerifyKernels(ctx, ks, gs, opt)
			require.NoError(b, err)
		}
		b.ReportMetric(float64(len(ks)), "kernels")
	})
}

// TestVerifyKernelErrors covers misuse and a sample that writes nothing.
func TestVerifyKernelErrors(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	eb := elementwiseBodies(t)
	k, err := PrintKernel("silu_mul", "", eb["silu_mul"])
	require.NoError(t, err)
	_, err = VerifyKernel(context.Background(), k, eb["odd_tail"], VerifyOptions{})
	assert.ErrorContains(t, err, "verify kernel silu_mul: the body has 1 inputs and 1 outputs, the kernel 2 inputs and 3 parameters")
	_, err = VerifyKernels(context.Background(), []*Kernel{k}, nil, VerifyOptions{})
	assert.ErrorContains(t, err, "1 kernels and 0 bodies")
	other := *k
	_, err = VerifyKernels(context.Background(), []*Kernel{k, &other}, []*ir.Graph{eb["silu_mul"], eb["silu_mul"]}, VerifyOptions{})
	assert.ErrorContains(t, err, "two different kernels are named silu_mul")

	// Only the grid's first block writes; a sample without it writes
	// nothing, which cannot pass for verified.
	mmBody := bigMatmulBody(t)
	mm, err := PrintKernel("mm", "", mmBody)
	require.NoError(t, err)
	lazy := editKernel(t, mm, "mm_lazy", "if (m >= 300LL || n >= 520LL) continue;",
		"if (m >= 300LL || n >= 520LL || blockIdx.x + blockIdx.y != 1) continue;")
	_, err = VerifyKernel(context.Background(), lazy, mmBody, VerifyOptions{Seed: 1, MaxBlocks: 2})
	assert.ErrorContains(t, err, "verify kernel mm_lazy: the sampled blocks [0 44] of 45 wrote no output element")
	var m *KernelMismatch
	assert.False(t, errors.As(err, &m))
	if testing.Short() {
		// The whole run is the big matmul's reference, seconds under the
		// race detector; a whole run's unwritten elements are
		// TestVerifyCatchesBrokenKernels' "skipped elements, whole".
		return
	}
	_, err = VerifyKernel(context.Background(), lazy, mmBody, VerifyOptions{Seed: 1, MaxElements: 1 << 30, MaxWork: 1 << 62})
	assert.ErrorAs(t, err, &m)
	assert.Positive(t, m.NeverWritten)
}

// TestSampleBlocks: distinct sorted ids, the first and the last included,
// the grid whole when it is small.
func TestSampleBlocks(t *testing.T) {
	for _, tc := range []struct{ grid, n int }{{1, 8}, {2, 8}, {9, 8}, {45, 8}, {4096, 8}, {100, 1}, {100, 2}, {100, 100}} {
		s := sampleBlocks(tc.grid, tc.n, 7)
		assert.Len(t, s, max(min(tc.n, tc.grid), min(2, tc.grid)), "%+v", tc)
		assert.True(t, slices.IsSorted(s))
		assert.Equal(t, len(s), len(slices.Compact(slices.Clone(s))))
		assert.Equal(t, 0, s[0])
		assert.Equal(t, tc.grid-1, s[len(s)-1])
		assert.Equal(t, s, sampleBlocks(tc.grid, tc.n, 7))
	}
}

// TestVerifyFeeds: gather indices cover the valid range, negative ones
// included; floats have both signs; nothing is all zeros.
func TestVerifyFeeds(t *testing.T) {
	body := buildBody(t, func(b *ir.Builder) ir.Value {
		table, ids := b.Input("$0", ir.F32, 10, 6), b.Input("$1", ir.I64, 40, 30)
		return b.Gather(table, b.Reshape(ids, 1200), 0)
	})
	feeds, err := KernelInputs(body, 3)
	require.NoError(t, err)
	ids := feeds["$1"].Float64s()
	assert.Equal(t, -10.0, slices.Min(ids))
	assert.Equal(t, 9.0, slices.Max(ids))
	x := feeds["$0"].Float64s()
	assert.Negative(t, slices.Min(x))
	assert.Positive(t, slices.Max(x))
	again, err := KernelInputs(body, 3)
	require.NoError(t, err)
	assert.Equal(t, feeds, again)
}

func TestReductionLength(t *testing.T) {
	eb := elementwiseBodies(t)
	assert.Equal(t, 1, ReductionLength(eb["silu_mul"]))
	assert.Equal(t, 300, ReductionLength(eb["row_sum"]))
	assert.Equal(t, 37, ReductionLength(eb["softmax"]))
	assert.Equal(t, 256, ReductionLength(bigMatmulBody(t)))
	assert.Equal(t, 70, ReductionLength(attentionBody(t, 1, 70)))
}

// TestVerifyWindowedOutputs verifies the kernels of a decode step whose
// cache updates write their new rows in place (a window of the state
// buffer), and catches a kernel that writes a row outside its window.
func TestVerifyWindowedOutputs(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: 5, Past: 3})
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	var kernels []*Kernel
	var bodies []*ir.Graph
	var broken *Kernel
	for _, l := range lp.Run {
		if _, ok, err := l.Window(0); err != nil || !ok {
			continue
		}
		k, err := PrintKernel(l.Name, "", l.Body)
		require.NoError(t, err)
		kernels, bodies = append(kernels, k), append(bodies, l.Body)
		if broken == nil {
			// The rows go one position too far: inside the buffer, outside
			// the window.
			b := *k
			b.Name = k.Name + "_broken"
			require.Contains(t, b.Text, "+ 3LL")
			b.Text = strings.Replace(strings.Replace(b.Text, k.Name+"(", b.Name+"(", 1), "+ 3LL", "+ 4LL", 1)
			broken = &b
		}
	}
	require.NotEmpty(t, kernels)
	checks, err := VerifyKernels(context.Background(), kernels, bodies, VerifyOptions{Seed: 2})
	require.NoError(t, err)
	for _, c := range checks {
		assert.Positive(t, c.Elements)
	}
	_, err = VerifyKernel(context.Background(), broken, bodies[0], VerifyOptions{Seed: 2})
	require.ErrorContains(t, err, "outside its window")
}

// TestVerifyKernelsGrouped verifies kernels a group at a time (MaxBytes
// below any kernel's), each group's large inputs drawn into the storage
// of the groups before it: the checks are the ones of one group.
func TestVerifyKernelsGrouped(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	needGXX(t)
	bodies := verifyBodies(t)
	// Inputs of a million elements and more are the ones drawn into kept
	// storage; huge_silu_mul's fit in huge_add's, which runs first.
	bodies["huge_silu_mul"] = buildBody(t, func(b *ir.Builder) ir.Value {
		g, u := b.Input("$0", ir.F32, 1024, 1100), b.Input("$1", ir.F32, 1024, 1100)
		return b.Mul(b.Mul(g, b.Sigmoid(g)), u)
	})
	bodies["huge_add"] = buildBody(t, func(b *ir.Builder) ir.Value {
		return b.Add(b.Input("$0", ir.F32, 1100, 1100), b.Input("$1", ir.F32, 1100, 1100))
	})
	_, ks, gs := printBodies(t, bodies)
	one, err := VerifyKernels(context.Background(), ks, gs, VerifyOptions{Seed: 1})
	require.NoError(t, err)
	grouped, err := VerifyKernels(context.Background(), ks, gs, VerifyOptions{Seed: 1, MaxBytes: 1})
	require.NoError(t, err)
	require.Equal(t, one, grouped)
}
