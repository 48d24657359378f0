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

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
)

// pagedSplitCase is a step of paged attention printed with each token's
// keys split across splits blocks; rows prints it over the tokens present
// (lum_starts, lum_seqs) and launches its grid for them.
type pagedSplitCase struct {
	pagedCase
	splits int
	rows   bool
}

// pagedSplitKernel prints the case's body with its splits (and its row
// count): the kernel, and the grid to launch for the tokens present.
func pagedSplitKernel(t *testing.T, name string, c pagedSplitCase, st pagedStep) *Kernel {
	t.Helper()
	s := cost.Schedule{BM: 1, BN: cost.PagedTile, Threads: c.threads, SplitKeys: true, KeySplits: c.splits}
	var rc *RowCount
	T := int64(st.body.Node(st.body.Outputs[0].Value).Shape[0])
	if c.rows {
		rc = &RowCount{Max: T, Axis: 0, Starts: c.meta, Seqs: c.meta}
	}
	k, err := PrintKernelRows(name, name+" "+s.String(), st.body, s, rc)
	require.NoError(t, err, name)
	p, err := cost.Paged(st.body)
	require.NoError(t, err)
	if c.splits > 1 {
		assert.Equal(t, c.splits, k.BlockGroup, "%s: a pair's splits are a group", name)
		assert.Equal(t, cost.PagedWorkspace(p, c.splits), k.Workspace, name)
		assert.Contains(t, k.Text, "lum_wc[", name)
	}
	assert.Zero(t, k.Grid[0]%c.splits, "%s: whole groups of splits", name)
	if c.rows {
		require.NotNil(t, k.Rows, "%s follows the rows present", name)
		assert.Equal(t, RowGrid{Dim: 0, Num: p.Hkv * int64(c.splits), Den: 1}, *k.Rows, name)
	}
	return k
}

// firstRows is the first n rows (along axis 0) of x.
// assertPagedRun checks a paged attention kernel's output out of run st
// against the reference (its first present rows alone when the launch
// followed the rows present), and that no element is NaN or infinite: the
// kernel read no poisoned element and left none unwritten.
func assertPagedRun(t *testing.T, label string, k *Kernel, out *ir.Tensor, st pagedStep, rows bool, present int64) {
	t.Helper()
	want, mag := st.want.Outputs["out"], st.want.Magnitudes["out"]
	if rows {
		out, want, mag = firstRows(out, present), firstRows(want, present), firstRows(mag, present)
	}
	mm, err := ir.Compare(out, want, mag, 1024)
	require.NoError(t, err)
	assert.Nil(t, mm, "%s (%s): %v", label, k.Schedule, mm)
	for j := range out.Len() {
		if x := out.At(j); math.IsNaN(x) || math.IsInf(x, 0) {
			t.Errorf("%s: element %d is %v: the kernel read a poisoned element or left it unwritten", label, j, x)
			break
		}
	}
}

func firstRows(x *ir.Tensor, n int64) *ir.Tensor {
	shape := slices.Clone(x.Shape)
	shape[0] = ir.Dim(n)
	out := ir.NewTensor(x.DType, shape)
	for i := range out.Len() {
		out.Set(i, x.At(i))
	}
	return out
}

