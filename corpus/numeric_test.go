package corpus

import (
	"context"
	"maps"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run the graphs in the reference interpreter. They check the
// builders against themselves (a decode step against the prefill) and
// against the interpreter's composite ops, not the interpreter.

func eval(t *testing.T, g *ir.Graph, feeds map[string]*ir.Tensor) *ir.Result {
	t.Helper()
	r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
	require.NoError(t, err)
	return r
}

// maxAbsDiff compares b with the elements of a from offset on.
func maxAbsDiff(a, b *ir.Tensor, offset int64) float64 {
	d := 0.0
	for i := range b.Len() {
		d = math.Max(d, math.Abs(a.At(i+offset)-b.At(i)))
	}
	return d
}

func withConfig(t *testing.T, base string, edit func(c *Config)) *Config {
	t.Helper()
	c, err := EmbeddedConfig(base)
	require.NoError(t, err)
	edit(c)
	return c
}

// TestDecodeMatchesPrefill decodes a sequence one token at a time through
// the KV caches, starting from caches full of garbage, and compares each
// step's logits with the prefill's logits at that position.
func TestDecodeMatchesPrefill(t *testing.T) {
	tests := []struct {
		name string
		cfg  *Config
		seq  int
	}{
		{"tiny-llama", withConfig(t, "tiny-llama", func(*Config) {}), 6},
		{"tiny-qwen2", withConfig(t, "tiny-qwen2", func(*Config) {}), 6},
		{"tiny-gpt2", withConfig(t, "tiny-gpt2", func(*Config) {}), 6},
		{"tiny-mistral past its window", withConfig(t, "tiny-mistral", func(*Config) {}), 19},
		{"llama3 rope scaling", withConfig(t, "tiny-llama", func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 16}
		}), 5},
		{"linear rope scaling, biases, gelu", withConfig(t, "tiny-llama", func(c *Config) {
			c.RopeScaling = &RopeScaling{Type: "linear", Factor: 2}
			c.QKVBias, c.OutBias, c.MLPBias, c.HiddenAct = true, true, true, ActGELU
		}), 5},
		{"tiny-mixtral", withConfig(t, "tiny-mixtral", func(*Config) {}), 6},
		{"tiny-qwen3-moe", withConfig(t, "tiny-qwen3-moe", func(*Config) {}), 6},
		{"tiny-gpt-oss past its window", withConfig(t, "tiny-gpt-oss", func(*Config) {}), 9},
		{"tiny-gpt-oss, full layer first, truncated YaRN", withConfig(t, "tiny-gpt-oss", func(c *Config) {
			c.LayerTypes = []string{fullAttention, slidingAttention}
			c.RopeScaling.Truncate = true
		}), 9},
	}
	for _, tt := range tests {
		// runtime: one decode graph whose position is the input "past".
		for _, mode := range []struct{ composite, runtime bool }{{false, false}, {true, false}, {false, true}} {
			composite := mode.composite
			if composite && tt.cfg.AttentionSinks {
				continue // refused: the attention op has no sinks
			}
			pre, err := BuildConfig("prefill", tt.cfg, "model", Options{Seq: tt.seq, Composite: composite})
			require.NoError(t, err)
			feeds, err := RandomWeights(pre, 7)
			require.NoError(t, err)
			ids := make([]float64, tt.seq)
			for i := range ids {
				ids[i] = float64((i*37 + 5) % tt.cfg.VocabSize)
			}
			feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, ir.Dim(tt.seq)}, ids...)
			require.NoError(t, err)
			want := eval(t, pre, feeds).Outputs["logits"]

			capacity := tt.seq + 3
			caches := map[string]*ir.Tensor{}
			worst := 0.0
			var once *ir.Graph
			if mode.runtime {
				once, err = BuildConfig("decode", tt.cfg, "decode", Options{Seq: capacity, Past: -1})
				require.NoError(t, err)
				require.Len(t, once.Symbols, 1)
			}
			for p := range tt.seq {
				g := once
				if g == nil {
					g, err = BuildConfig("decode", tt.cfg, "decode", Options{Seq: capacity, Past: p, Composite: composite})
					require.NoError(t, err)
				} else {
					feeds["past"], err = ir.TensorOfInts(ir.I32, ir.Shape{}, int64(p))
					require.NoError(t, err)
				}
				feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, 1}, ids[p])
				require.NoError(t, err)
				for _, v := range g.States() {
					n := g.Node(v)
					if c, ok := caches[n.Name]; ok {
						feeds[n.Name] = c
						continue
					}
					feeds[n.Name], err = ir.TensorOf(n.DType, n.Shape, 1000) // never attended
					require.NoError(t, err)
				}
				r := eval(t, g, feeds)
				caches = r.States
				worst = math.Max(worst, maxAbsDiff(want, r.Outputs["logits"], int64(p*tt.cfg.VocabSize)))
			}
			// As in TestPrefillThenDecode, the runtime step's composite
			// attention rounds in another order, which q/k norms show.
			tol := 1e-9
			if mode.runtime && tt.cfg.QKNorm {
				tol = f32Tol
			}
			assert.Less(t, worst, tol, "%s %+v", tt.name, mode)
		}
	}
}

