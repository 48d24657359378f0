package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeCase is a flash-decoding test: a body whose keys follow a runtime
// position, the positions it runs at, and the schedules it is printed in.
type decodeCase struct {
	c      boundCase
	scheds []cost.Schedule
}

// decodeCases cover the flash-decoding layout's shapes, small: GQA groups
// of 4 and 2 and none, head dims of 16 (two bf16 lanes a key row), 32 in
// f32 (eight lanes), 64 in f16 (eight) and 128 in bf16 (sixteen: llama's);
// one split and several, some of them with no key at position 0; whole
// warp steps and a partial last one; a chunk of query rows (S = 3) and a
// sliding window's eager mask.
func decodeCases() []decodeCase {
	ks := func(bn, threads, splits int) cost.Schedule {
		return cost.Schedule{BM: 1, BN: bn, Threads: threads, KeySplits: splits}
	}
	return []decodeCase{
		{boundCase{name: "fd_bf16_d16", dt: ir.BF16, mask: boundOp, heads: 8, kvHeads: 2, s: 1, tk: 70, d: 16, positions: []int64{0, 69, 37}},
			[]cost.Schedule{ks(32, 64, 1), ks(16, 128, 3), ks(64, 32, 5)}},
		{boundCase{name: "fd_f32_d32", dt: ir.F32, mask: boundOp, heads: 4, kvHeads: 2, s: 1, tk: 70, d: 32, positions: []int64{0, 69, 20}},
			[]cost.Schedule{ks(8, 64, 1), ks(16, 128, 4)}},
		{boundCase{name: "fd_f16_d64", dt: ir.F16, mask: boundOp, heads: 2, kvHeads: 2, s: 1, tk: 45, d: 64, positions: []int64{0, 44, 9}},
			[]cost.Schedule{ks(16, 64, 2)}},
		{boundCase{name: "fd_bf16_d128", dt: ir.BF16, mask: boundOp, heads: 4, kvHeads: 1, s: 1, tk: 40, d: 128, positions: []int64{0, 39, 17}},
			[]cost.Schedule{ks(8, 128, 1), ks(8, 64, 3)}},
		{boundCase{name: "fd_chunk_bf16", dt: ir.BF16, mask: boundOp, heads: 2, kvHeads: 1, s: 3, tk: 50, d: 32, positions: []int64{0, 47, 21}},
			[]cost.Schedule{ks(16, 64, 2)}},
		{boundCase{name: "fd_window_f32", dt: ir.F32, mask: boundWindow, heads: 2, kvHeads: 1, s: 2, tk: 60, d: 16, window: 9, positions: []int64{0, 58, 30, -1}},
			[]cost.Schedule{ks(8, 64, 3)}},
	}
}

// decodeRun is one printed flash-decoding kernel at one position, with
// its inputs and the reference's result.
type decodeRun struct {
	kernel *Kernel
	body   *ir.Graph
	pos    int64
	args   []*ir.Tensor
	want   *ir.Result
}

func decodeRuns(t *testing.T, cases []decodeCase) []decodeRun {
	t.Helper()
	var runs []decodeRun
	for ci, dc := range cases {
		c := dc.c
		body := c.body(t)
		for si, s := range dc.scheds {
			name := fmt.Sprintf("%s_%d", c.name, si)
			k, err := PrintKernelWith(name, c.name+" "+s.String(), body, s)
			require.NoError(t, err, "%s %s", c.name, s)
			require.Equal(t, [3]int{s.KeySplits, int(c.kvHeads), 1}, k.Grid, "%s %s: a block per key head and split", c.name, s)
			for pi, pos := range c.positions {
				args, want := boundFeeds(t, body, pos, uint64(100*ci+pi+1))
				runs = append(runs, decodeRun{kernel: k, body: body, pos: pos, args: args, want: want})
			}
		}
	}
	return runs
}

func emulateDecode(t *testing.T, runs []decodeRun, opt emu.Options) [][]*ir.Tensor {
	t.Helper()
	var kernels []*Kernel
	var args [][]*ir.Tensor
	var outs [][]ir.ValueType
	for _, r := range runs {
		n := r.body.Node(r.body.Outputs[0].Value)
		kernels, args, outs = append(kernels, r.kernel), append(args, r.args), append(outs, []ir.ValueType{{Shape: n.Shape, DType: n.DType}})
	}
	got, err := Emulate(context.Background(), kernels, args, outs, opt)
	require.NoError(t, err)
	return got
}

// TestAttentionDecodeMatchesReference: the flash-decoding layout, printed
// for every case and schedule, matches the reference at every position
// under the emulation, shuffled on one worker and with every block in
// its own thread order (Vary) on two workers, and the two
// runs agree bit for bit: the splits' combine does not depend on which
// block finishes last.
func TestAttentionDecodeMatchesReference(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	runs := decodeRuns(t, decodeCases())
	first := emulateDecode(t, runs, emu.Options{Shuffle: true, Seed: 4, Workers: 1})
	second := emulateDecode(t, runs, emu.Options{Vary: true, Seed: 9, Workers: 2})
	for i, r := range runs {
		mm, err := ir.Compare(first[i][0], r.want.Outputs["out0"], r.want.Magnitudes["out0"], 1024)
		require.NoError(t, err)
		assert.Nil(t, mm, "%s (%s) at position %d: %v", r.kernel.Name, r.kernel.Schedule, r.pos, mm)
		assert.Equal(t, first[i][0].Float64s(), second[i][0].Float64s(), "%s (%s) at position %d: the result depends on the blocks' order", r.kernel.Name, r.kernel.Schedule, r.pos)
	}
	t.Logf("%d runs emulated", len(runs))
}

