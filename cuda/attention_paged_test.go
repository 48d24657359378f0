package cuda

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// pagedSeq is one sequence of a step: its cached context and its tokens
// in the step (1: a decode token; more: a chunk of its prompt).
type pagedSeq struct{ ctx, tokens int64 }

// pagedCase is a step of paged attention: the heads, head size, block
// size, window and dtypes, the sequences present, table rows past them
// (absent sequences) and tokens past the last sequence (of none).
type pagedCase struct {
	name          string
	dt, meta      ir.DType
	hq, hkv, d    int64
	block, window int64
	seqs          []pagedSeq
	absent, tail  int64
	threads       int
	scale         float64
	extraBlocks   int64    // table columns past the longest sequence's need
	sinks         ir.DType // the sinks' dtype (a tenth operand); InvalidDType: none
}

// pagedStep is a case's body and inputs: the metadata and the values,
// with every element the attention must not read poisoned with NaN (the
// pool's blocks no table names below its context, the slots of a named
// block at or past the context, the query and step rows of tokens of no
// sequence), and every table entry no cached position needs naming a
// poisoned block.
type pagedStep struct {
	body   *ir.Graph
	feeds  map[string]*ir.Tensor
	args   []*ir.Tensor
	want   *ir.Result
	poison int // elements poisoned, so the test can tell it poisoned some
}

// build makes the case's body and inputs, values drawn from seed.
func (c pagedCase) build(t *testing.T, seed uint64) pagedStep {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 77))
	S := int64(len(c.seqs)) + c.absent
	T, need, maxBlocks := c.tail, int64(0), int64(1)
	for _, s := range c.seqs {
		T += s.tokens
		n := (s.ctx + c.block - 1) / c.block
		need += n
		maxBlocks = max(maxBlocks, (s.ctx+s.tokens+c.block-1)/c.block)
	}
	T = max(T, 1)
	M := maxBlocks + c.extraBlocks
	const spare = 3 // blocks no table names below a context: poisoned
	P := (need + spare) * c.block
	b := ir.NewBuilder(c.name)
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	dim := func(x int64) ir.Dim { return ir.Dim(x) }
	scale := c.scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(c.d))
	}
	ops := []ir.Value{in("q", c.dt, dim(T), dim(c.hq), dim(c.d)), in("k", c.dt, dim(T), dim(c.hkv), dim(c.d)), in("v", c.dt, dim(T), dim(c.hkv), dim(c.d)),
		in("kpool", c.dt, dim(P), dim(c.hkv), dim(c.d)), in("vpool", c.dt, dim(P), dim(c.hkv), dim(c.d)),
		in("table", c.meta, dim(S), dim(M)), in("lens", c.meta, dim(S)), in("starts", c.meta, dim(S+1)), in("seqs", c.meta)}
	var out ir.Value
	if c.sinks.Valid() {
		out = b.PagedAttentionSinks(ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], in("sinks", c.sinks, dim(c.hq)), scale, c.block, c.window)
	} else {
		out = b.PagedAttention(ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], scale, c.block, c.window)
	}
	b.Output("out", out)
	body, err := b.Build()
	require.NoError(t, err, c.name)
	feeds, err := ir.RandomFeeds(body, seed, ir.Typical)
	require.NoError(t, err)
	if c.sinks.Valid() {
		// Sinks from -2 to 5, so that they weigh as much as a few keys
		// or more than all of them.
		for h := range c.hq {
			feeds["sinks"].Set(h, -2+7*rng.Float64())
		}
	}
	// The metadata: blocks from a shuffled pool, the spare ones poisoned.
	perm := rng.Perm(int(P / c.block))
	poisonBlock := int64(perm[len(perm)-1])
	table := make([]int64, S*M)
	for i := range table {
		table[i] = poisonBlock
	}
	lens, starts := make([]int64, S), make([]int64, S+1)
	named := map[int64]int64{} // pool block -> slots of it below a context
	next := 0
	for s, sq := range c.seqs {
		for j := int64(0); j*c.block < sq.ctx; j++ {
			blk := int64(perm[next])
			next++
			table[int64(s)*M+j] = blk
			named[blk] = min(c.block, sq.ctx-j*c.block)
		}
		lens[s] = sq.ctx + sq.tokens
		starts[s+1] = starts[s] + sq.tokens
	}
	for s := int64(len(c.seqs)); s < S; s++ {
		// Absent rows: garbage the kernel must not read.
		lens[s], starts[s+1] = 1<<20, T+7
	}
	for k, vals := range map[string][]int64{"table": table, "lens": lens, "starts": starts, "seqs": {int64(len(c.seqs))}} {
		n := body.Node(inputNamed(t, body, k))
		feeds[k], err = ir.TensorOfInts(n.DType, n.Shape, vals...)
		require.NoError(t, err)
	}
	// Poison what must not be read.
	var st pagedStep
	nan := math.NaN()
	row := c.hkv * c.d
	for _, pool := range []string{"kpool", "vpool"} {
		for slot := range P {
			if slot%c.block < named[slot/c.block] {
				continue
			}
			for i := range row {
				feeds[pool].Set(slot*row+i, nan)
				st.poison++
			}
		}
	}
	for tok := T - c.tail; tok < T; tok++ {
		for i := range row {
			feeds["k"].Set(tok*row+i, nan)
			feeds["v"].Set(tok*row+i, nan)
			st.poison += 2
		}
		for i := range c.hq * c.d {
			feeds["q"].Set(tok*c.hq*c.d+i, nan)
			st.poison++
		}
	}
	st.body, st.feeds = body, feeds
	st.want, err = ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err, c.name)
	for _, v := range body.Inputs() {
		st.args = append(st.args, feeds[body.Node(v).Name])
	}
	return st
}

