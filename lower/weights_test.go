package lower

import (
	"context"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// fromPrepared is prog as a model loaded from its prepared weights runs
// it: no Prep launch, the prepared buffers given like weights.
func fromPrepared(prog *Program) *Program {
	c := *prog
	c.Prep = nil
	c.Buffers = make([]*Buffer, len(prog.Buffers))
	for i, b := range prog.Buffers {
		nb := *b
		if nb.Kind == Prepared {
			nb.Kind = Weight
		}
		c.Buffers[i] = &nb
	}
	return &c
}

// rawPrep runs the Prep launches of prog on feeds in the reference
// interpreter, as Execute does, and returns every buffer's value.
func rawPrep(t *testing.T, prog *Program, feeds map[string]*ir.Tensor) map[int]*ir.Tensor {
	t.Helper()
	vals := map[int]*ir.Tensor{}
	for _, b := range prog.Buffers {
		switch b.Kind {
		case Weight:
			vals[b.ID] = feeds[b.Name]
		case Constant:
			g := &ir.Graph{Name: "constant", Nodes: []*ir.Node{b.Leaf}, Outputs: []ir.Output{{Name: "out", Value: 0}}}
			res, err := ir.Eval(context.Background(), g, nil, ir.EvalOptions{})
			require.NoError(t, err)
			vals[b.ID] = res.Outputs["out"]
		}
	}
	for _, l := range prog.Prep {
		args := make([]*ir.Tensor, len(l.Args))
		for i, a := range l.Args {
			args[i] = vals[a]
		}
		outs, err := ir.EvalKernel(context.Background(), l.Body, args...)
		require.NoError(t, err)
		for i, o := range l.Outs {
			vals[o] = outs[i]
		}
	}
	return vals
}

// runReads is the set of buffers the Run launches read.
func runReads(prog *Program) map[int]bool {
	read := map[int]bool{}
	for _, l := range prog.Run {
		for _, a := range l.Args {
			read[a] = true
		}
	}
	return read
}

// sameValues asserts that got holds exactly want's values.
func sameValues(t *testing.T, want, got *ir.Tensor, what string) {
	t.Helper()
	require.NotNil(t, got, what)
	require.Equal(t, want.DType, got.DType, what)
	require.True(t, want.Shape.Equal(got.Shape), "%s: %v, want %v", what, got.Shape, want.Shape)
	for i := range want.Len() {
		w, g := want.At(i), got.At(i)
		if w != g && !(math.IsNaN(w) && math.IsNaN(g)) {
			require.Failf(t, "values differ", "%s[%d]: %v, want %v", what, i, g, w)
		}
	}
}

// TestPrepareWeights lowers tiny corpus models whose programs prepare
// weights at load (merged QKV and gate/up weights, a causal mask from
// constants, a position embedding gathered by a constant iota), computes
// their prepared weights, and runs the Run launches alone from them, with
// every weight the file leaves out poisoned with NaN: the outputs and
// states match the reference interpreter, as those of the whole program
// from the raw weights do.
func TestPrepareWeights(t *testing.T) {
	cases := []struct {
		model    string
		dtype    ir.DType
		leftOut  []string // weights only Prep launches read
		prepared bool     // the file holds prepared buffers
	}{
		{"tiny-llama:model", ir.F32, nil, true},
		{"tiny-llama:model", ir.BF16, nil, true},
		{"tiny-llama:decode", ir.F16, nil, true},
		{"tiny-gpt2:model", ir.F32, []string{"transformer.wpe.weight"}, true},
	}
	for i, c := range cases {
		t.Run(c.model+"/"+c.dtype.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			g, err := corpus.Build(c.model, corpus.Options{Seq: 4, Past: 2, DType: c.dtype})
			require.NoError(t, err)
			rp, err := rules.SaturateModel(ctx, g, allRewrites(t), rules.SaturateOptions{IterLimit: shortIters(6), NodeLimit: 40_000})
			require.NoError(t, err)
			prog, err := FromExtraction(rp.EGraph, g, rp.Classes, rp.Problem, rp.Solution)
			require.NoError(t, err)
			require.NotEmpty(t, prog.Prep, "the program prepares weights at load")

			weights, err := corpus.RandomWeights(g, uint64(i+1))
			require.NoError(t, err)
			feeds, err := ir.RandomLeaves(g, uint64(i+11), ir.Typical, ir.OpInput, ir.OpState)
			require.NoError(t, err)
			maps.Copy(feeds, weights)

			stored, err := PrepareWeights(ctx, prog, weights)
			require.NoError(t, err)

			// Exactly the Weight and Prepared buffers the run reads.
			read := runReads(prog)
			var want []string
			nPrepared := 0
			for _, b := range prog.Buffers {
				if read[b.ID] && (b.Kind == Weight || b.Kind == Prepared) {
					want = append(want, b.Name)
					if b.Kind == Prepared {
						nPrepared++
					}
					require.Contains(t, stored, b.Name)
					assert.Equal(t, b.DType, stored[b.Name].DType, b.Name)
					assert.True(t, b.Shape.Equal(stored[b.Name].Shape), b.Name)
					if b.Kind == Weight {
						assert.Same(t, weights[b.Name], stored[b.Name], "a weight is passed through")
					}
				}
			}
			assert.ElementsMatch(t, want, slices.Collect(maps.Keys(stored)))
			assert.Equal(t, c.prepared, nPrepared > 0, "%d prepared buffers stored", nPrepared)
			for _, name := range c.leftOut {
				assert.NotContains(t, stored, name)
				assert.Contains(t, weights, name)
			}
			sb, err := StoredBuffers(prog)
			require.NoError(t, err)
			require.Len(t, sb, len(stored))
			for j := 1; j < len(sb); j++ {
				assert.Less(t, sb[j-1].ID, sb[j].ID, "buffer order")
			}

			// Each prepared tensor is what the Prep launches compute from
			// the raw weights, rounded to its dtype as a device stores it
			// (the reference interpreter itself keeps float64).
			raw := rawPrep(t, prog, feeds)
			for _, b := range prog.Buffers {
				if s, ok := stored[b.Name]; ok && b.Kind == Prepared {
					for k := range s.Len() {
						require.Equal(t, b.DType.Round(raw[b.ID].At(k)), s.At(k), "%s[%d]", b.Name, k)
					}
				}
			}

			run := fromPrepared(prog)
			pfeeds := maps.Clone(stored)
			for _, b := range prog.Buffers {
				switch {
				case b.Kind == Input || b.Kind == State:
					pfeeds[b.Name] = feeds[b.Name]
				case b.Kind == Weight && !read[b.ID]:
					poison, err := ir.TensorOf(b.DType, b.Shape, math.NaN())
					require.NoError(t, err)
					pfeeds[b.Name] = poison
				}
			}
			outs, states, err := Execute(ctx, run, pfeeds)
			require.NoError(t, err)

			wantOuts, wantStates, err := Execute(ctx, prog, feeds)
			require.NoError(t, err)
			ref, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			require.Len(t, outs, len(wantOuts))
			require.Len(t, states, len(wantStates))
			for name, w := range ref.Outputs {
				for what, got := range map[string]*ir.Tensor{"from the prepared weights": outs[name], "from the raw weights": wantOuts[name]} {
					mm, err := ir.Compare(got, w, ref.Magnitudes[name], 256)
					require.NoError(t, err)
					assert.Nil(t, mm, "output %s %s: %v", name, what, mm)
				}
			}
			for name, w := range ref.States {
				mm, err := ir.Compare(states[name], w, ref.Magnitudes[name], 256)
				require.NoError(t, err)
				assert.Nil(t, mm, "state %s from the prepared weights: %v", name, mm)
			}
		})
	}
}