// TestDecodeStepMixMatchesPTX: the cost model's count of the
// flash-decoding main loop's instructions (cost.DecodeStepMix, from the
// kernel form) agrees with NVRTC's PTX of the printed kernel
// (LoopMix) for llama-3-8b's decode attention (bf16, 4 query heads a key
// head, head dim 128) and two other shapes: the loads exactly, integer
// and floating-point instructions within 20%, the rest within 35% (moves
// and shuffles, which ptxas partly folds away). And the loop's integer
// work stays a fraction of its FMAs: no 64-bit division per element.
func TestDecodeStepMixMatchesPTX(t *testing.T) {
	t.Parallel()
	lib := nvrtcOrSkip(t)
	cases := []struct {
		c boundCase
		s cost.Schedule
	}{
		{boundCase{name: "llama_bf16", dt: ir.BF16, mask: boundOp, heads: 32, kvHeads: 8, s: 1, tk: 1024, d: 128}, cost.Schedule{BM: 1, BN: 8, Threads: 128, KeySplits: 16}},
		{boundCase{name: "f32_d64", dt: ir.F32, mask: boundOp, heads: 8, kvHeads: 4, s: 1, tk: 512, d: 64}, cost.Schedule{BM: 1, BN: 8, Threads: 64, KeySplits: 4}},
		{boundCase{name: "f16_d64_mha", dt: ir.F16, mask: boundOp, heads: 4, kvHeads: 4, s: 1, tk: 300, d: 64, window: 0}, cost.Schedule{BM: 1, BN: 16, Threads: 128, KeySplits: 1}},
	}
	var kernels []*Kernel
	var want []cost.IssueMix
	for _, tc := range cases {
		body := tc.c.body(t)
		k, err := PrintKernelWith("mix_"+tc.c.name, "", body, tc.s)
		require.NoError(t, err)
		kernels = append(kernels, k)
		dec, err := cost.Decompose(body)
		require.NoError(t, err)
		p, err := cost.Attention(dec)
		require.NoError(t, err)
		dp, err := cost.DecodeAttention(dec, p)
		require.NoError(t, err)
		want = append(want, cost.DecodeStepMix(dp, tc.s, cost.DecodeMaskMix(dec, p)))
	}
	res, err := lib.Compile(context.Background(), NVRTCPrelude+Source(kernels), "decode_mix.cu", nvrtc.Options{Arch: "sm_90"})
	require.NoError(t, err)
	for i, k := range kernels {
		got := LoopMix(res.PTX, k.Name)
		t.Logf("%s: PTX %+v, model %+v", k.Name, got, want[i])
		assert.Equal(t, want[i].Load, got.Load, "%s: 16-byte loads a step", k.Name)
		assert.InEpsilon(t, got.Int, want[i].Int, 0.2, "%s: integer instructions a step", k.Name)
		assert.InEpsilon(t, got.FP, want[i].FP, 0.2, "%s: floating-point instructions a step", k.Name)
		assert.InEpsilon(t, got.Other, want[i].Other, 0.35, "%s: other instructions a step", k.Name)
		assert.Less(t, got.IntPerFP(), 1.0, "%s: integer work per floating-point instruction", k.Name)
		r := res.Kernels[k.Name]
		assert.Zero(t, r.SpillStores, "%s spills", k.Name)
		assert.Zero(t, r.StackBytes, "%s keeps a stack frame", k.Name)
	}
}

// TestVerifySamplesWholeSplitGroups: a sampled verification of a
// flash-decoding kernel runs every split of the key heads it samples (a
// head missing one never combines, and its counter would stay raised),
// and the sampled heads match the reference.
func TestVerifySamplesWholeSplitGroups(t *testing.T) {
	t.Parallel()
	needGXX(t)
	c := boundCase{name: "fd_verify", dt: ir.BF16, mask: boundOp, heads: 8, kvHeads: 4, s: 1, tk: 40, d: 16}
	body := c.body(t)
	k, err := PrintKernelWith("fd_verify", "", body, cost.Schedule{BM: 1, BN: 16, Threads: 64, KeySplits: 3})
	require.NoError(t, err)
	require.Equal(t, 3, k.BlockGroup)
	check, err := VerifyKernel(context.Background(), k, body, VerifyOptions{Seed: 3, MaxElements: 1, MaxBlocks: 4})
	require.NoError(t, err)
	require.True(t, check.Sampled)
	assert.Nil(t, check.Mismatch)
	assert.Positive(t, check.Elements)
	require.NotEmpty(t, check.Blocks)
	assert.Zero(t, len(check.Blocks)%3, "whole groups of splits: %v", check.Blocks)
	for i := 0; i < len(check.Blocks); i += 3 {
		assert.Equal(t, []int{check.Blocks[i], check.Blocks[i] + 1, check.Blocks[i] + 2}, check.Blocks[i:i+3], "group %d of %v", i/3, check.Blocks)
	}
}