// TestCompositeMatchesDecomposed compares the decomposed graphs with the
// interpreter's composite ops.
func TestCompositeMatchesDecomposed(t *testing.T) {
	for _, name := range []string{"tiny-llama:layer", "tiny-qwen2:layer", "tiny-mistral:layer", "tiny-gpt2:block", "tiny-llama:softmax",
		"tiny-mixtral:layer", "tiny-qwen3-moe:layer", "tiny-gpt-oss:mlp"} {
		for _, seq := range []int{1, 7} {
			a, err := Build(name, Options{Seq: seq, Batch: 2})
			require.NoError(t, err)
			b, err := Build(name, Options{Seq: seq, Batch: 2, Composite: true})
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(a, 3, ir.Typical)
			require.NoError(t, err)
			w, err := RandomWeights(a, 3)
			require.NoError(t, err)
			for k, v := range w {
				feeds[k] = v
			}
			ra, rb := eval(t, a, feeds), eval(t, b, feeds)
			for k, v := range ra.Outputs {
				// Epsilons differ by their f32 rounding.
				assert.Less(t, maxAbsDiff(v, rb.Outputs[k], 0), 1e-6, "%s seq %d", name, seq)
			}
		}
	}
}

// TestBlocksByHand checks the rotary embedding, the activations and the
// gated MLP against direct computations.
func TestBlocksByHand(t *testing.T) {
	c, err := EmbeddedConfig("tiny-llama")
	require.NoError(t, err)

	t.Run("rotary", func(t *testing.T) {
		const seq = 3
		g, err := Build("tiny-llama:rotary", Options{Seq: seq})
		require.NoError(t, err)
		feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
		require.NoError(t, err)
		r := eval(t, g, feeds)
		q, got := feeds["q"], r.Outputs["q_embed"]
		d := c.HeadDim
		for h := range c.NumAttentionHeads {
			for s := range seq {
				row := int64((h*seq + s) * d)
				for i := range d {
					j := i % (d / 2)
					angle := float64(s) / math.Pow(c.RopeTheta, float64(2*j)/float64(d))
					var rot float64 // rotate_half: concat(-x2, x1)
					if i < d/2 {
						rot = -q.At(row + int64(i+d/2))
					} else {
						rot = q.At(row + int64(i-d/2))
					}
					want := q.At(row+int64(i))*math.Cos(angle) + rot*math.Sin(angle)
					assert.InDelta(t, want, got.At(row+int64(i)), 1e-5)
				}
			}
		}
	})

	t.Run("activations", func(t *testing.T) {
		for _, tt := range []struct {
			act string
			f   func(x float64) float64
		}{
			{ActSiLU, func(x float64) float64 { return x / (1 + math.Exp(-x)) }},
			{ActGELU, func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }},
			{ActGELUTanh, func(x float64) float64 {
				return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
			}},
			{ActReLU, func(x float64) float64 { return max(x, 0) }},
		} {
			cfg := withConfig(t, "tiny-llama", func(c *Config) { c.HiddenAct = tt.act })
			g, err := BuildConfig("act", cfg, activationKinds[tt.act], Options{Seq: 2})
			require.NoError(t, err)
			// Values of both signs, large and small (RandomFeeds keeps a pow
			// base positive).
			n := g.Node(g.Inputs()[0])
			vals := make([]float64, n.Shape.NumElements())
			for i := range vals {
				vals[i] = float64(i%41-20) * 0.37
			}
			x, err := ir.TensorOf(ir.F32, n.Shape, vals...)
			require.NoError(t, err)
			y := eval(t, g, map[string]*ir.Tensor{"x": x}).Outputs["output"]
			for i := range x.Len() {
				want := tt.f(x.At(i))
				assert.InDelta(t, want, y.At(i), 1e-6*(1+math.Abs(want)), "%s(%v)", tt.act, x.At(i))
			}
		}
	})

	t.Run("swiglu mlp", func(t *testing.T) {
		g, err := Build("tiny-llama:mlp", Options{Seq: 2})
		require.NoError(t, err)
		feeds, err := ir.RandomFeeds(g, 8, ir.Typical)
		require.NoError(t, err)
		w, err := RandomWeights(g, 8)
		require.NoError(t, err)
		for k, v := range w {
			feeds[k] = v
		}
		y := eval(t, g, feeds).Outputs["output"]
		x := feeds["hidden_states"]
		gate, up, down := w["model.layers.0.mlp.gate_proj.weight"], w["model.layers.0.mlp.up_proj.weight"], w["model.layers.0.mlp.down_proj.weight"]
		h, in := c.HiddenSize, c.IntermediateSize
		for row := range 2 {
			act := make([]float64, in)
			for o := range in {
				var gs, us float64
				for k := range h {
					xv := x.At(int64(row*h + k))
					gs += xv * gate.At(int64(o*h+k)) // nn.Linear: weight [out, in]
					us += xv * up.At(int64(o*h+k))
				}
				act[o] = gs / (1 + math.Exp(-gs)) * us
			}
			for o := range h {
				var want float64
				for k := range in {
					want += act[k] * down.At(int64(o*in+k))
				}
				assert.InDelta(t, want, y.At(int64(row*h+o)), 1e-9)
			}
		}
	})
}

