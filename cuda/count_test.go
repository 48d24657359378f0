package cuda

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countTarget is the device the corpus programs are priced for.
const countTarget = "h200-sxm"

// layerWeightBytes is the bytes of the weights of a model's decoder layer
// 0 (its "layer" or "block" graph).
func layerWeightBytes(t *testing.T, model string) float64 {
	t.Helper()
	c, err := corpus.EmbeddedConfig(model)
	require.NoError(t, err)
	kind := "layer"
	if c.Family() == "gpt2" {
		kind = "block"
	}
	g, err := corpus.Build(model+":"+kind, corpus.Options{Seq: 1})
	require.NoError(t, err)
	total := 0.0
	for _, v := range g.Weights() {
		n := g.Node(v)
		total += float64(n.Shape.NumElements()) * float64(n.DType.Size())
	}
	return total
}

// scaledDevice is the target with its L2 scaled to a tiny model's shapes:
// the target's L2 times the tiny model's decoder-layer weight bytes over
// the real model's (bf16, as deployed), so that L2 holds the same share
// of a layer's weights at the test shapes as on the GPU (llama-3-8b's 50
// MiB of L2 hold a ninth of a 436 MB layer; the tiny llama's scaled L2,
// 19 KiB, a ninth of its 160 KiB layer). A kernel's operands then fit L2
// at the test shapes when they fit it at the real shapes, near enough.
func scaledDevice(t *testing.T, tiny, real string) *cost.Device {
	t.Helper()
	d, err := cost.LookupDevice(countTarget)
	require.NoError(t, err)
	// layerWeightBytes builds the real layer in f32: bf16 halves it.
	realBytes := layerWeightBytes(t, real) / 2
	scaled := *d
	scaled.L2Bytes = int64(float64(d.L2Bytes) * layerWeightBytes(t, tiny) / realBytes)
	scaled.L2Bytes = max(scaled.L2Bytes/emu.LineBytes*emu.LineBytes, emu.LineBytes)
	return &scaled
}

// countedProgram is a corpus program compiled for a scaled device (the
// cost model choosing the extraction and the schedules) with the feeds of
// a run.
type countedProgram struct {
	lp    *lower.Program
	ks    []*Kernel
	feeds map[string]*ir.Tensor
	model *cost.Model
}

var countedCache onceCache[string, countedProgram]

// countedCorpus compiles corpus graph name as search's pipeline does
// (every rule set saturated, the cost model of d extracting and choosing
// each kernel's schedule), once per test binary.
func countedCorpus(t *testing.T, name string, opt corpus.Options, d *cost.Device) countedProgram {
	t.Helper()
	p, err := countedCache.get(name, func() (countedProgram, error) {
		g, err := corpus.Build(name, opt)
		if err != nil {
			return countedProgram{}, err
		}
		rws, err := everyRuleSet()
		if err != nil {
			return countedProgram{}, err
		}
		m := cost.NewModel(d, cost.Defaults(d))
		sat := rules.SaturateOptions{IterLimit: 8, NodeLimit: 40_000}
		sat.Cost = func(eg *egraph.EGraph[rules.Data]) extract.CostFunc { return rules.ModelCost(eg, m) }
		prog, err := rules.SaturateModel(context.Background(), g, rws, sat)
		if err != nil {
			return countedProgram{}, fmt.Errorf("saturate %s: %w", name, err)
		}
		lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
		if err != nil {
			return countedProgram{}, fmt.Errorf("lower %s: %w", name, err)
		}
		ks, err := PrintProgramWith(lp, m.Ranked)
		if err != nil {
			return countedProgram{}, fmt.Errorf("print %s: %w", name, err)
		}
		feeds, err := ir.RandomFeeds(g, 7, ir.Typical)
		if err != nil {
			return countedProgram{}, err
		}
		return countedProgram{lp, ks, feeds, m}, nil
	})
	require.NoError(t, err)
	return p
}

// bytesTable prints launches' bytes as a table.
func bytesTable(rows []LaunchBytes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %-30s %10s %10s %7s\n", "launch", "schedule", "model", "counted", "ratio")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-34s %-30s %10.0f %10d %7.3f\n", r.Launch, r.Schedule, r.Model, r.Counted.DRAM(), r.Ratio())
	}
	return b.String()
}

