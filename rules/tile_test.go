package rules

import (
	"context"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/require"
)

func TestTileFactors(t *testing.T) {
	for _, c := range []struct {
		k    int64
		want []int64
	}{
		{1024, nil}, {2047, nil}, {2048, []int64{2, 4}}, {3072, []int64{2, 4}}, {4096, []int64{4, 8}},
		{14336, []int64{8, 16}}, {2050, []int64{2}}, {2049, nil},
	} {
		require.Equal(t, c.want, SplitKFactors(c.k), "split-K of %d", c.k)
		for _, s := range c.want {
			require.Zero(t, c.k%s)
			require.GreaterOrEqual(t, c.k/s, int64(SplitKChunkMin))
			require.Less(t, c.k/s, int64(SplitKMin), "a chunk of %d would be split again", c.k)
		}
	}
	for _, c := range []struct{ k, want int64 }{
		{2048, 0}, {4095, 0}, {4096, 4}, {6144, 8}, {14336, 16}, {4097, 0}, {768 * 8, 8},
	} {
		require.Equal(t, c.want, SplitSumFactor(c.k), "split sum of %d", c.k)
	}
	for _, c := range []struct{ t, want int64 }{
		{256, 0}, {511, 0}, {512, 2}, {768, 3}, {600, 0}, {1024, 4}, {16384, 64}, {32768, 64}, {256 * 65, 65},
	} {
		require.Equal(t, c.want, KVBlocks(c.t), "key blocks of %d", c.t)
	}
}

// tileCase is a graph the tile rules should (or should not) rewrite.
type tileCase struct {
	name  string
	build func(b *ir.Builder)
	// applied is how often each tile rule must apply, saturated.
	applied map[string]int
	// forbid picks, per extraction group, the nodes an extraction may not
	// use (the untiled forms, or the other split), so that the group's
	// random extractions all hold the tiled form under test.
	forbid []func(g *egraph.EGraph[Data], n egraph.Node) bool
	// reduction is the reduction length given to ir.Compare.
	reduction int
}

// opNode returns n's ir op and whether n is a tensor op.
func opNode(n egraph.Node) (ir.Op, bool) { return OpOf(n.Op) }

// forbidMatmulK forbids matmuls whose reduction is not k.
func forbidMatmulK(k ir.Dim) func(g *egraph.EGraph[Data], n egraph.Node) bool {
	return func(g *egraph.EGraph[Data], n egraph.Node) bool {
		op, ok := opNode(n)
		if !ok || op != ir.OpMatMul {
			return false
		}
		s := g.Data(n.Children[0]).Shape
		return s[len(s)-1] != k
	}
}

// forbidLongSum forbids sums over a last axis of at least n.
func forbidLongSum(n ir.Dim) func(g *egraph.EGraph[Data], nd egraph.Node) bool {
	return func(g *egraph.EGraph[Data], nd egraph.Node) bool {
		op, ok := opNode(nd)
		if !ok || op != ir.OpSum {
			return false
		}
		s := g.Data(nd.Children[0]).Shape
		a, _ := Attrs(nd.Payload)
		return (a.Axis == len(s)-1 || a.Axis == -1) && s[len(s)-1] >= n
	}
}

// forbidFullKeys forbids the untiled attention: the attention and softmax
// ops, and matmuls that produce or reduce the whole key axis t (the scores
// q k^T and the product p v), so that extractions take the blocked form
// with its scores recomputed per block.
func forbidFullKeys(t ir.Dim) func(g *egraph.EGraph[Data], n egraph.Node) bool {
	return func(g *egraph.EGraph[Data], n egraph.Node) bool {
		op, ok := opNode(n)
		switch {
		case !ok:
			return false
		case op == ir.OpAttention, op == ir.OpSoftmax:
			return true
		case op != ir.OpMatMul:
			return false
		}
		a, out := g.Data(n.Children[0]).Shape, g.Data(n.Children[1]).Shape
		return a[len(a)-1] == t || out[len(out)-1] == t
	}
}