// inputNamed is the body's input of that name.
func inputNamed(t *testing.T, body *ir.Graph, name string) ir.Value {
	t.Helper()
	for _, v := range body.Inputs() {
		if body.Node(v).Name == name {
			return v
		}
	}
	t.Fatalf("%s has no input %q", body.Name, name)
	return 0
}

// pagedRandomCases draws steps of 1 to 5 sequences, each a decode token
// or a chunk of up to 20 tokens, over contexts of 0, whole blocks and
// random lengths (up to 300, so that 8 warps take several tiles), in
// grouped-query and one-head-a-key-head layouts, with and without a
// window, in f32, bf16 and f16, i32 and i64 metadata, each block of 2 to
// 32 warps.
func pagedRandomCases() []pagedCase {
	rng := rand.New(rand.NewPCG(2026, 12))
	type layout struct{ hq, hkv, d, block, window int64 }
	layouts := []layout{{4, 2, 40, 8, 0}, {2, 2, 24, 16, 0}, {8, 2, 16, 5, 37}, {3, 1, 33, 4, 0}, {2, 1, 32, 32, 70}}
	dts := []ir.DType{ir.F32, ir.BF16, ir.F16}
	var out []pagedCase
	for i := range 15 {
		l := layouts[i%len(layouts)]
		c := pagedCase{dt: dts[i%3], meta: []ir.DType{ir.I32, ir.I64}[i%2], hq: l.hq, hkv: l.hkv, d: l.d, block: l.block, window: l.window,
			threads: []int{64, 128, 256, 512, 1024}[(i/3)%5], absent: int64(i % 2), tail: int64(i % 3), extraBlocks: int64(i % 2)}
		S := 1 + i%5
		for s := range S {
			sq := pagedSeq{tokens: 1}
			if rng.IntN(2) == 0 {
				sq.tokens = 2 + rng.Int64N(19)
			}
			switch (s + i) % 3 {
			case 0:
				sq.ctx = 0
			case 1:
				sq.ctx = l.block * rng.Int64N(300/l.block+1)
			default:
				sq.ctx = rng.Int64N(301)
			}
			c.seqs = append(c.seqs, sq)
		}
		c.name = fmt.Sprintf("paged%d_%s_h%d_%d_d%d_b%d_w%d", i, c.dt, c.hq, c.hkv, c.d, c.block, c.window)
		out = append(out, c)
	}
	return out
}