// countPast is the position the decode steps run at.
const countPast = 5

// TestCountedBytesAgreeWithTheModel holds the cost model's bytes to the
// emulation's count: for every launch of the tiny corpus models' decode
// (at runtime position countPast) and prefill programs, compiled for the
// target with L2 scaled to the test shapes (scaledDevice), the DRAM bytes
// the emulation counts through that L2 agree with the bytes the model
// priced the kernel's schedule at, within 5%, but for the known
// disagreements (knownByteDisagreements), which must still disagree as
// they are recorded. Under -short it counts the tiny llama's decode
// program that TestEmulateCorpusPrograms extracts (by the simple
// estimate; its schedules chosen by the model here), sharing its
// saturation; the long test command compiles all six with the model.
func TestCountedBytesAgreeWithTheModel(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	tests := []struct {
		name, real string
		opt        corpus.Options
	}{
		{"tiny-llama:decode", "llama-3-8b", corpus.Options{Seq: 8, Past: -1}},
		{"tiny-llama:prefill", "llama-3-8b", corpus.Options{Seq: 5}},
		{"tiny-qwen2:decode", "qwen2.5-0.5b", corpus.Options{Seq: 8, Past: -1}},
		{"tiny-qwen2:prefill", "qwen2.5-0.5b", corpus.Options{Seq: 5}},
		{"tiny-gpt2:decode", "gpt2", corpus.Options{Seq: 8, Past: -1}},
		{"tiny-gpt2:prefill", "gpt2", corpus.Options{Seq: 5}},
	}
	if testing.Short() {
		tests = []struct {
			name, real string
			opt        corpus.Options
		}{{"tiny-llama:decode", "llama-3-8b", corpus.Options{}}}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := scaledDevice(t, strings.Split(tt.name, ":")[0], tt.real)
			var p countedProgram
			key := tt.name
			if testing.Short() {
				f := corpusFused(t, tt.name)
				m := cost.NewModel(d, cost.Defaults(d))
				ks, err := PrintProgramWith(f.lp, m.Ranked)
				require.NoError(t, err)
				feeds, err := ir.RandomFeeds(f.g, 7, ir.Typical)
				require.NoError(t, err)
				p, key = countedProgram{f.lp, ks, feeds, m}, "short "+tt.name
			} else {
				p = countedCorpus(t, tt.name, tt.opt, d)
			}
			if len(p.lp.Symbols) == 1 {
				at, err := ir.TensorOfInts(ir.I32, ir.Shape{}, countPast)
				require.NoError(t, err)
				p.feeds[p.lp.Symbols[0].Name] = at
			}
			rows, err := CountBytes(context.Background(), p.lp, p.ks, p.feeds, p.model, d.L2Bytes, emu.Options{})
			require.NoError(t, err)
			t.Logf("%s, L2 %d bytes:\n%s", tt.name, d.L2Bytes, bytesTable(rows))
			for _, r := range rows {
				require.True(t, r.HasModel, "launch %s: the model lists no schedule %s", r.Launch, r.Schedule)
				ratio := r.Ratio()
				known, ok := knownByteDisagreements[key+" "+r.Launch]
				if ok {
					assert.InDelta(t, known.ratio, ratio, 0.0005, "launch %s (%s) no longer disagrees as recorded: %s", r.Launch, r.Schedule, known.why)
					continue
				}
				assert.NoError(t, bytesAgree(r))
			}
		})
	}
}

// byteTolerance is how far the counted bytes may stray from the model's.
const byteTolerance = 0.05

// bytesAgree checks a launch's counted DRAM bytes against the model's.
func bytesAgree(r LaunchBytes) error {
	if !r.HasModel || math.Abs(r.Ratio()-1) > byteTolerance {
		return fmt.Errorf("launch %s (%s): the model prices %.0f bytes, the emulation counts %d (ratio %.3f, tolerance %.0f%%)",
			r.Launch, r.Schedule, r.Model, r.Counted.DRAM(), r.Ratio(), 100*byteTolerance)
	}
	return nil
}