// forbidOpaqueScores is forbidFullKeys for scores that come from outside:
// only the product with v is forbidden.
func forbidOpaqueScores(t ir.Dim) func(g *egraph.EGraph[Data], n egraph.Node) bool {
	return func(g *egraph.EGraph[Data], n egraph.Node) bool {
		op, ok := opNode(n)
		if !ok || op == ir.OpSoftmax {
			return ok
		}
		if op != ir.OpMatMul {
			return false
		}
		a := g.Data(n.Children[0]).Shape
		return a[len(a)-1] == t
	}
}

// decomposedAttention builds softmax(q k^T * scale + mask) v as the corpus
// builders and exporters do (repeat_kv by views, a decomposed softmax),
// with queries at positions 0, stride, 2*stride, ... for the causal mask
// (stride 0: no mask), so that some rows see no key of a later block.
func decomposedAttention(b *ir.Builder, heads, kvHeads, s, t, d int, stride int64, scale float64) {
	q := b.Input("q", ir.F32, 1, ir.Dim(heads), ir.Dim(s), ir.Dim(d))
	k := b.Input("k", ir.F32, 1, ir.Dim(kvHeads), ir.Dim(t), ir.Dim(d))
	v := b.Input("v", ir.F32, 1, ir.Dim(kvHeads), ir.Dim(t), ir.Dim(d))
	if n := heads / kvHeads; n > 1 {
		rep := func(x ir.Value) ir.Value {
			x = b.Reshape(x, 1, ir.Dim(kvHeads), 1, ir.Dim(t), ir.Dim(d))
			x = b.Expand(x, 1, ir.Dim(kvHeads), ir.Dim(n), ir.Dim(t), ir.Dim(d))
			return b.Reshape(x, 1, ir.Dim(heads), ir.Dim(t), ir.Dim(d))
		}
		k, v = rep(k), rep(v)
	}
	sc := b.MatMul(q, b.Transpose(k, 2, 3))
	if scale != 1 {
		sc = b.Mul(sc, b.Scalar(ir.F32, ir.F32.Round(scale)))
	}
	if stride > 0 {
		shape := ir.Shape{ir.Dim(s), ir.Dim(t)}
		pos := b.Mul(b.Iota(ir.I64, shape, 0), b.Scalar(ir.I64, float64(stride)))
		see := b.Binary(ir.OpGe, b.Sub(pos, b.Iota(ir.I64, shape, 1)), b.Scalar(ir.I64, 0))
		sc = b.Add(sc, b.Where(see, b.Scalar(ir.F32, 0), b.Scalar(ir.F32, -math.MaxFloat32)))
	}
	ex := b.Exp(b.Sub(sc, b.ReduceMax(sc, 3)))
	b.Output("out", b.MatMul(b.Div(ex, b.Sum(ex, 3)), v))
}