// TestPagedAttentionSplitMatchesReference runs paged attention with each
// token's keys split across 2 to 32 blocks (flash-decoding) under the
// emulation (shuffled threads) against the float64 reference, on the
// poisoned steps of pagedCase: long and short contexts (a token of 1 key
// over 16 splits, a context that leaves the last splits of a token no
// keys), windows that start inside blocks and tiles, grouped-query and
// one-head-a-key-head layouts, the vector and scalar key rows, tokens of
// no sequence (zeros) and absent table rows; and a step printed over the
// tokens present, its grid sized for them. Each kernel runs on two steps
// in a row, so a launch that left its pairs' counters raised would lose
// the second's combine.
func TestPagedAttentionSplitMatchesReference(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	cases := []pagedSplitCase{
		// 301 keys in 8 shares of 64: the last three are empty.
		{pagedCase{name: "decode_gqa", dt: ir.BF16, meta: ir.I32, hq: 8, hkv: 2, d: 32, block: 16, threads: 64,
			seqs: []pagedSeq{{300, 1}}}, 8, false},
		// Contexts of 0, 5 and 40 over 16 splits: most shares empty, a
		// token of no sequence, an absent table row.
		{pagedCase{name: "short_contexts", dt: ir.F32, meta: ir.I64, hq: 4, hkv: 2, d: 16, block: 4, threads: 64,
			seqs: []pagedSeq{{0, 1}, {5, 1}, {40, 3}}, tail: 1, absent: 1}, 16, false},
		// A window of 37 from inside a block: each token's shares start
		// at its window.
		{pagedCase{name: "window", dt: ir.F16, meta: ir.I32, hq: 4, hkv: 1, d: 24, block: 8, window: 37, threads: 128,
			seqs: []pagedSeq{{200, 1}, {20, 4}}, extraBlocks: 1}, 4, false},
		// One head a key head, head size 33 (scalar key rows), 32 splits.
		{pagedCase{name: "mha_scalar_rows", dt: ir.BF16, meta: ir.I64, hq: 2, hkv: 2, d: 33, block: 5, threads: 64,
			seqs: []pagedSeq{{123, 2}}}, 32, false},
		// Over the tokens present: 3 padding tokens past T are not
		// computed, the grid is 2 x Hkv blocks a token present.
		{pagedCase{name: "rows_present", dt: ir.F32, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 4, threads: 64,
			seqs: []pagedSeq{{70, 1}, {9, 2}}, tail: 3}, 2, true},
	}
	var ks []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var steps []pagedStep
	var present []int64
	for i, c := range cases {
		for run := range 2 {
			st := c.build(t, uint64(300+10*i+run))
			require.Positive(t, st.poison, "%s: the pool has poisoned elements", c.name)
			if run == 0 {
				ks = append(ks, pagedSplitKernel(t, fmt.Sprintf("pks%d", i), c, st))
			}
			T := int64(st.body.Node(st.body.Outputs[0].Value).Shape[0])
			a := st.args
			if c.rows {
				// The tokens present, as a step's kernels take them; the
				// grid for them alone.
				a = append(slices.Clone(a), st.feeds["starts"], st.feeds["seqs"])
				T -= c.tail
				if run == 0 {
					k := ks[len(ks)-1]
					rk := *k
					rk.Grid = k.Rows.Of(k.Grid, T)
					require.Less(t, rk.Grid[0], k.Grid[0], "%s: a smaller grid for %d tokens present", c.name, T)
					ks[len(ks)-1] = &rk
				}
			}
			n := st.body.Node(st.body.Outputs[0].Value)
			args, outs = append(args, a), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
			steps, present = append(steps, st), append(present, T)
		}
	}
	// Each kernel twice, on its two steps in a row.
	var launches []*Kernel
	for _, k := range ks {
		launches = append(launches, k, k)
	}
	got, err := Emulate(context.Background(), launches, args, outs, emu.Options{Shuffle: true, Seed: 13})
	require.NoError(t, err)
	for i, st := range steps {
		c := cases[i/2]
		assertPagedRun(t, fmt.Sprintf("%s, step %d", c.name, i%2), launches[i], got[i][0], st, c.rows, present[i])
	}
	// The cases do leave shares empty.
	assert.Equal(t, int64(64), cost.PagedSplitChunk(301, 8), "decode_gqa: 5 shares of 64 cover 301 keys, 3 are empty")
}