// pagedKernel prints the case's body in its schedule of threads.
func pagedKernel(t *testing.T, name string, body *ir.Graph, threads int) *Kernel {
	t.Helper()
	s := cost.Schedule{BM: 1, BN: cost.PagedTile, Threads: threads, SplitKeys: true}
	k, err := PrintKernelWith(name, name+" "+s.String(), body, s)
	require.NoError(t, err, name)
	return k
}

// emulatePaged runs the kernels under the emulation (shuffled threads)
// and returns each one's mismatch with its step's reference.
func emulatePaged(t *testing.T, ks []*Kernel, steps []pagedStep) []*ir.Mismatch {
	t.Helper()
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	for _, st := range steps {
		n := st.body.Node(st.body.Outputs[0].Value)
		args, outs = append(args, st.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), ks, args, outs, emu.Options{Shuffle: true, Seed: 11})
	require.NoError(t, err)
	mms := make([]*ir.Mismatch, len(ks))
	for i, st := range steps {
		mm, err := ir.Compare(got[i][0], st.want.Outputs["out"], st.want.Magnitudes["out"], 1024)
		require.NoError(t, err)
		mms[i] = mm
		for j := range got[i][0].Len() {
			if x := got[i][0].At(j); math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("%s: element %d is %v: the kernel read a poisoned element", ks[i].Name, j, x)
				break
			}
		}
	}
	return mms
}

// TestPagedAttentionMatchesReference prints random steps (pagedRandomCases)
// and fixed edge cases, runs them under the emulation with shuffled
// threads and compares them with the reference: the pool's unnamed blocks,
// the tails of the last cached blocks past each context, the table entries
// past each context's need (naming a poisoned block), the absent rows'
// metadata and the rows of tokens of no sequence are NaN or garbage, so a
// kernel that reads any of them fails (its output is NaN, or the
// emulator's guard regions stop it), and the outputs of tokens of no
// sequence must be zeros.
func TestPagedAttentionMatchesReference(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	cases := append(pagedRandomCases(),
		// One decode token on an empty cache; one token seeing itself.
		pagedCase{name: "fresh_decode", dt: ir.F32, meta: ir.I32, hq: 2, hkv: 1, d: 8, block: 4, threads: 128, seqs: []pagedSeq{{0, 1}}},
		// Contexts exactly a block and exactly a tile of every warp.
		pagedCase{name: "whole_blocks", dt: ir.BF16, meta: ir.I64, hq: 4, hkv: 4, d: 64, block: 16, threads: 128,
			seqs: []pagedSeq{{16, 1}, {128, 1}, {256, 3}}, tail: 2},
		// A window shorter than the chunk, and one longer than the context.
		pagedCase{name: "window_in_chunk", dt: ir.F16, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 8, window: 5, threads: 64,
			seqs: []pagedSeq{{40, 12}, {3, 1}}, absent: 2},
		// Sequences without a token in the step between present ones.
		pagedCase{name: "empty_sequences", dt: ir.F32, meta: ir.I64, hq: 2, hkv: 2, d: 8, block: 4, threads: 64,
			seqs: []pagedSeq{{5, 0}, {9, 2}, {0, 0}, {11, 1}}, tail: 1},
	)
	var ks []*Kernel
	var steps []pagedStep
	for i, c := range cases {
		st := c.build(t, uint64(100+i))
		require.Positive(t, st.poison, "%s: the pool has poisoned elements", c.name)
		steps = append(steps, st)
		ks = append(ks, pagedKernel(t, fmt.Sprintf("pk%d", i), st.body, c.threads))
	}
	for i, mm := range emulatePaged(t, ks, steps) {
		assert.Nil(t, mm, "%s (%s): %v", cases[i].name, ks[i].Schedule, mm)
	}
	// Tokens of no sequence are zeros: the reference says so, and the
	// kernel agreed above; check the reference did have such tokens.
	tails := 0
	for _, c := range cases {
		tails += int(c.tail)
	}
	assert.Positive(t, tails)
}