// handProgram is a program built by hand with a chain of preparation:
// t4 = (w + v) * iota, where only the run reads w and t4:
//
//	prep0: t3 = w + v        (v is read by no run launch)
//	prep1: t4 = t3 * iota    (t3 feeds only prep1)
//	k0:    y = x * t4 + w
func handProgram(t *testing.T) *Program {
	t.Helper()
	shape := ir.Shape{2, 3}
	body := func(name string, n int, f func(nb *ir.Builder, in []ir.Value) ir.Value) *ir.Graph {
		nb := ir.NewBuilder(name)
		var in []ir.Value
		for i := range n {
			in = append(in, nb.Input("$"+string(rune('0'+i)), ir.F32, shape...))
		}
		nb.Output("out0", f(nb, in))
		g, err := nb.Build()
		require.NoError(t, err)
		return g
	}
	buf := func(id int, kind BufferKind, name string) *Buffer {
		return &Buffer{ID: id, Kind: kind, Name: name, Shape: shape.Clone(), DType: ir.F32, Bytes: 24}
	}
	iota := buf(2, Constant, "t2")
	iota.Leaf = &ir.Node{Op: ir.OpIota, Attrs: ir.Attrs{DType: ir.F32, To: shape.Clone(), Axis: 1}, Shape: shape.Clone(), DType: ir.F32}
	return &Program{
		Name: "hand",
		Buffers: []*Buffer{buf(0, Weight, "w"), buf(1, Weight, "v"), iota, buf(3, Prepared, "t3"), buf(4, Prepared, "t4"),
			buf(5, Input, "x"), buf(6, Output, "y")},
		Prep: []*Launch{
			{Name: "prep0", Body: body("add", 2, func(nb *ir.Builder, in []ir.Value) ir.Value { return nb.Add(in[0], in[1]) }), Args: []int{0, 1}, Outs: []int{3}},
			{Name: "prep1", Body: body("mul", 2, func(nb *ir.Builder, in []ir.Value) ir.Value { return nb.Mul(in[0], in[1]) }), Args: []int{3, 2}, Outs: []int{4}},
		},
		Run: []*Launch{
			{Name: "k0", Body: body("fma", 3, func(nb *ir.Builder, in []ir.Value) ir.Value { return nb.Add(nb.Mul(in[0], in[1]), in[2]) }), Args: []int{5, 4, 0}, Outs: []int{6}},
		},
		Outputs: map[string]int{"y": 6},
		Updates: map[string]int{},
	}
}