// TestPagedAttentionSplitBreakageIsCaught: the split kernel's own lines
// matter: each breakage is a one-line edit of a printed kernel (the
// shares past the first skipping their first key, the
// splits' combine weighing every partial alike, and the last block not
// resetting its counter, which the second launch on the same module pays
// for), and each is caught where the unbroken kernel passes.
func TestPagedAttentionSplitBreakageIsCaught(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	c := pagedSplitCase{pagedCase{name: "split_breakage", dt: ir.F32, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 8, threads: 64,
		seqs: []pagedSeq{{150, 1}, {37, 2}}}, 4, false}
	st := c.build(t, 7)
	breakages := []struct{ name, old, new string }{
		{"share_start", "kb = lo + split * chunk,", "kb = lo + split * chunk + (split > 0),"},
		{"combine", "const float a = mx == -INFINITY ? 0.0f : expf(mx - M);", "const float a = mx == -INFINITY ? 0.0f : 1.0f;"},
		{"counter_reset", "if (threadIdx.x == 0) lum_wc[bt] = 0u;", ""},
	}
	var launches []*Kernel
	for _, br := range breakages {
		good := pagedSplitKernel(t, "good_"+br.name, c, st)
		bad := pagedSplitKernel(t, "bad_"+br.name, c, st)
		require.Equal(t, 1, strings.Count(bad.Text, br.old), "%s: the line to break", br.name)
		bad.Text = strings.Replace(bad.Text, br.old, br.new, 1)
		// Twice each: the counters of the first launch are the second's.
		launches = append(launches, good, good, bad, bad)
	}
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	n := st.body.Node(st.body.Outputs[0].Value)
	for range launches {
		args, outs = append(args, st.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), launches, args, outs, emu.Options{Shuffle: true, Seed: 5})
	require.NoError(t, err)
	for i := 0; i < len(launches); i += 4 {
		for j := range 4 {
			mm, err := ir.Compare(got[i+j][0], st.want.Outputs["out"], st.want.Magnitudes["out"], 1024)
			require.NoError(t, err)
			switch {
			case j < 2:
				assert.Nil(t, mm, "%s, unbroken, launch %d: %v", launches[i+j].Name, j, mm)
			case j == 3 || breakages[i/4].name != "counter_reset":
				// The counter left raised spoils the launch after it.
				assert.NotNil(t, mm, "%s, launch %d: the breakage went unnoticed", launches[i+j].Name, j-2)
			}
		}
	}
}

// TestNVRTCCompilesPagedSplit compiles the split schedules the cost model
// lists for one decoding token of a llama-3-8b step (bf16 and f32 for
// sm_90, bf16's best four for sm_80; under -short the best few for sm_90)
// with no spills, no local memory and
// static shared memory within 48 KiB, and checks that one wins at a
// context of 8191.
func TestNVRTCCompilesPagedSplit(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	model := cost.NewModel(dev, cost.Defaults(dev)).AtPosition(8191)
	var ks, best []*Kernel
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		body := llamaPaged(t, dt, 1)
		ranked, err := model.Ranked(body)
		require.NoError(t, err)
		require.Positive(t, ranked[0].Schedule.KeySplits, "%s: a split wins at 8191 positions", dt)
		// Under -short the best few (bf16's 4, f32's 2: the same code
		// but for the loads), else every split schedule listed.
		few := map[ir.DType]int{ir.BF16: 4, ir.F32: 2}[dt]
		for i, e := range ranked {
			if e.Schedule.KeySplits == 0 || (testing.Short() && i >= few) {
				continue
			}
			k, err := PrintKernelWith(fmt.Sprintf("paged_split_%s_%d", dt, i), "llama paged "+e.Schedule.String(), body, e.Schedule)
			require.NoError(t, err)
			ks = append(ks, k)
			if dt == ir.BF16 && len(best) < 4 {
				best = append(best, k)
			}
		}
	}
	archs := []string{"sm_90", "sm_80"}
	if testing.Short() {
		archs = archs[:1]
	}
	for _, arch := range archs {
		ks := ks
		if arch == "sm_80" {
			ks = best
		}
		res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "paged_split.cu", nvrtc.Options{Arch: arch})
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