// TestPagedAttentionBreakageIsCaught: the poisoned pool catches a kernel
// that reads the wrong pool blocks or slots. Each breakage is a one-line
// edit of a printed kernel: the block table column off by one; the block
// id loaded only at a block's first position (a tile that starts inside a
// block gets block 0 for its first lanes); the cached keys running one
// past the context (the step's first key read from the pool); and the
// warps' combine weighing every warp's sum alike.
func TestPagedAttentionBreakageIsCaught(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	// The window makes tiles start inside blocks.
	c := pagedCase{name: "breakage", dt: ir.F32, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 8, window: 45, threads: 128,
		seqs: []pagedSeq{{100, 1}, {37, 6}, {200, 2}}}
	st := c.build(t, 5)
	breakages := []struct{ name, old, new string }{
		{"block_index", pagedBlockIndex(c.block), pagedBlockIndex(c.block) + " + 1"},
		{"block_id_once", "(lane == 0 || within == 0)", "(within == 0)"},
		{"context_end", "j < ctx ? blk", "j <= ctx ? blk"},
		{"combine", "L += a * Ls[x][g];", "L += Ls[x][g];"},
	}
	var ks []*Kernel
	var steps []pagedStep
	for _, br := range breakages {
		good := pagedKernel(t, "good_"+br.name, st.body, c.threads)
		bad := pagedKernel(t, "bad_"+br.name, st.body, c.threads)
		require.Equal(t, 1, strings.Count(bad.Text, br.old), "%s: the line to break", br.name)
		bad.Text = strings.Replace(bad.Text, br.old, br.new, 1)
		ks, steps = append(ks, good, bad), append(steps, st, st)
	}
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	n := st.body.Node(st.body.Outputs[0].Value)
	for range ks {
		args, outs = append(args, st.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), ks, args, outs, emu.Options{Shuffle: true, Seed: 3})
	require.NoError(t, err)
	for i, k := range ks {
		mm, err := ir.Compare(got[i][0], st.want.Outputs["out"], st.want.Magnitudes["out"], 1024)
		require.NoError(t, err)
		if i%2 == 0 {
			assert.Nil(t, mm, "%s, unbroken: %v", k.Name, mm)
		} else {
			assert.NotNil(t, mm, "%s: the breakage went unnoticed", k.Name)
		}
	}
}

// llamaPaged is a llama-3-8b serving step's paged attention body: 32
// query heads on 8 key heads of 128, a pool of 2048 blocks of 16 slots,
// 256 sequences of up to 512 blocks, tokens T.
func llamaPaged(t *testing.T, dt ir.DType, T int) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("llama_paged")
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	T32 := ir.Dim(T)
	b.Output("out", b.PagedAttention(in("q", dt, T32, 32, 128), in("k", dt, T32, 8, 128), in("v", dt, T32, 8, 128),
		in("kpool", dt, 2048*16, 8, 128), in("vpool", dt, 2048*16, 8, 128), in("table", ir.I32, 256, 512),
		in("lens", ir.I32, 256), in("starts", ir.I32, 257), in("seqs", ir.I32), 1/math.Sqrt(128), 16, 0))
	body, err := b.Build()
	require.NoError(t, err)
	return body
}

