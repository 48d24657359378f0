package cuda

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
)

// pagedSinkCases are steps of paged attention with sinks (gpt-oss's):
// without and with a window, one block a pair and keys split across
// blocks (a split that sees no key among them), tokens of no sequence
// (zeros), f32, bf16 and f16, sinks in q's dtype and in f32.
func pagedSinkCases() []pagedSplitCase {
	return []pagedSplitCase{
		{pagedCase{name: "sinks_f32", dt: ir.F32, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 8, threads: 128, sinks: ir.F32,
			seqs: []pagedSeq{{100, 1}, {37, 6}, {0, 1}}, tail: 1}, 1, false},
		{pagedCase{name: "sinks_bf16_window", dt: ir.BF16, meta: ir.I64, hq: 8, hkv: 2, d: 32, block: 16, window: 45, threads: 64, sinks: ir.BF16,
			seqs: []pagedSeq{{200, 1}, {20, 4}}, absent: 1}, 1, false},
		{pagedCase{name: "sinks_f16_f32sinks", dt: ir.F16, meta: ir.I32, hq: 2, hkv: 2, d: 33, block: 5, threads: 256, sinks: ir.F32,
			seqs: []pagedSeq{{123, 2}, {3, 1}}}, 1, false},
		// 301 keys in 8 shares of 64: the last three are empty.
		{pagedCase{name: "sinks_split_bf16", dt: ir.BF16, meta: ir.I32, hq: 8, hkv: 2, d: 32, block: 16, threads: 64, sinks: ir.BF16,
			seqs: []pagedSeq{{300, 1}, {5, 1}}, tail: 1}, 8, false},
		{pagedCase{name: "sinks_split_window_f32", dt: ir.F32, meta: ir.I64, hq: 4, hkv: 1, d: 24, block: 8, window: 37, threads: 128, sinks: ir.F32,
			seqs: []pagedSeq{{200, 1}, {20, 4}}, extraBlocks: 1}, 4, false},
		{pagedCase{name: "sinks_split_rows_bf16_f32sinks", dt: ir.BF16, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 4, threads: 64, sinks: ir.F32,
			seqs: []pagedSeq{{70, 1}, {0, 2}}, tail: 2}, 2, true},
	}
}

// TestPagedAttentionSinksMatchReference runs paged attention with sinks
// under the emulation (shuffled threads) against the float64 reference on
// the poisoned steps of pagedCase (pagedSinkCases), each split kernel
// twice in a row as TestPagedAttentionSplitMatchesReference does; and
// checks the sinks matter: the same steps without them differ.
func TestPagedAttentionSinksMatchReference(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	var launches []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	var steps []pagedStep
	var present []int64
	cases := pagedSinkCases()
	for i, c := range cases {
		var k *Kernel
		for run := range 2 {
			st := c.build(t, uint64(500+10*i+run))
			require.Positive(t, st.poison, "%s: the pool has poisoned elements", c.name)
			if run == 0 {
				k = pagedSplitKernel(t, fmt.Sprintf("pksink%d", i), c, st)
				require.Contains(t, k.Text, "L += expf(sk - M);", "%s: the sink in the combine", c.name)
			}
			T := int64(st.body.Node(st.body.Outputs[0].Value).Shape[0])
			a := st.args
			if c.rows {
				// The tokens present, the grid for them alone (the same
				// in both runs).
				a = append(append([]*ir.Tensor{}, a...), st.feeds["starts"], st.feeds["seqs"])
				T -= c.tail
				if run == 0 {
					rk := *k
					rk.Grid = k.Rows.Of(k.Grid, T)
					k = &rk
				}
			}
			n := st.body.Node(st.body.Outputs[0].Value)
			launches, args, outs = append(launches, k), append(args, a), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
			steps, present = append(steps, st), append(present, T)
		}
	}
	got, err := Emulate(context.Background(), launches, args, outs, emu.Options{Shuffle: true, Seed: 17})
	require.NoError(t, err)
	for i, st := range steps {
		c := cases[i/2]
		assertPagedRun(t, fmt.Sprintf("%s, step %d", c.name, i%2), launches[i], got[i][0], st, c.rows, present[i])
		// Without the sinks the reference differs: they matter here.
		plain := c.pagedCase
		plain.sinks = ir.InvalidDType
		ps := plain.build(t, uint64(500+10*(i/2)+i%2))
		out, pw, pm := got[i][0], ps.want.Outputs["out"], ps.want.Magnitudes["out"]
		if c.rows {
			out, pw, pm = firstRows(out, present[i]), firstRows(pw, present[i]), firstRows(pm, present[i])
		}
		mm, err := ir.Compare(out, pw, pm, 1024)
		require.NoError(t, err)
		assert.NotNil(t, mm, "%s: the sinks change the output", c.name)
	}
}

