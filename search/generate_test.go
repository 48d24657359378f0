package search

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerateAcrossPositions generates tokens greedily with one compiled
// prefill program and one compiled decode program whose position is a
// runtime symbol: the prefill fills the KV caches from a prompt, its
// state goes to the decode program, and decode steps run at positions
// prompt, prompt+1, ... through RunFolder (the folders' kernels.cu under
// the CPU emulation, never compiled again). Every step's logits must be
// the reference interpreter's within the verifier's allowance, and its
// token the reference's; where the reference's top two logits are closer
// than the allowance, both take the reference's token and the step is
// counted. The folders' bytes are the same after every step.
func TestGenerateAcrossPositions(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	withoutNVRTC(t)
	prompt, steps := 5, 32
	models := []string{"tiny-llama", "tiny-gpt2", "tiny-qwen2", "tiny-gpt-oss", "tiny-qwen3-moe"}
	if raceEnabled {
		// Each model costs two compiles, 30 s each under the race
		// detector, which sees the same code paths in a smaller model:
		// tiny-llama with one layer (a config file, as a user brings
		// one; 15 s in all), for 8 steps. (One-layer gpt2 takes 57 s.)
		models, steps = []string{oneLayerLlamaConfig(t)}, 8
	}
	for _, name := range models {
		t.Run(filepath.Base(filepath.Dir(name))+"/"+filepath.Base(name), func(t *testing.T) {
			ctx := context.Background()
			capacity := prompt + steps
			pre := compileFolder(t, name+":prefill", corpus.Options{Seq: prompt, Cache: capacity})
			dec := compileFolder(t, name+":decode", corpus.Options{Seq: capacity, Past: -1})
			require.Len(t, dec.g.Symbols, 1)
			assert.Equal(t, ir.Symbol{Name: corpus.PastSymbol, Lo: 0, Hi: int64(capacity - 1)}, dec.g.Symbols[0])

			weights, err := corpus.RandomWeights(dec.g, 1) // RunFolder's weights for a corpus model
			require.NoError(t, err)
			cfg, err := corpus.EmbeddedConfig(name)
			if filepath.IsAbs(name) {
				cfg, err = corpus.LoadConfig(name)
			}
			require.NoError(t, err)
			ref := maps.Clone(weights)
			ids := make([]int64, prompt)
			for i := range ids {
				ids[i] = int64((i*31 + 3) % cfg.VocabSize)
			}
			in, err := ir.TensorOfInts(ir.I64, ir.Shape{1, ir.Dim(prompt)}, ids...)
			require.NoError(t, err)
			ref["input_ids"] = in
			for _, v := range pre.g.States() {
				n := pre.g.Node(v)
				ref[n.Name] = ir.NewTensor(n.DType, n.Shape) // zeroed, as lum_create leaves states
			}
			got := pre.run(t, ctx, map[string]*ir.Tensor{"input_ids": in})
			want := evalRef(t, ctx, pre.g, ref)
			token, ties := nextToken(t, pre.g, got, want, prompt-1, cfg.VocabSize, "prefill")
			states := stateTensors(pre.g, got)
			maps.Copy(ref, want.States)

			for s := range steps {
				p := prompt + s
				step, err := ir.TensorOfInts(ir.I64, ir.Shape{1, 1}, token)
				require.NoError(t, err)
				at, err := ir.TensorOfInts(ir.I32, ir.Shape{}, int64(p))
				require.NoError(t, err)
				feeds := map[string]*ir.Tensor{"input_ids": step, corpus.PastSymbol: at}
				maps.Copy(feeds, states)
				got := dec.run(t, ctx, feeds)
				ref["input_ids"], ref[corpus.PastSymbol] = step, at
				want := evalRef(t, ctx, dec.g, ref)
				var tie int
				token, tie = nextToken(t, dec.g, got, want, 0, cfg.VocabSize, fmt.Sprintf("decode at past=%d", p))
				ties += tie
				states = stateTensors(dec.g, got)
				maps.Copy(ref, want.States)
			}
			t.Logf("%s: %d tokens generated at positions %d..%d by one decode program; %d near-tie steps took the reference's token", name, steps+1, prompt, prompt+steps-1, ties)
			pre.unchanged(t)
			dec.unchanged(t)
		})
	}
}

// oneLayerLlamaConfig writes oneLayerLlama as a user brings a config
// file, in a folder of its own, and returns its path.
func oneLayerLlamaConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llama", "config.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(oneLayerLlama), 0o644))
	return path
}

// oneLayerLlama is tiny-llama's config with one layer.
const oneLayerLlama = `{
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "max_position_embeddings": 256,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 1,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "vocab_size": 97
}`