// TestNVRTCCompilesPagedAttention compiles every schedule the cost model
// lists for a llama-3-8b step's paged attention (bf16, f16 and f32; and
// one head a key head) for sm_90 and sm_80: no spills, no local memory
// (the accumulators stay in registers), static shared memory within
// 48 KiB. It logs the sm_90 registers of each.
func TestNVRTCCompilesPagedAttention(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev))
	var ks []*Kernel
	for _, dt := range []ir.DType{ir.BF16, ir.F16, ir.F32} {
		body := llamaPaged(t, dt, 512)
		ranked, err := model.Ranked(body)
		require.NoError(t, err)
		require.Len(t, ranked, 4, "%s: 2 to 16 warps fit", dt)
		for i, e := range ranked {
			k, err := PrintKernelWith(fmt.Sprintf("paged_%s_%d", dt, i), "llama paged "+e.Schedule.String(), body, e.Schedule)
			require.NoError(t, err)
			ks = append(ks, k)
		}
	}
	for _, arch := range []string{"sm_90", "sm_80"} {
		ks := ks
		if arch == "sm_80" && testing.Short() {
			// bf16's kernels (f16's print the same code with the other
			// half type; sm_90 compiles every dtype's, the long test
			// command all twelve for sm_80 too).
			ks = slices.DeleteFunc(slices.Clone(ks), func(k *Kernel) bool { return !strings.HasPrefix(k.Name, "paged_bf16_") })
		}
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "paged.cu", nvrtc.Options{Arch: arch})
		require.NoError(t, err, arch)
		for _, k := range ks {
			r, ok := res.Kernels[k.Name]
			require.True(t, ok, "%s: no resources for %s", arch, k.Name)
			assert.Zero(t, r.SpillStores, "%s: %s (%s) spills", arch, k.Name, k.Schedule)
			assert.Zero(t, r.StackBytes, "%s: %s (%s) keeps its arrays in registers", arch, k.Name, k.Schedule)
			assert.LessOrEqual(t, r.SharedBytes, attnStaticShared, "%s: %s (%s)", arch, k.Name, k.Schedule)
			j := strings.Index(res.PTX, ".entry "+k.Name+"(")
			require.GreaterOrEqual(t, j, 0, "%s: entry %s", arch, k.Name)
			entry := res.PTX[j:]
			entry = entry[:strings.Index(entry, "\n}")]
			assert.NotContains(t, entry, ".local", "%s %s (%s): no local memory", arch, k.Name, k.Schedule)
			if arch == "sm_90" {
				t.Logf("%s %s (%s): %d registers, %d bytes shared", arch, k.Name, k.Schedule, r.Registers, r.SharedBytes)
			}
		}
	}
}

// TestVerifyPagedAttentionSampled verifies a paged attention kernel too
// large to run whole (98304 outputs) as verification before output does:
// a sample of blocks on random valid metadata (ir.DrawPaged), the
// reference computing just the sampled elements (ir.EvalAt's paged
// attention rule); the same kernel with its block table column off by one
// fails (the table entries past a context's need are -1: the pool read
// lands outside it, or on the wrong block).
func TestVerifyPagedAttentionSampled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	b := ir.NewBuilder("paged_verify")
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	b.Output("out", b.PagedAttention(in("q", ir.BF16, 96, 8, 128), in("k", ir.BF16, 96, 2, 128), in("v", ir.BF16, 96, 2, 128),
		in("kpool", ir.BF16, 4096, 2, 128), in("vpool", ir.BF16, 4096, 2, 128), in("table", ir.I32, 8, 64),
		in("lens", ir.I32, 8), in("starts", ir.I32, 9), in("seqs", ir.I32), 1/math.Sqrt(128), 16, 0))
	body, err := b.Build()
	require.NoError(t, err)
	good := pagedKernel(t, "paged_verify_good", body, 128)
	bad := pagedKernel(t, "paged_verify_bad", body, 128)
	bad.Text = strings.Replace(bad.Text, pagedBlockIndex(16), pagedBlockIndex(16)+" + 1", 1)
	require.NotEqual(t, good.Text, strings.Replace(bad.Text, "paged_verify_bad", "paged_verify_good", -1))
	seeds := uint64(3)
	if testing.Short() {
		seeds = 2 // draws of metadata and inputs: the long test command makes 3
	}
	for seed := range seeds {
		opt := VerifyOptions{Seed: seed, MaxBlocks: 16}
		check, err := VerifyKernel(context.Background(), good, body, opt)
		require.NoError(t, err, "seed %d", seed)
		assert.True(t, check.Sampled, "a kernel of %d outputs runs a sample", 96*8*128)
		assert.Positive(t, check.Elements)
		_, err = VerifyKernel(context.Background(), bad, body, opt)
		t.Logf("seed %d, broken: %v", seed, err)
		assert.Error(t, err, "seed %d: the block index off by one went unnoticed", seed)
	}
}