func tileCases() []tileCase {
	return []tileCase{
		{
			name: "split-k rank 2, weight operand",
			build: func(b *ir.Builder) {
				x := b.Input("x", ir.F32, 4, 4096)
				w := b.Weight("w", ir.F32, 6, 4096)
				b.Output("y", b.MatMul(x, b.Transpose(w, 0, 1)))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1024), forbidMatmulK(512)},
			reduction: 4096,
		},
		{
			name: "split-k batched",
			build: func(b *ir.Builder) {
				x := b.Input("x", ir.F32, 2, 3, 2048)
				y := b.Input("y", ir.F32, 2, 2048, 5)
				b.Output("z", b.MatMul(x, y))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1024), forbidMatmulK(512)},
			reduction: 2048,
		},
		{
			name: "split-k llama down projection",
			build: func(b *ir.Builder) {
				x := b.Input("x", ir.F32, 2, 14336)
				w := b.Weight("w", ir.F32, 14336, 3)
				b.Output("y", b.MatMul(x, w))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1792), forbidMatmulK(896)},
			reduction: 14336,
		},
		{
			name: "split-k short reduction untouched",
			build: func(b *ir.Builder) {
				b.Output("y", b.MatMul(b.Input("x", ir.F32, 4, 1024), b.Input("w", ir.F32, 1024, 4)))
			},
			applied: map[string]int{"split-k": 0, "split-k-fine": 0},
		},
		{
			name: "two-stage sum of an rms norm",
			build: func(b *ir.Builder) {
				x := b.Input("x", ir.F32, 1, 3, 4096)
				ms := b.Mean(b.Mul(x, x), 2)
				b.Output("y", b.Mul(x, b.Rsqrt(b.Add(ms, b.Scalar(ir.F32, ir.F32.Round(1e-5))))))
			},
			applied:   map[string]int{"split-sum": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidLongSum(4096)},
			reduction: 4096,
		},
		{
			name: "two-stage sum, axis -1",
			build: func(b *ir.Builder) {
				b.Output("y", b.Sum(b.Input("x", ir.F32, 2, 6144), -1))
			},
			applied:   map[string]int{"split-sum": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidLongSum(4096)},
			reduction: 6144,
		},
		{
			name: "sum over a leading axis untouched",
			build: func(b *ir.Builder) {
				b.Output("y", b.Sum(b.Input("x", ir.F32, 3, 4096), 0))
			},
			applied: map[string]int{"split-sum": 0},
		},
		{
			name:      "blocked attention, llama form: GQA, scale, causal mask",
			build:     func(b *ir.Builder) { decomposedAttention(b, 4, 2, 4, 512, 8, 170, 1/math.Sqrt(8)) },
			applied:   map[string]int{"kv-blocked-attention": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(512)},
			reduction: 512,
		},
		{
			name:      "blocked attention, decode: one query, no scale, no mask",
			build:     func(b *ir.Builder) { decomposedAttention(b, 2, 2, 1, 768, 4, 0, 1) },
			applied:   map[string]int{"kv-blocked-attention": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(768)},
			reduction: 768,
		},
		{
			name:    "short keys untouched",
			build:   func(b *ir.Builder) { decomposedAttention(b, 2, 1, 4, 256, 8, 60, 0.25) },
			applied: map[string]int{"kv-blocked-attention": 0},
		},
		{
			name:    "keys not a multiple of the block untouched",
			build:   func(b *ir.Builder) { decomposedAttention(b, 2, 1, 4, 600, 8, 0, 0.25) },
			applied: map[string]int{"kv-blocked-attention": 0},
		},
		{
			name: "blocked attention over opaque scores and a composite softmax",
			build: func(b *ir.Builder) {
				s := b.Input("scores", ir.F32, 2, 3, 1024)
				v := b.Input("v", ir.F32, 2, 1024, 4)
				b.Output("out", b.MatMul(b.Softmax(s, 2), v))
			},
			applied:   map[string]int{"kv-blocked-softmax": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidOpaqueScores(1024)},
			reduction: 1024,
		},
		{
			name: "blocked composite attention, causal, GQA",
			build: func(b *ir.Builder) {
				q := b.Input("q", ir.F32, 1, 4, 3, 8)
				k := b.Input("k", ir.F32, 1, 2, 512, 8)
				v := b.Input("v", ir.F32, 1, 2, 512, 8)
				b.Output("out", b.Attention(q, k, v, 1/math.Sqrt(8), true, 200))
			},
			applied:   map[string]int{"kv-blocked-attention-op": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(512)},
			reduction: 512,
		},
		{
			name: "blocked composite attention, not causal",
			build: func(b *ir.Builder) {
				q := b.Input("q", ir.F32, 2, 2, 1, 4)
				k := b.Input("k", ir.F32, 2, 2, 1024, 4)
				v := b.Input("v", ir.F32, 2, 2, 1024, 4)
				b.Output("out", b.Attention(q, k, v, 0.5, false, 0))
			},
			applied:   map[string]int{"kv-blocked-attention-op": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(1024)},
			reduction: 1024,
		},
	}
}