// plantedSource is a matrix-vector kernel made to be bad: y = x W^T for x
// [1,K] and w [N,K], a block per column n reading weight row n and then,
// after a barrier, row (n + N/2) % N again (whose product it discards
// unless NaN, so that the compiler keeps the read): every row read twice,
// the second time half the grid later.
const plantedSource = `
extern "C" __global__ void planted(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int K, int N) {
  __shared__ float part[128];
  const float* row = w + (size_t)blockIdx.x * K;
  const float* again = w + (size_t)((blockIdx.x + N / 2) % N) * K;
  float s = 0, u = 0;
  for (int j = threadIdx.x; j < K; j += blockDim.x) s += row[j] * x[j];
  __syncthreads();
  for (int j = threadIdx.x; j < K; j += blockDim.x) u += again[j] * x[j];
  part[threadIdx.x] = s + (u != u ? u : 0.0f);
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (unsigned k = 0; k < blockDim.x; k++) t += part[k];
    y[blockIdx.x] = t;
  }
}
`

// TestCountedBytesCatchAWeightReadTwice plants a regression: a kernel
// computing a matrix-vector product that reads its weight twice. Counted
// through an L2 too small to hold the weight (16 KiB, the weight 64 KiB)
// it moves about twice the bytes the model prices the product at and
// fails the agreement check; through an L2 that holds the weight it
// agrees, as the GPU's L2 would absorb the second read.
func TestCountedBytesCatchAWeightReadTwice(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	const K, N = 256, 64
	b := ir.NewBuilder("kernel")
	x, w := b.Input("$0", ir.F32, 1, K), b.Input("$1", ir.F32, N, K)
	b.Output("out0", b.MatMul(x, b.Permute(w, 1, 0)))
	body, err := b.Build()
	require.NoError(t, err)
	d, err := cost.LookupDevice(countTarget)
	require.NoError(t, err)
	est, err := cost.NewModel(d, cost.Defaults(d)).Kernel(body)
	require.NoError(t, err)
	require.InDelta(t, 4*(K+N*K+N), est.Features.Bytes, 1, "the model prices x, w and y once")
	feeds, err := ir.RandomFeeds(body, 3, ir.Typical)
	require.NoError(t, err)
	bufs := []emu.Buffer{{Bytes: 4 * K, Data: EncodeTensor(feeds["$0"])}, {Bytes: 4 * N * K, Data: EncodeTensor(feeds["$1"])}, {Bytes: 4 * N}}
	kernels := []emu.Kernel{{Name: "planted", Params: []emu.Param{{Name: "x", Type: "const float*"}, {Name: "w", Type: "const float*"}, {Name: "y", Type: "float*"}, {Name: "K", Type: "int"}, {Name: "N", Type: "int"}}}}
	launch := emu.Launch{Kernel: "planted", Grid: [3]int{N, 1, 1}, Block: [3]int{128, 1, 1},
		Args: []emu.Arg{{Buffer: 0}, {Buffer: 1}, {Buffer: 2}, {Int: K, IsInt: true}, {Int: N, IsInt: true}}}
	tests := []struct {
		name  string
		l2    int64
		agree bool
	}{
		{"L2 too small", 16 << 10, false},
		{"L2 holds the weight", 1 << 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, traffic, err := emu.Count(context.Background(), plantedSource, kernels, bufs, []emu.Launch{launch}, emu.Options{}, tt.l2)
			require.NoError(t, err)
			r := LaunchBytes{Launch: "planted", Kernel: "planted", Schedule: est.Schedule, Model: est.Features.Bytes, HasModel: true, Counted: traffic[0]}
			t.Logf("model %.0f bytes, counted %d (ratio %.3f)", r.Model, r.Counted.DRAM(), r.Ratio())
			if !tt.agree {
				assert.Greater(t, r.Ratio(), 1.9, "the weight is read twice")
				assert.Error(t, bytesAgree(r))
				return
			}
			assert.NoError(t, bytesAgree(r))
		})
	}
}