// TestPagedAttentionSinkCountedOnce: a kernel that counts the sink more
// than once fails verification where the printed one passes. Each
// breakage is an edit of a printed kernel's text: the sink counted in
// every warp's partial (and once more in the combine), in every split's
// partial that saw a key, or dropped.
func TestPagedAttentionSinkCountedOnce(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	// Long contexts: every warp and every split sees keys.
	base := pagedCase{name: "sink_once", dt: ir.F32, meta: ir.I32, hq: 4, hkv: 2, d: 16, block: 8, threads: 128, sinks: ir.F32,
		seqs: []pagedSeq{{300, 1}, {250, 3}}}
	type breakage struct {
		name, old, new string
		splits         int
	}
	breakages := []breakage{
		{"every_warp", "L += a * Ls[x][g];", "L += a * Ls[x][g] + (Ms[x][g] == -INFINITY ? 0.0f : expf(sk - M));", 1},
		{"every_split", "L += a * __ldcg(px + 17);", "L += a * __ldcg(px + 17) + (mx == -INFINITY ? 0.0f : expf(sk - M));", 4},
		{"dropped", "L += expf(sk - M);", "", 1},
		{"dropped_split", "L += expf(sk - M);", "", 4},
	}
	st := base.build(t, 9)
	var launches []*Kernel
	for _, br := range breakages {
		c := pagedSplitCase{base, br.splits, false}
		good := pagedSplitKernel(t, "good_"+br.name, c, st)
		bad := editKernel(t, good, "bad_"+br.name, br.old, br.new)
		launches = append(launches, good, bad)
	}
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	n := st.body.Node(st.body.Outputs[0].Value)
	for range launches {
		args, outs = append(args, st.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), launches, args, outs, emu.Options{Shuffle: true, Seed: 19})
	require.NoError(t, err)
	for i, k := range launches {
		mm, err := ir.Compare(got[i][0], st.want.Outputs["out"], st.want.Magnitudes["out"], 1024)
		require.NoError(t, err)
		if i%2 == 0 {
			assert.Nil(t, mm, "%s, unbroken: %v", k.Name, mm)
		} else {
			assert.NotNil(t, mm, "%s: the breakage went unnoticed", k.Name)
		}
	}
}

// llamaPagedSinks is llamaPaged with sinks of dtype sdt, as gpt-oss's
// attention has them (64 query heads on 8 key heads of 64 in
// gpt-oss-120b; llama's shapes here, which fill the accumulators more).
func llamaPagedSinks(t *testing.T, dt, sdt ir.DType, T int, window int64) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("sinks_paged")
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	T32 := ir.Dim(T)
	b.Output("out", b.PagedAttentionSinks(in("q", dt, T32, 32, 128), in("k", dt, T32, 8, 128), in("v", dt, T32, 8, 128),
		in("kpool", dt, 2048*16, 8, 128), in("vpool", dt, 2048*16, 8, 128), in("table", ir.I32, 256, 512),
		in("lens", ir.I32, 256), in("starts", ir.I32, 257), in("seqs", ir.I32), in("sinks", sdt, 32), 1/math.Sqrt(128), 16, window))
	body, err := b.Build()
	require.NoError(t, err)
	return body
}