// TestPrepareWeightsChain checks the hand-built chain: the stored tensors
// are w (passed through) and t4 (computed), not v nor t3, and t4 holds
// (w + v) * iota exactly.
func TestPrepareWeightsChain(t *testing.T) {
	prog := handProgram(t)
	w, err := ir.TensorOf(ir.F32, ir.Shape{2, 3}, 1.5, -2, 3.25, 0.5, 7, -1)
	require.NoError(t, err)
	v, err := ir.TensorOf(ir.F32, ir.Shape{2, 3}, 0.25, 1, -0.75, 2, -3, 4)
	require.NoError(t, err)
	stored, err := PrepareWeights(context.Background(), prog, map[string]*ir.Tensor{"w": w, "v": v, "unused": w})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"w", "t4"}, slices.Collect(maps.Keys(stored)))
	assert.Same(t, w, stored["w"])
	want, err := ir.TensorOf(ir.F32, ir.Shape{2, 3}, 0, -1, 5, 0, 4, 6)
	require.NoError(t, err)
	sameValues(t, want, stored["t4"], "t4")
	assert.NotNil(t, stored["t4"].F32, "floats in float32 storage")
}

// TestPrepareWeightsErrors: a missing weight, or one of another shape or
// dtype, is an error naming it; so is a weight only the preparation reads.
func TestPrepareWeightsErrors(t *testing.T) {
	ok := func() *ir.Tensor {
		x, err := ir.TensorOf(ir.F32, ir.Shape{2, 3}, 1, 2, 3, 4, 5, 6)
		require.NoError(t, err)
		return x
	}
	f16, err := ir.TensorOf(ir.F16, ir.Shape{2, 3}, 1)
	require.NoError(t, err)
	short := ok()
	short.F64 = short.F64[:5]
	cases := []struct {
		name    string
		weights map[string]*ir.Tensor
		want    string
	}{
		{"missing run weight", map[string]*ir.Tensor{"v": ok()}, "weight w f32[2,3] is missing"},
		{"missing prep weight", map[string]*ir.Tensor{"w": ok()}, "weight v f32[2,3] is missing"},
		{"nil", map[string]*ir.Tensor{"w": nil, "v": ok()}, "weight w f32[2,3] is missing"},
		{"shape", map[string]*ir.Tensor{"w": ok(), "v": must(ir.TensorOf(ir.F32, ir.Shape{3, 2}, 1))}, "weight v is f32[3,2], want f32[2,3]"},
		{"dtype", map[string]*ir.Tensor{"w": f16, "v": ok()}, "weight w is f16[2,3], want f32[2,3]"},
		{"elements", map[string]*ir.Tensor{"w": short, "v": ok()}, "weight w f32[2,3] holds the wrong number of elements"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := PrepareWeights(context.Background(), handProgram(t), c.weights)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "prepared weights of hand: ")
			assert.Contains(t, err.Error(), c.want)
		})
	}

	dup := handProgram(t)
	dup.Buffers[4].Name = "w"
	_, err = StoredBuffers(dup)
	assert.ErrorContains(t, err, "weight w and prepared w share a name")
	_, err = PrepareWeights(context.Background(), dup, map[string]*ir.Tensor{"w": ok(), "v": ok()})
	assert.ErrorContains(t, err, "share a name")
	_, err = WeightsDigest(dup)
	assert.ErrorContains(t, err, "share a name")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = PrepareWeights(ctx, handProgram(t), map[string]*ir.Tensor{"w": ok(), "v": ok()})
	assert.ErrorIs(t, err, context.Canceled)
}

func must(x *ir.Tensor, err error) *ir.Tensor {
	if err != nil {
		panic(err)
	}
	return x
}

// TestWeightsDigest: the digest is stable, and changes with what the
// prepared weights mean (a stored buffer's type, a Prep body, what a Prep
// launch reads) but not with the run's launches.
func TestWeightsDigest(t *testing.T) {
	base, err := WeightsDigest(handProgram(t))
	require.NoError(t, err)
	assert.Len(t, base, 64)
	again, err := WeightsDigest(handProgram(t))
	require.NoError(t, err)
	assert.Equal(t, base, again)

	changes := []struct {
		name   string
		change func(p *Program)
		same   bool
	}{
		{"stored shape", func(p *Program) { p.Buffers[4].Shape = ir.Shape{3, 2} }, false},
		{"stored name", func(p *Program) { p.Buffers[0].Name = "w2" }, false},
		{"prep body", func(p *Program) { p.Prep[0].Body = p.Run[0].Body }, false},
		{"prep args", func(p *Program) { p.Prep[0].Args = []int{1, 0} }, false},
		{"constant", func(p *Program) { p.Buffers[2].Leaf.Attrs.Axis = 0 }, false},
		{"run launch", func(p *Program) { p.Run[0].Name = "k9"; p.Buffers[6].Name = "z" }, true},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			p := handProgram(t)
			c.change(p)
			d, err := WeightsDigest(p)
			require.NoError(t, err)
			if c.same {
				assert.Equal(t, base, d)
			} else {
				assert.NotEqual(t, base, d)
			}
		})
	}
}