// TestVerifyPagedSplitSampled verifies a split paged attention kernel too
// large to run whole as verification before output does (a sample of
// blocks on random valid metadata, the reference at the sampled
// elements): the sample runs whole groups of a pair's splits, whose last
// block writes the pair's outputs, and they match.
func TestVerifyPagedSplitSampled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	b := ir.NewBuilder("paged_split_verify")
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	b.Output("out", b.PagedAttention(in("q", ir.BF16, 96, 8, 128), in("k", ir.BF16, 96, 2, 128), in("v", ir.BF16, 96, 2, 128),
		in("kpool", ir.BF16, 4096, 2, 128), in("vpool", ir.BF16, 4096, 2, 128), in("table", ir.I32, 8, 64),
		in("lens", ir.I32, 8), in("starts", ir.I32, 9), in("seqs", ir.I32), 1/math.Sqrt(128), 16, 0))
	body, err := b.Build()
	require.NoError(t, err)
	const splits = 4
	k, err := PrintKernelWith("paged_split_verify", "", body, cost.Schedule{BM: 1, BN: cost.PagedTile, Threads: 128, SplitKeys: true, KeySplits: splits})
	require.NoError(t, err)
	check, err := VerifyKernel(context.Background(), k, body, VerifyOptions{Seed: 1, MaxBlocks: 16})
	require.NoError(t, err)
	require.True(t, check.Sampled, "a kernel of %d outputs runs a sample", 96*8*128)
	assert.Nil(t, check.Mismatch)
	assert.Positive(t, check.Elements)
	require.NotEmpty(t, check.Blocks)
	assert.Zero(t, len(check.Blocks)%splits, "whole groups of splits: %v", check.Blocks)
	for i := 0; i < len(check.Blocks); i += splits {
		assert.Zero(t, check.Blocks[i]%splits, "group %d of %v starts a pair", i/splits, check.Blocks)
		assert.Equal(t, check.Blocks[i]+splits-1, check.Blocks[i+splits-1], "group %d of %v", i/splits, check.Blocks)
	}
}

// TestStepWithSplitPagedAttention runs a whole serving step (tiny-llama's,
// every layer's paged attention printed with its keys split across 4
// blocks, the other kernels in their defaults) under the emulation on a
// batch of fewer tokens and sequences than the maxima: the paged kernels'
// grids follow the tokens present (4 x Hkv blocks a token), every layer's
// launch shares its kernel's counters with the others, and the logits of
// the sequences present and the pools equal the reference's.
func TestStepWithSplitPagedAttention(t *testing.T) {
	t.Parallel()
	needCompilers(t)
	opt := corpus.Options{Seq: 40, Step: corpus.StepOptions{MaxTokens: 10, MaxSeqs: 4, BlockSize: 4, KVBlocks: 40}}
	g, err := corpus.Build("tiny-llama:step", opt)
	require.NoError(t, err)
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	const splits = 4
	split := cost.Schedule{BM: 1, BN: cost.PagedTile, Threads: 64, SplitKeys: true, KeySplits: splits}
	ks, err := PrintProgramWith(lp, func(body *ir.Graph) ([]cost.Estimate, error) {
		if f, err := cost.FormOf(body); err == nil && f == cost.FormPagedAttention {
			return []cost.Estimate{{Schedule: split}}, nil
		}
		return []cost.Estimate{{}}, nil
	})
	require.NoError(t, err)
	l := *lp.Step
	feeds, err := ir.RandomFeeds(g, 8, ir.Typical)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(8, 5))
	b, err := l.Arrange(rng, l.DrawShapes(rng, 3, 6))
	require.NoError(t, err)
	for i := range b.IDs {
		b.IDs[i] = int64(rng.IntN(l.Vocab))
	}
	T := int64(b.Tokens())
	require.Less(t, T, int64(l.MaxTokens))
	meta, err := l.Feeds(b)
	require.NoError(t, err)
	maps.Copy(feeds, meta)
	want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)

	e, err := NewEmulation(context.Background(), lp, ks, feeds)
	require.NoError(t, err)
	paged := 0
	for i, k := range ks {
		if k.BlockGroup != splits {
			continue
		}
		paged++
		require.NotNil(t, k.Rows, k.Name)
		assert.Equal(t, k.Rows.Of(k.Grid, T), e.Launches[i].Grid, k.Name)
		assert.Zero(t, e.Launches[i].Grid[0]%splits, "%s: whole groups of splits", k.Name)
	}
	ops := 0
	for _, n := range g.Nodes {
		if n.Op == ir.OpPagedAttention {
			ops++
		}
	}
	require.Equal(t, ops, paged, "every layer's paged attention split")

	outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{Shuffle: true, Seed: 9})
	require.NoError(t, err)
	assertStepMatches(t, l, b, want, outs, states)
}