// BenchmarkLlama3LayerEval evaluates llama-3-8b:layer at sequence length
// 128 in the reference interpreter, with seeded random weights (the bar:
// under 10 s on a 2-core machine). Weight generation is not timed.
func BenchmarkLlama3LayerEval(b *testing.B) {
	g, err := Build("llama-3-8b:layer", Options{Seq: 128})
	if err != nil {
		b.Fatal(err)
	}
	feeds, err := RandomWeights(g, 1)
	if err != nil {
		b.Fatal(err)
	}
	inputs, err := ir.RandomLeaves(g, 1, ir.Typical, ir.OpInput)
	if err != nil {
		b.Fatal(err)
	}
	maps.Copy(feeds, inputs)
	b.ResetTimer()
	for range b.N {
		if _, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/eval")
}

// TestPrefillThenDecode hands the prefill's caches to the decode step with
// a runtime position, which goes on from the prompt's end: each step's
// logits equal the whole model's at that position.
func TestPrefillThenDecode(t *testing.T) {
	for _, name := range []string{"tiny-llama", "tiny-qwen2", "tiny-gpt2", "tiny-mistral", "tiny-mixtral", "tiny-qwen3-moe", "tiny-gpt-oss"} {
		cfg, err := EmbeddedConfig(name)
		require.NoError(t, err)
		const prompt, total = 3, 20 // past tiny-mistral's sliding window of 16 (and tiny-gpt-oss's of 4)
		whole, err := BuildConfig(name, cfg, "model", Options{Seq: total})
		require.NoError(t, err)
		feeds, err := RandomWeights(whole, 11)
		require.NoError(t, err)
		ids := make([]float64, total)
		for i := range ids {
			ids[i] = float64((i*53 + 7) % cfg.VocabSize)
		}
		feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, total}, ids...)
		require.NoError(t, err)
		want := eval(t, whole, feeds).Outputs["logits"]

		pre, err := BuildConfig(name, cfg, "prefill", Options{Seq: prompt, Cache: total})
		require.NoError(t, err)
		dec, err := BuildConfig(name, cfg, "decode", Options{Seq: total, Past: -1})
		require.NoError(t, err)
		require.Equal(t, len(pre.States()), len(dec.States()))
		for i, v := range pre.States() {
			assert.Equal(t, pre.Node(v).Shape, dec.Node(dec.States()[i]).Shape, "the prefill's cache is the decode step's")
		}
		feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, prompt}, ids[:prompt]...)
		require.NoError(t, err)
		for _, v := range pre.States() {
			n := pre.Node(v)
			feeds[n.Name], err = ir.TensorOf(n.DType, n.Shape, 1000) // never attended
			require.NoError(t, err)
		}
		r := eval(t, pre, feeds)
		assert.Less(t, maxAbsDiff(want, r.Outputs["logits"], 0), 1e-9, "%s prefill", name)
		maps.Copy(feeds, r.States)
		// The decode step's attention is the composite op, which rounds
		// its f32 results in another order than the prefill's
		// decomposition. Qwen3's q/k norms make the scores O(1) rather
		// than O(0.01), where that shows (3e-9 seen): f32's allowance.
		tol := 1e-9
		if cfg.QKNorm {
			tol = f32Tol
		}
		for p := prompt; p < total; p++ {
			feeds["input_ids"], err = ir.TensorOf(ir.I64, ir.Shape{1, 1}, ids[p])
			require.NoError(t, err)
			feeds["past"], err = ir.TensorOfInts(ir.I32, ir.Shape{}, int64(p))
			require.NoError(t, err)
			r := eval(t, dec, feeds)
			maps.Copy(feeds, r.States)
			assert.Less(t, maxAbsDiff(want, r.Outputs["logits"], int64(p*cfg.VocabSize)), tol, "%s decode at %d", name, p)
		}
	}
}