// pagedStepProgram is a small serving step's graph (9 tokens: the q, k
// and v projections, paged attention over a pool of 16 blocks of 4 slots
// with a table of 3 rows of 6 blocks, i32 metadata inputs named table,
// lens, starts and seqs, the output projection) and its naive program,
// lowered and printed.
func pagedStepProgram(t *testing.T) (*ir.Graph, *lower.Program, []*Kernel) {
	t.Helper()
	b := ir.NewBuilder("paged_step")
	const T, E, Hq, Hkv, D = 9, 32, 4, 2, 8
	x := b.Input("x", ir.F32, T, E)
	proj := func(name string, heads ir.Dim) ir.Value {
		return b.Reshape(b.MatMul(x, b.Weight(name, ir.F32, E, heads*D)), T, heads, D)
	}
	pool := func(name string) ir.Value { return b.Input(name, ir.F32, 64, Hkv, D) }
	att := b.PagedAttention(proj("wq", Hq), proj("wk", Hkv), proj("wv", Hkv), pool("kpool"), pool("vpool"),
		b.Input("table", ir.I32, 3, 6), b.Input("lens", ir.I32, 3), b.Input("starts", ir.I32, 4), b.Input("seqs", ir.I32), 1/math.Sqrt(D), 4, 0)
	b.Output("y", b.MatMul(b.Reshape(att, T, Hq*D), b.Weight("wo", ir.F32, Hq*D, E)))
	g, err := b.Build()
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	ks, err := PrintProgram(lp)
	require.NoError(t, err)
	return g, lp, ks
}

// TestEmulatePagedStepProgram lowers a small serving step (the q, k and v
// projections of its tokens, paged attention over a pool, the output
// projection) to its naive program, prints every launch, runs it under
// emulation with the memory plan's arena and compares the output with the
// reference: the paged kernel's nine arguments, its integer metadata and
// its views of the projections go through lowering and the memory plan.
func TestEmulatePagedStepProgram(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	g, lp, ks := pagedStepProgram(t)
	paged := 0
	for _, k := range ks {
		if strings.Contains(k.Text, "Rs[") {
			paged++
		}
	}
	require.Equal(t, 1, paged, "one paged attention kernel")
	for seed := range uint64(4) {
		feeds, err := ir.RandomFeeds(g, seed, ir.Typical)
		require.NoError(t, err)
		want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err)
		outs, _, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{Shuffle: true, Seed: seed})
		require.NoError(t, err)
		mm, err := ir.Compare(outs["y"], want.Outputs["y"], want.Magnitudes["y"], 1024)
		require.NoError(t, err)
		assert.Nil(t, mm, "seed %d: %v", seed, mm)
	}
	// Metadata the op has no meaning on is refused before anything runs:
	// a block past the pool, starts that decrease.
	feeds, err := ir.RandomFeeds(g, 9, ir.Typical)
	require.NoError(t, err)
	bad := func(name string, j, v int64) map[string]*ir.Tensor {
		out := maps.Clone(feeds)
		c := feeds[name].Clone()
		c.SetInt(j, v)
		out[name] = c
		return out
	}
	n := feeds["seqs"].Int(0)
	require.Positive(t, n)
	_, err = NewEmulation(context.Background(), lp, ks, bad("starts", n, -1))
	assert.ErrorContains(t, err, "paged attention metadata")
	_, err = NewEmulation(context.Background(), lp, ks, bad("seqs", 0, 4))
	assert.ErrorContains(t, err, "4 sequences present; the block table has 3 rows")
	_, err = NewEmulation(context.Background(), lp, ks, feeds)
	assert.NoError(t, err)
}

