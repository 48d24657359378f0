package search

import (
	"bytes"
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/safetensors"
)

func TestParseInputRange(t *testing.T) {
	tests := []struct {
		in   string
		name string
		want ir.Range
		err  string
	}{
		{"keep=0..1", "keep", ir.Range{Lo: 0, Hi: 1, Meaning: ir.MeaningStated}, ""},
		{"/enc/x=y=-2.5..3e2", "/enc/x=y", ir.Range{Lo: -2.5, Hi: 300, Meaning: ir.MeaningStated}, ""},
		{"keep", "", ir.Range{}, `want NAME=LO..HI, got "keep"`},
		{"=0..1", "", ir.Range{}, `want NAME=LO..HI, got "=0..1"`},
		{"keep=1", "", ir.Range{}, `keep: want NAME=LO..HI, got "keep=1"`},
		{"keep=a..1", "", ir.Range{}, "keep=a..1: LO and HI must be numbers"},
		{"keep=2..1", "", ir.Range{}, "keep=2..1: LO is above HI"},
		{"keep=-inf..1", "", ir.Range{}, "keep=-inf..1: LO and HI must be finite"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			name, r, err := ParseInputRange(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.name, name)
			assert.Equal(t, tt.want, r)
		})
	}
	rs := InputRanges{}
	require.NoError(t, rs.Set("b=1..2"))
	require.NoError(t, rs.Set("a=-1..0.5"))
	assert.Equal(t, "a=-1..0.5,b=1..2", rs.String())
}