// TestNVRTCCompilesPagedSinks compiles the schedules the cost model ranks
// for paged attention with sinks (a prefill's 512 tokens and a decode
// token at 8191 positions, whose best schedules split the keys; bf16 with
// bf16 sinks and a window, f32 with f32 sinks) for sm_90: no spills, no
// local memory. Under -short the best three of each.
func TestNVRTCCompilesPagedSinks(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	var ks []*Kernel
	for _, c := range []struct {
		dt, sdt ir.DType
		T       int
		window  int64
	}{{ir.BF16, ir.BF16, 512, 128}, {ir.BF16, ir.BF16, 1, 0}, {ir.F32, ir.F32, 1, 128}, {ir.F32, ir.F32, 512, 0}} {
		model := cost.NewModel(dev, cost.Defaults(dev))
		if c.T == 1 {
			model = model.AtPosition(8191)
		}
		body := llamaPagedSinks(t, c.dt, c.sdt, c.T, c.window)
		ranked, err := model.Ranked(body)
		require.NoError(t, err)
		require.NotEmpty(t, ranked)
		for i, e := range ranked {
			if testing.Short() && i >= 3 {
				break
			}
			k, err := PrintKernelWith(fmt.Sprintf("paged_sinks_%s_%d_w%d_%d", c.dt, c.T, c.window, i), "sinks paged "+e.Schedule.String(), body, e.Schedule)
			require.NoError(t, err)
			require.Contains(t, k.Text, "L += expf(sk - M);")
			ks = append(ks, k)
		}
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(ks), "paged_sinks.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for _, k := range ks {
		r, ok := res.Kernels[k.Name]
		require.True(t, ok, "no resources for %s", k.Name)
		assert.Zero(t, r.SpillStores, "%s (%s) spills", k.Name, k.Schedule)
		assert.Zero(t, r.StackBytes, "%s (%s) keeps its arrays in registers", k.Name, k.Schedule)
		j := strings.Index(res.PTX, ".entry "+k.Name+"(")
		require.GreaterOrEqual(t, j, 0, "entry %s", k.Name)
		entry := res.PTX[j:]
		entry = entry[:strings.Index(entry, "\n}")]
		assert.NotContains(t, entry, ".local", "%s (%s): no local memory", k.Name, k.Schedule)
		t.Logf("%s (%s): %d registers, %d bytes shared", k.Name, k.Schedule, r.Registers, r.SharedBytes)
	}
}

// TestVerifyPagedSinksSampled verifies paged attention with sinks, its
// keys split across 8 blocks, as verification before output does (a
// sample of whole groups of a pair's splits on random valid metadata, the
// reference at the sampled elements: ir.EvalAt's paged rule with sinks);
// the same kernel counting the sink in every split's partial fails.
func TestVerifyPagedSinksSampled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	b := ir.NewBuilder("paged_sinks_verify")
	in := func(name string, dt ir.DType, shape ...ir.Dim) ir.Value { return b.Input(name, dt, shape...) }
	b.Output("out", b.PagedAttentionSinks(in("q", ir.F32, 96, 8, 128), in("k", ir.F32, 96, 2, 128), in("v", ir.F32, 96, 2, 128),
		in("kpool", ir.F32, 4096, 2, 128), in("vpool", ir.F32, 4096, 2, 128), in("table", ir.I32, 8, 64),
		in("lens", ir.I32, 8), in("starts", ir.I32, 9), in("seqs", ir.I32), in("sinks", ir.F32, 8), 1/math.Sqrt(128), 16, 100))
	body, err := b.Build()
	require.NoError(t, err)
	c := pagedSplitCase{pagedCase{threads: 64, meta: ir.I32}, 8, false}
	good := pagedSplitKernel(t, "paged_sinks_verify_good", c, pagedStep{body: body})
	bad := editKernel(t, good, "paged_sinks_verify_bad", "L += a * __ldcg(px + 129);", "L += a * __ldcg(px + 129) + (mx == -INFINITY ? 0.0f : expf(sk - M));")
	for seed := range uint64(2) {
		opt := VerifyOptions{Seed: seed, MaxBlocks: 16}
		check, err := VerifyKernel(context.Background(), good, body, opt)
		require.NoError(t, err, "seed %d", seed)
		assert.True(t, check.Sampled, "a kernel of %d outputs runs a sample", 96*8*128)
		_, err = VerifyKernel(context.Background(), bad, body, opt)
		t.Logf("seed %d, broken: %v", seed, err)
		assert.Error(t, err, "seed %d: the sink counted in every split went unnoticed", seed)
	}
}