// byteDisagreement is a launch whose counted bytes disagree with the
// model's: the ratio counted/model recorded, and why.
type byteDisagreement struct {
	ratio float64
	why   string
}

// knownByteDisagreements are the launches (program and launch name;
// "short" for the -short program) whose counted bytes disagree with the
// model's, and why.
var knownByteDisagreements = map[string]byteDisagreement{
	// The one-row attention layouts (gpt2, whose heads the flash-decoding
	// layout does not take, and the -short program's simple extraction)
	// read the query columns of a fused QKV output and, at a pinned
	// position, the cache rows up to it; the model prices the fused
	// input and the cache whole.
	"short tiny-llama:decode k4":  {0.7647, attentionWhy},
	"short tiny-llama:decode k11": {0.7647, attentionWhy},
	"tiny-gpt2:decode k5":         {0.7954, attentionWhy},
	"tiny-gpt2:decode k12":        {0.7954, attentionWhy},
	"tiny-gpt2:prefill k4":        {0.6439, attentionWhy},
	"tiny-gpt2:prefill k11":       {0.6439, attentionWhy},
	// DRAM moves whole 32-byte sectors: operands of a few bytes (a
	// position, a token id) or slices not a whole number of sectors (the
	// K and V columns the rotary kernel reads) cost more than their
	// bytes. Tens of bytes a kernel, nothing at real shapes.
	"short tiny-llama:decode prep0": {1.2800, sectorWhy},
	"short tiny-llama:decode prep2": {1.2800, sectorWhy},
	"short tiny-llama:decode k16":   {1.0722, sectorWhy},
	"tiny-llama:decode k3":          {1.1095, sectorWhy},
	"tiny-llama:decode k12":         {1.1095, sectorWhy},
	"tiny-llama:decode k20":         {1.0722, sectorWhy},
	"tiny-llama:prefill prep3":      {1.1520, sectorWhy},
	"tiny-qwen2:decode k3":          {1.0746, sectorWhy},
	"tiny-qwen2:decode k11":         {1.0746, sectorWhy},
	"tiny-qwen2:decode k18":         {1.0722, sectorWhy},
	"tiny-qwen2:prefill prep3":      {1.1520, sectorWhy},
	"tiny-gpt2:decode k0":           {1.1077, sectorWhy},
	"tiny-gpt2:decode k18":          {1.0722, sectorWhy},
	"tiny-gpt2:prefill prep1":       {1.1520, sectorWhy},
	// The preparation that transposes the gate and up weights into one
	// matrix reads a column of the inputs for each output row: 256 lines,
	// more than the scaled L2's 138, so each line is fetched again for
	// the next rows. At real shapes a row's 14,336 lines fit the 50 MiB
	// L2 many times over: L2 scaled by bytes is too small for a working
	// set that scales with one side of the matrix. An artifact of the
	// scaling, in a kernel that runs once at load.
	"short tiny-llama:decode prep3": {4.5, transposeWhy},
	"short tiny-llama:decode prep5": {4.5, transposeWhy},
	"tiny-llama:decode prep2":       {4.5, transposeWhy},
	"tiny-llama:decode prep4":       {4.5, transposeWhy},
	"tiny-llama:prefill prep4":      {4.5, transposeWhy},
	"tiny-llama:prefill prep6":      {4.5, transposeWhy},
	// The matrix-vector kernel over 5 rows: every block re-reads A's rows
	// and the norm's weight, which the model takes from L2 past the
	// first block; the L2 scaled to 17.6 KB drops some of them between
	// blocks (an artifact of the scaling; unconfirmed at real shapes).
	"tiny-llama:prefill k15": {1.0707, scaledL2Why},
}

const (
	attentionWhy = "the model prices the fused QKV output whole (and a pinned position's whole cache); the kernel reads the Q columns and the rows up to the position"
	sectorWhy    = "DRAM moves 32-byte sectors; operands of a few bytes or not whole sectors cost more than their bytes"
	transposeWhy = "a transpose's working set (a line per input row) exceeds the L2 scaled by bytes; at real shapes it fits"
	scaledL2Why  = "activations every block re-reads fall out of the L2 scaled to the test shapes between blocks"
)