// TestPagedAttentionThroughViews: q, k and v read through the views
// lowering folds into the kernel (slices of a fused qkv projection,
// reshaped to heads, cast to the pools' dtype) compute what the reference
// does, in every schedule, on random valid metadata.
func TestPagedAttentionThroughViews(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	const T, Hq, Hkv, D = 11, 4, 2, 12
	b := ir.NewBuilder("paged_views")
	qkv := b.Input("qkv", ir.F32, T, (Hq+2*Hkv)*D)
	part := func(from, heads ir.Dim) ir.Value {
		return b.Cast(b.Reshape(b.Slice(qkv, 1, int64(from*D), int64((from+heads)*D), 1), T, heads, D), ir.BF16)
	}
	pool := func(name string) ir.Value { return b.Input(name, ir.BF16, 96, Hkv, D) }
	b.Output("out", b.PagedAttention(part(0, Hq), part(Hq, Hkv), part(Hq+Hkv, Hkv), pool("kpool"), pool("vpool"),
		b.Input("table", ir.I64, 4, 8), b.Input("lens", ir.I64, 4), b.Input("starts", ir.I64, 5), b.Input("seqs", ir.I64), 0.3, 8, 0))
	body, err := b.Build()
	require.NoError(t, err)
	var ks []*Kernel
	var steps []pagedStep
	for i, threads := range []int{64, 128, 256, 512} {
		feeds, err := ir.RandomFeeds(body, uint64(60+i), ir.Typical)
		require.NoError(t, err)
		st := pagedStep{body: body, feeds: feeds}
		st.want, err = ir.Eval(context.Background(), body, feeds, ir.EvalOptions{Magnitude: true})
		require.NoError(t, err)
		for _, v := range body.Inputs() {
			st.args = append(st.args, feeds[body.Node(v).Name])
		}
		ks, steps = append(ks, pagedKernel(t, fmt.Sprintf("views%d", i), body, threads)), append(steps, st)
	}
	for i, mm := range emulatePaged(t, ks, steps) {
		assert.Nil(t, mm, "%s (%s): %v", ks[i].Name, ks[i].Schedule, mm)
	}
}

// TestVerifyLlamaPagedAttention verifies the paged attention kernel of a
// llama-3-8b serving step at its real shapes (pools of 32768 slots, a
// table of 256 rows of 512 blocks, 256 tokens) as verification before
// output does: random valid metadata, a sample of blocks, the reference
// at the sampled elements. It takes seconds: the work follows the drawn
// lengths and the sample, not the pool.
func TestVerifyLlamaPagedAttention(t *testing.T) {
	skipLong(t)
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	dts := []ir.DType{ir.BF16, ir.F16}
	if raceEnabled {
		// 18 s a dtype under the race detector, which sees the same
		// code paths in one.
		dts = dts[:1]
	}
	for i, dt := range dts {
		body := llamaPaged(t, dt, 256)
		k := pagedKernel(t, "llama_paged_"+dt.String(), body, 128)
		check, err := VerifyKernel(context.Background(), k, body, VerifyOptions{Seed: uint64(i + 1)})
		require.NoError(t, err, dt)
		assert.True(t, check.Sampled)
		assert.Positive(t, check.Elements)
		t.Logf("%s: %d of %d blocks, %d elements compared, worst %.3g of the tolerance", dt, check.BlocksRun, check.GridBlocks, check.Elements, check.WorstRatio)
	}
}