// TestTileRules runs the tile rule set to saturation on small graphs, checks
// that each rule applied as often as it should (once per tiled term: a
// tiled term is never tiled again), and compares random extractions, the
// tiled forms forced by forbidding the untiled ones, with the original
// graph under typical and stress inputs (large logits).
func TestTileRules(t *testing.T) {
	rules, err := Builtin("tile")
	require.NoError(t, err)
	for _, c := range tileCases() {
		t.Run(c.name, func(t *testing.T) {
			b := ir.NewBuilder(c.name)
			c.build(b)
			g, err := b.Build()
			require.NoError(t, err)
			eg, an := NewEGraph(false)
			classes, err := AddGraph(eg, g)
			require.NoError(t, err)
			r := egraph.Runner[Data]{IterLimit: 10, NodeLimit: 10_000}
			rep, err := r.Run(context.Background(), eg, Rewrites(rules))
			require.NoError(t, err)
			require.Empty(t, an.Conflicts())
			require.Equal(t, egraph.Saturated, rep.Stop)
			applied := map[string]int{}
			for _, st := range RuleStats(rep) {
				applied[st.Name] = st.Applied
			}
			for name, n := range c.applied {
				require.Equal(t, n, applied[name], "applications of %s", name)
			}
			s := &saturated{g: g, eg: eg, roots: GraphRoots(g, classes), report: rep}
			for i, forbid := range c.forbid {
				p := s.problem(t, func(gr *egraph.Graph, id egraph.NodeID) float64 {
					if !eg.Data(gr.NodeClass(id)).Valid() || forbid(eg, gr.Node(id)) {
						return math.Inf(1)
					}
					return 1
				})
				sols := randomSolutions(t, p, 4)
				for _, mode := range []ir.RandomMode{ir.Typical, ir.Stress} {
					requireTileAgree(t, s, p, sols, uint64(17+i), mode, c.reduction)
				}
			}
		})
	}
}

// requireTileAgree is requireAgree with a choice of input values.
func requireTileAgree(t *testing.T, s *saturated, p *extract.Problem, sols []*extract.Solution, seed uint64, mode ir.RandomMode, reduction int) {
	t.Helper()
	feeds, err := ir.RandomFeeds(s.g, seed, mode)
	require.NoError(t, err)
	want, err := ir.Eval(context.Background(), s.g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	for i, sol := range sols {
		back, err := SolutionGraph(&s.eg.Graph, s.g.Name, s.roots, p, sol)
		require.NoError(t, err)
		got, err := ir.Eval(context.Background(), back, feeds, ir.EvalOptions{})
		require.NoError(t, err)
		for out, w := range want.Outputs {
			for _, x := range w.Float64s() {
				require.False(t, math.IsNaN(x) || math.IsInf(x, 0), "the reference of %s is not finite", out)
			}
			mm, err := ir.Compare(got.Outputs[out], w, want.Magnitudes[out], reduction)
			require.NoError(t, err)
			require.Nil(t, mm, "extraction %d of %s (%v inputs), output %s: %v", i, s.g.Name, mode, out, mm)
		}
	}
}

// TestTileWithAllSets saturates the tile cases with every rule set (lower
// and fuse build kernels over the tiled terms): the runs must saturate, and
// the program extracted must still compute the graph.
func TestTileWithAllSets(t *testing.T) {
	var rws []*egraph.Rewrite[Data]
	for _, s := range Sets() {
		r, err := SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	for _, c := range tileCases() {
		t.Run(c.name, func(t *testing.T) {
			b := ir.NewBuilder(c.name)
			c.build(b)
			g, err := b.Build()
			require.NoError(t, err)
			prog, err := Saturate(context.Background(), g, rws, SaturateOptions{IterLimit: 20, NodeLimit: 50_000})
			require.NoError(t, err)
			require.Equal(t, egraph.Saturated, prog.Report.Stop)
			feeds, err := ir.RandomFeeds(g, 5, ir.Stress)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			got, err := ir.Eval(context.Background(), prog.Graph, feeds, ir.EvalOptions{})
			require.NoError(t, err)
			for out, w := range want.Outputs {
				mm, err := ir.Compare(got.Outputs[out], w, want.Magnitudes[out], max(c.reduction, 64))
				require.NoError(t, err)
				require.Nil(t, mm, "output %s: %v", out, mm)
			}
		})
	}
}