// withoutNVRTC leaves NVRTC out of the compilations of the rest of t (the
// package's tests run one at a time): no schedules priced again with its
// resources and no PTX, for tests of what a program computes, which run
// its kernels.cu under the emulation. NVRTC's part of compile and optimize
// is tested by ExampleCompile, TestCompilePagedStep, TestVerify* and the
// command's tests; each compile with it costs tens of seconds of NVRTC
// under the race detector.
func withoutNVRTC(t *testing.T) {
	t.Helper()
	load := loadNVRTC
	loadNVRTC = func() (*nvrtc.Library, error) { return nil, errors.New("left out of this test") }
	t.Cleanup(func() { loadNVRTC = load })
}

// generationFolder is a compiled output folder and the graph it computes.
type generationFolder struct {
	dir    string
	g      *ir.Graph
	digest map[string][32]byte
}

// compileFolder compiles a corpus model (in f32 unless opt says) and
// writes its folder.
func compileFolder(t *testing.T, name string, opt corpus.Options) *generationFolder {
	t.Helper()
	ctx := context.Background()
	if opt.DType == ir.InvalidDType {
		opt.DType = ir.F32
	}
	m, err := LoadModel(name, ModelOptions{Build: opt})
	require.NoError(t, err)
	res, err := Compile(ctx, m, Options{NoVerify: true})
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, res.Write(ctx, dir))
	f := &generationFolder{dir: dir, g: m.Graph, digest: map[string][32]byte{}}
	for _, file := range []string{KernelsFile, "plan.json", "model.cpp"} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		f.digest[file] = sha256.Sum256(data)
	}
	return f
}

// run runs the folder on feeds (by name) through RunFolder and returns its
// outputs and updated states by name.
func (f *generationFolder) run(t *testing.T, ctx context.Context, feeds map[string]*ir.Tensor) map[string]*ir.Tensor {
	t.Helper()
	tmp := t.TempDir()
	in, out := filepath.Join(tmp, "in.safetensors"), filepath.Join(tmp, "out.safetensors")
	require.NoError(t, safetensors.WriteFile(in, feeds, nil))
	require.NoError(t, RunFolder(ctx, f.dir, RunOptions{Inputs: in, Output: out}, nil))
	res, _, err := safetensors.ReadFile(out)
	require.NoError(t, err)
	return res
}

// unchanged checks that the folder's kernels, plan and host library are
// the bytes it was written with: no step compiled anything again.
func (f *generationFolder) unchanged(t *testing.T) {
	t.Helper()
	for file, d := range f.digest {
		data, err := os.ReadFile(filepath.Join(f.dir, file))
		require.NoError(t, err)
		assert.Equal(t, d, sha256.Sum256(data), "%s changed", file)
	}
}

func evalRef(t *testing.T, ctx context.Context, g *ir.Graph, feeds map[string]*ir.Tensor) *ir.Result {
	t.Helper()
	r, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	return r
}

// stateTensors picks the states out of a run's results.
func stateTensors(g *ir.Graph, got map[string]*ir.Tensor) map[string]*ir.Tensor {
	out := map[string]*ir.Tensor{}
	for _, v := range g.States() {
		if s, ok := got[g.Node(v).Name]; ok {
			out[g.Node(v).Name] = s
		}
	}
	return out
}

// nextToken compares the logits of row (a position of the step) with the
// reference's within the allowance, and returns the reference's greedy
// token, checking that the program's is the same unless the reference's
// top two are closer than the allowance (a near tie, counted).
func nextToken(t *testing.T, g *ir.Graph, got map[string]*ir.Tensor, want *ir.Result, row, vocab int, what string) (int64, int) {
	t.Helper()
	o := g.Outputs[0]
	require.Equal(t, "logits", o.Name)
	logits, w, mag := got["logits"], want.Outputs["logits"], want.Magnitudes["logits"]
	require.NotNil(t, logits, what)
	tol := g.Allowance(o.Value, ir.PathEps(g), 1024)
	mm, err := ir.CompareWithin(logits, w, mag, tol)
	require.NoError(t, err)
	require.Nil(t, mm, "%s: logits differ from the reference: %v", what, mm)
	argmax := func(x *ir.Tensor) (best int64, top, second float64) {
		top, second = math.Inf(-1), math.Inf(-1)
		for j := range int64(vocab) {
			v := x.At(int64(row*vocab) + j)
			switch {
			case v > top:
				best, top, second = j, v, top
			case v > second:
				second = v
			}
		}
		return best, top, second
	}
	ref, top, second := argmax(w)
	mine, _, _ := argmax(logits)
	if top-second <= tol*mag.At(int64(row*vocab)+ref) {
		return ref, 1
	}
	require.Equal(t, ref, mine, "%s: the program's greedy token", what)
	return ref, 0
}