// feedGraph has an integer index input, a bf16 input, a state it updates
// and a weight.
func feedGraph(t *testing.T) *ir.Graph {
	b := ir.NewBuilder("feeds")
	ids := b.Input("ids", ir.I64, 2, 3)
	x := b.Input("x", ir.BF16, 3)
	cache := b.State("cache", ir.F32, 3)
	w := b.Weight("w", ir.F32, 5, 3)
	e := b.Gather(w, ids, 0)
	b.Output("y", b.Add(b.Sum(e, 2), b.Cast(x, ir.F32)))
	b.UpdateState(cache, b.Add(cache, b.Cast(x, ir.F32)))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func tensor(t *testing.T, dt ir.DType, shape ir.Shape, v ...float64) *ir.Tensor {
	x, err := ir.TensorOf(dt, shape, v...)
	require.NoError(t, err)
	return x
}

func TestReadInputs(t *testing.T) {
	g := feedGraph(t)
	full := func() map[string]*ir.Tensor {
		return map[string]*ir.Tensor{
			// i32 for an i64 input, f32 for a bf16 one: converted, since
			// every value is exact in the graph's dtype.
			"ids":   tensor(t, ir.I32, ir.Shape{2, 3}, 0, 4, 2, 1, 3, 0),
			"x":     tensor(t, ir.F32, ir.Shape{3}, 1.5, -2, 0.25),
			"cache": tensor(t, ir.F32, ir.Shape{3}, 1, 2, 3),
		}
	}
	tests := []struct {
		name string
		edit func(map[string]*ir.Tensor)
		err  string
	}{
		{"inputs and states", func(map[string]*ir.Tensor) {}, ""},
		{"with a weight", func(m map[string]*ir.Tensor) { m["w"] = tensor(t, ir.F32, ir.Shape{5, 3}, 0.5) }, ""},
		{"missing state", func(m map[string]*ir.Tensor) { delete(m, "cache") }, `no tensor for state "cache" of feeds`},
		{"missing input", func(m map[string]*ir.Tensor) { delete(m, "ids") }, `no tensor for input "ids" of feeds`},
		{"extra name", func(m map[string]*ir.Tensor) { m["attention_mask"] = tensor(t, ir.I64, ir.Shape{3}, 1) },
			`tensor "attention_mask" is no input, state or weight of feeds`},
		{"inexact dtype", func(m map[string]*ir.Tensor) { m["x"] = tensor(t, ir.F32, ir.Shape{3}, 1.5, 1.001, 0) },
			`input "x": want bf16: f32[3] element 1 is 1.0010000467300415, which bf16 does not hold exactly`},
		{"fractional index", func(m map[string]*ir.Tensor) { m["ids"] = tensor(t, ir.F32, ir.Shape{2, 3}, 0, 0.5, 0, 0, 0, 0) },
			`input "ids": want i64: f32[2,3] element 1 is 0.5, which i64 does not hold exactly`},
		{"wrong shape", func(m map[string]*ir.Tensor) { m["cache"] = tensor(t, ir.F32, ir.Shape{4}, 1) },
			`state "cache": shape [4], want [3]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := full()
			tt.edit(file)
			path := filepath.Join(t.TempDir(), "in.safetensors")
			require.NoError(t, safetensors.WriteFile(path, file, nil))
			got, err := ReadInputs(path, g)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				assert.Equal(t, KindInput, KindOf(err))
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(file))
			assert.Equal(t, ir.I64, got["ids"].DType)
			assert.Equal(t, []int64{0, 4, 2, 1, 3, 0}, got["ids"].Int64s())
			assert.Equal(t, ir.BF16, got["x"].DType)
			assert.Equal(t, []float64{1.5, -2, 0.25}, got["x"].Float64s())

			// The file's tensors feed a run; the model's weights fill in
			// what it lacks and random ones nothing.
			own := map[string]*ir.Tensor{"w": tensor(t, ir.F32, ir.Shape{5, 3}, 2)}
			feeds, err := Feeds{Inputs: path}.feed(g, 1, own, ir.OpInput, ir.OpState, ir.OpWeight)
			require.NoError(t, err)
			want := own["w"]
			if file["w"] != nil {
				want = got["w"]
			}
			assert.Equal(t, want.Float64s(), feeds["w"].Float64s())
			assert.Equal(t, got["cache"].Float64s(), feeds["cache"].Float64s())
		})
	}
}

// The results a run writes (writeOutputs) read back (ReadOutputs) and
// compare equal; a value moved beyond its allowance, an extra name, a
// missing output or an inexact dtype is an error naming it.
func TestOutputsRoundTrip(t *testing.T) {
	g := feedGraph(t)
	feeds, err := ir.RandomFeeds(g, 4, ir.Typical)
	require.NoError(t, err)
	res, err := ir.Eval(t.Context(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	results := map[string]*ir.Tensor{"output y": res.Outputs["y"], "state cache": res.States["cache"]}
	path := filepath.Join(t.TempDir(), "out.safetensors")
	require.NoError(t, writeOutputs(path, g, results, map[string]string{"model": "feeds"}))
	want, err := ReadOutputs(path, g)
	require.NoError(t, err)
	require.Equal(t, []string{"output y", "state cache"}, slices.Sorted(maps.Keys(want)))
	c, err := compareOutputs(g, path, results, want, res.Magnitudes)
	require.NoError(t, err)
	assert.Equal(t, 2, c.Values)
	assert.Equal(t, res.Outputs["y"].Len()+3, c.Elements)
	assert.Less(t, c.Worst, 1.0)

	y := res.Outputs["y"]
	moved := tensor(t, y.DType, y.Shape, y.Float64s()...)
	moved.Set(0, y.At(0)*1.01+0.01)
	_, err = compareOutputs(g, path, map[string]*ir.Tensor{"output y": moved, "state cache": res.States["cache"]}, want, res.Magnitudes)
	require.ErrorContains(t, err, "output y differs from "+path+": element 0")

	for _, tt := range []struct {
		name string
		file map[string]*ir.Tensor
		err  string
	}{
		{"extra name", map[string]*ir.Tensor{"y": res.Outputs["y"], "logits": res.Outputs["y"]}, `tensor "logits" is no output or updated state of feeds`},
		{"missing output", map[string]*ir.Tensor{"cache": res.States["cache"]}, `no tensor for output "y" of feeds`},
		{"inexact dtype", map[string]*ir.Tensor{"y": func() *ir.Tensor {
			x := tensor(t, ir.I32, res.Outputs["y"].Shape, 0)
			x.SetInt(4, 1<<25+1)
			return x
		}()}, "output y: want f32: i32[2,3,3] element 4 is 33554433, which f32 does not hold exactly"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "out.safetensors")
			require.NoError(t, safetensors.WriteFile(p, tt.file, nil))
			_, err := ReadOutputs(p, g)
			require.ErrorContains(t, err, tt.err)
			assert.Equal(t, KindInput, KindOf(err))
		})
	}
}

// A reference value beyond f32's finite range compares as f32's infinity
// on the outputs file's path too.
func TestCompareOutputsOverflow(t *testing.T) {
	b := ir.NewBuilder("overflow")
	x := b.Input("x", ir.F32, 2)
	b.Output("y", b.Mul(x, b.Scalar(ir.F32, 0x1p127)))
	g, err := b.Build()
	require.NoError(t, err)
	feeds := map[string]*ir.Tensor{"x": tensor(t, ir.F32, ir.Shape{2}, 4, 0.5)}
	res, err := ir.Eval(t.Context(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	want := map[string]*ir.Tensor{"output y": tensor(t, ir.F32, ir.Shape{2}, math.Inf(1), 0x1p126)}
	_, err = compareOutputs(g, "out.safetensors", map[string]*ir.Tensor{"output y": res.Outputs["y"]}, want, res.Magnitudes)
	require.NoError(t, err, "2^129 is +Inf in f32")
	want["output y"] = tensor(t, ir.F32, ir.Shape{2}, math.MaxFloat32, 0x1p126)
	_, err = compareOutputs(g, "out.safetensors", map[string]*ir.Tensor{"output y": res.Outputs["y"]}, want, res.Magnitudes)
	require.ErrorContains(t, err, "output y differs from out.safetensors: element 0: got +Inf")
}

// Evaluate reads its inputs from a file, saves its outputs, and compares
// them with a file: the outputs it saved pass, a changed one fails.
func TestEvaluateInputsAndOutputs(t *testing.T) {
	g := feedGraph(t)
	m := &Model{Name: "feeds", Graph: g}
	dir := t.TempDir()
	feeds, err := ir.RandomLeavesIn(g, 2, ir.Typical, nil, ir.OpInput, ir.OpState, ir.OpWeight)
	require.NoError(t, err)
	in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	require.NoError(t, safetensors.WriteFile(in, feeds, nil))

	ev, err := Evaluate(t.Context(), m, EvalOptions{Feeds: Feeds{Inputs: in}, SaveOutputs: out}, 0)
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, ev.WriteText(&text))
	assert.Contains(t, text.String(), "(read from "+in+")")
	assert.Contains(t, text.String(), "saved:    "+out+" (1 outputs, 1 states)")
	ref, err := ir.Eval(t.Context(), g, feeds, ir.EvalOptions{})
	require.NoError(t, err)
	assert.Equal(t, ref.Outputs["y"].Float64s(), ev.Result.Outputs["y"].Float64s(), "the file's feeds, weights included")

	ev, err = Evaluate(t.Context(), m, EvalOptions{Feeds: Feeds{Inputs: in, Outputs: out}}, 0)
	require.NoError(t, err)
	require.NotNil(t, ev.Outputs)
	assert.Equal(t, 2, ev.Outputs.Values)

	saved, _, err := safetensors.ReadFile(out)
	require.NoError(t, err)
	saved["y"].Set(1, saved["y"].At(1)+0.5)
	require.NoError(t, safetensors.WriteFile(out, saved, nil))
	_, err = Evaluate(t.Context(), m, EvalOptions{Feeds: Feeds{Inputs: in, Outputs: out}}, 0)
	require.ErrorContains(t, err, "output y differs from "+out+": element 1")

	_, err = Evaluate(t.Context(), m, EvalOptions{Seed: 1, Feeds: Feeds{Ranges: InputRanges{"input_ids": {Lo: 0, Hi: 1}}}}, 0)
	require.ErrorContains(t, err, `--input-range input_ids=0..1: the graph feeds has no input, weight or state "input_ids"`)
	assert.Equal(t, KindOption, KindOf(err))
}

func TestRelativeL2(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name      string
		got, want []float64
		rel       float64
		err       string
	}{
		{"equal", []float64{1, -2}, []float64{1, -2}, 0, ""},
		{"off by a tenth of one element", []float64{3, 4.5}, []float64{3, 4}, 0.1, ""},
		{"matching infinities and NaNs", []float64{inf, nan, 3}, []float64{inf, nan, 4}, 0.25, ""},
		{"an infinity the file lacks", []float64{inf, 1}, []float64{5, 1}, 0, "element 0 is +Inf, the file's 5"},
		{"a finite value where the file is infinite", []float64{1, 2}, []float64{1, -inf}, 0, "element 1 is 2, the file's -Inf"},
		{"a NaN against an infinity", []float64{nan}, []float64{inf}, 0, "element 0 is NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tensor(t, ir.F32, ir.Shape{ir.Dim(len(tt.got))}, tt.got...)
			w := tensor(t, ir.F32, ir.Shape{ir.Dim(len(tt.want))}, tt.want...)
			rel, err := relativeL2(g, w)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.rel, rel, 1e-7)
		})
	}
}

// TestFeedsPackQuantizedWeights: random feeds of a quantized graph pack
// its weights as a checkpoint does, so that every dequantized value is
// finite (random e8m0 and e4m3 bytes would hold NaNs).
func TestFeedsPackQuantizedWeights(t *testing.T) {
	for _, f := range []quant.Format{quant.MXFP4, quant.FP8, quant.AWQ, quant.GPTQ} {
		g, err := corpus.Build("tiny-llama:mlp", corpus.Options{Seq: 2, Weights: f})
		require.NoError(t, err)
		feeds, err := Feeds{}.feed(g, 3, nil, ir.OpInput, ir.OpWeight)
		require.NoError(t, err)
		packed, err := corpus.RandomPackedWeights(g, 3)
		require.NoError(t, err)
		require.NotEmpty(t, packed)
		for name, want := range packed {
			assert.Equal(t, want, feeds[name], "%s %s", f, name)
		}
		r, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{})
		require.NoError(t, err)
		for _, v := range r.Outputs["output"].Float64s() {
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0), f)
		}
	}
}
