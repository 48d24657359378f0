package rules

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
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

// tileCases are the tile cases in dtype dt.
func tileCases(dt ir.DType) []tileCase {
	return []tileCase{
		{
			name: "split-k rank 2, weight operand",
			build: func(b *ir.Builder) {
				x := b.Input("x", dt, 4, 4096)
				w := b.Weight("w", dt, 6, 4096)
				b.Output("y", b.MatMul(x, b.Transpose(w, 0, 1)))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1024), forbidMatmulK(512)},
			reduction: 4096,
		},
		{
			name: "split-k batched",
			build: func(b *ir.Builder) {
				x := b.Input("x", dt, 2, 3, 2048)
				y := b.Input("y", dt, 2, 2048, 5)
				b.Output("z", b.MatMul(x, y))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1024), forbidMatmulK(512)},
			reduction: 2048,
		},
		{
			name: "split-k llama down projection",
			build: func(b *ir.Builder) {
				x := b.Input("x", dt, 2, 14336)
				w := b.Weight("w", dt, 14336, 3)
				b.Output("y", b.MatMul(x, w))
			},
			applied:   map[string]int{"split-k": 1, "split-k-fine": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidMatmulK(1792), forbidMatmulK(896)},
			reduction: 14336,
		},
		{
			name: "split-k short reduction untouched",
			build: func(b *ir.Builder) {
				b.Output("y", b.MatMul(b.Input("x", dt, 4, 1024), b.Input("w", dt, 1024, 4)))
			},
			applied: map[string]int{"split-k": 0, "split-k-fine": 0},
		},
		{
			name: "two-stage sum of an rms norm",
			build: func(b *ir.Builder) {
				x := b.Input("x", dt, 1, 3, 4096)
				ms := b.Mean(b.Mul(x, x), 2)
				b.Output("y", b.Mul(x, b.Rsqrt(b.Add(ms, b.Scalar(dt, dt.Round(1e-5))))))
			},
			applied:   map[string]int{"split-sum": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidLongSum(4096)},
			reduction: 4096,
		},
		{
			name: "two-stage sum, axis -1",
			build: func(b *ir.Builder) {
				b.Output("y", b.Sum(b.Input("x", dt, 2, 6144), -1))
			},
			applied:   map[string]int{"split-sum": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidLongSum(4096)},
			reduction: 6144,
		},
		{
			name: "sum over a leading axis untouched",
			build: func(b *ir.Builder) {
				b.Output("y", b.Sum(b.Input("x", dt, 3, 4096), 0))
			},
			applied: map[string]int{"split-sum": 0},
		},
		{
			name:      "blocked attention, llama form: GQA, scale, causal mask",
			build:     func(b *ir.Builder) { decomposedAttention(b, dt, 4, 2, 4, 512, 8, 170, 1/math.Sqrt(8), tileLowest(dt)) },
			applied:   map[string]int{"kv-blocked-attention": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(512)},
			reduction: 512,
		},
		{
			name:      "blocked attention, decode: one query, no scale, no mask",
			build:     func(b *ir.Builder) { decomposedAttention(b, dt, 2, 2, 1, 768, 4, 0, 1, 0) },
			applied:   map[string]int{"kv-blocked-attention": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(768)},
			reduction: 768,
		},
		{
			name:    "short keys untouched",
			build:   func(b *ir.Builder) { decomposedAttention(b, dt, 2, 1, 4, 256, 8, 60, 0.25, tileLowest(dt)) },
			applied: map[string]int{"kv-blocked-attention": 0},
		},
		{
			name:    "keys not a multiple of the block untouched",
			build:   func(b *ir.Builder) { decomposedAttention(b, dt, 2, 1, 4, 600, 8, 0, 0.25, 0) },
			applied: map[string]int{"kv-blocked-attention": 0},
		},
		{
			name: "blocked attention over opaque scores and a composite softmax",
			build: func(b *ir.Builder) {
				s := b.Input("scores", dt, 2, 3, 1024)
				v := b.Input("v", dt, 2, 1024, 4)
				b.Output("out", b.MatMul(b.Softmax(s, 2), v))
			},
			applied:   map[string]int{"kv-blocked-softmax": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidOpaqueScores(1024)},
			reduction: 1024,
		},
		{
			name: "blocked composite attention, causal, GQA",
			build: func(b *ir.Builder) {
				q := b.Input("q", dt, 1, 4, 3, 8)
				k := b.Input("k", dt, 1, 2, 512, 8)
				v := b.Input("v", dt, 1, 2, 512, 8)
				b.Output("out", b.Attention(q, k, v, 1/math.Sqrt(8), true, 200))
			},
			applied:   map[string]int{"kv-blocked-attention-op": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(512)},
			reduction: 512,
		},
		{
			name: "blocked composite attention, not causal",
			build: func(b *ir.Builder) {
				q := b.Input("q", dt, 2, 2, 1, 4)
				k := b.Input("k", dt, 2, 2, 1024, 4)
				v := b.Input("v", dt, 2, 2, 1024, 4)
				b.Output("out", b.Attention(q, k, v, 0.5, false, 0))
			},
			applied:   map[string]int{"kv-blocked-attention-op": 1},
			forbid:    []func(*egraph.EGraph[Data], egraph.Node) bool{forbidFullKeys(1024)},
			reduction: 1024,
		},
	}
}

// tileDTypes are the dtypes the tile cases run in.
var tileDTypes = []ir.DType{ir.F32, ir.BF16, ir.F16}

// tileModes are the input values a dtype's cases are checked with: stress
// values (large logits, near-cancellation around 1000) leave f16's range
// in the products of the model itself.
func tileModes(dt ir.DType) []ir.RandomMode {
	if dt == ir.F16 {
		return []ir.RandomMode{ir.Typical}
	}
	return []ir.RandomMode{ir.Typical, ir.Stress}
}

// TestTileRules runs the tile rule set to saturation on small graphs in
// f32, bf16 and f16, checks that each rule applied as often as it should
// (once per tiled term: a tiled term is never tiled again), and compares
// random extractions, the tiled forms forced by forbidding the untiled
// ones, evaluated with every value rounded to its dtype, with the float64
// truth of the original graph under typical and stress inputs (large
// logits), within the allowance of the original graph's own roundings.
func TestTileRules(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	rules, err := Builtin("tile")
	require.NoError(t, err)
	for _, dt := range tileDTypes {
		for _, c := range tileCases(dt) {
			t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
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
					var refs []*roundedRef
					for _, mode := range tileModes(dt) {
						refs = append(refs, newRoundedRef(t, g, uint64(17+i), mode))
					}
					// Fewer extractions in the narrow dtypes, whose forms
					// are f32's.
					sols := 4
					if dt != ir.F32 {
						sols = 2
					}
					for j, sol := range randomSolutions(t, p, sols) {
						back, err := SolutionGraph(&s.eg.Graph, s.g.Name, s.roots, p, sol)
						require.NoError(t, err)
						for _, ref := range refs {
							ref.requireAgree(t, back, c.reduction, fmt.Sprintf("extraction %d", j))
						}
					}
				}
			})
		}
	}
}

// roundedRef is a reference graph's float64 truth on seeded inputs, for
// judging programs that compute its outputs.
type roundedRef struct {
	g     *ir.Graph
	mode  ir.RandomMode
	feeds map[string]*ir.Tensor
	want  *ir.Result
	r     roundings
}

func newRoundedRef(t *testing.T, g *ir.Graph, seed uint64, mode ir.RandomMode) *roundedRef {
	t.Helper()
	feeds, err := ir.RandomFeeds(g, seed, mode)
	require.NoError(t, err)
	want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	for name, w := range want.Outputs {
		for _, x := range w.Float64s() {
			require.False(t, math.IsNaN(x) || math.IsInf(x, 0), "the reference of %s is not finite", name)
		}
	}
	return &roundedRef{g: g, mode: mode, feeds: feeds, want: want, r: roundingsOf(g)}
}

// requireAgree evaluates prog on the reference's inputs with every value
// rounded to its dtype, and compares each output with the truth within
// the allowance of the reference graph's own roundings (the verifier's
// judge).
func (ref *roundedRef) requireAgree(t *testing.T, prog *ir.Graph, reduction int, what string) {
	t.Helper()
	got, err := ir.Eval(context.Background(), prog, ref.feeds, ir.EvalOptions{RoundEach: true})
	require.NoError(t, err)
	for _, o := range ref.g.Outputs {
		mm, err := ref.r.judge(ref.g, o.Value, got.Outputs[o.Name], ref.want.Outputs[o.Name], ref.want.Magnitudes[o.Name], reduction, nil)
		require.NoError(t, err)
		require.Nil(t, mm, "%s of %s (%s, %v inputs), output %s: %v", what, ref.g.Name, ref.g.Node(o.Value).DType, ref.mode, o.Name, mm)
	}
}

// TestTileWithAllSets saturates the tile cases with every rule set (lower
// and fuse build kernels over the tiled terms), in f32, bf16 and f16 in
// turn: the runs must saturate, and the program extracted, every value rounded,
// must still compute the graph within its allowance.
func TestTileWithAllSets(t *testing.T) {
	// Parallel: the package's longest tests, independent of each other,
	// share the machine's cores once the sequential tests are done.
	t.Parallel()
	var rws []*egraph.Rewrite[Data]
	for _, s := range Sets() {
		r, err := SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	for i := range tileCases(ir.F32) {
		// Each case in one of the dtypes, in turn (TestTileRules runs
		// every case in each).
		dt := tileDTypes[i%len(tileDTypes)]
		c := tileCases(dt)[i]
		t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
			b := ir.NewBuilder(c.name)
			c.build(b)
			g, err := b.Build()
			require.NoError(t, err)
			prog, err := Saturate(context.Background(), g, rws, SaturateOptions{IterLimit: 20, NodeLimit: 50_000})
			require.NoError(t, err)
			require.Equal(t, egraph.Saturated, prog.Report.Stop)
			modes := tileModes(dt)
			newRoundedRef(t, g, 5, modes[len(modes)-1]).requireAgree(t, prog.Graph, max(c.reduction, 64), "the program")
		})
	}
}

// Split-K as it was before partials were kept in f32: the partial products
// in the operands' dtype. Planted to show that the verifier rejects it in
// bf16.
func init() {
	RegisterApplier("test_narrow_split_k", narrowSplitK)
}

// narrowSplitK is split-K as it was: the partial matmuls of bf16 operands
// in bf16, summed in bf16.
func narrowSplitK(g *egraph.EGraph[Data], m egraph.Match) (egraph.ClassID, bool) {
	da, db := g.Data(m.Get("?a")), g.Data(m.Get("?b"))
	if !da.Valid() || !db.Valid() || len(da.Shape) < 2 || len(da.Shape) != len(db.Shape) {
		return 0, false
	}
	r := len(da.Shape)
	splits := SplitKFactors(int64(da.Shape[r-1]))
	if len(splits) == 0 {
		return 0, false
	}
	s := ir.Dim(splits[0])
	t := newTileBody()
	a, ok1 := t.arg(g, m.Get("?a"))
	bb, ok2 := t.arg(g, m.Get("?b"))
	if !ok1 || !ok2 {
		return 0, false
	}
	b := t.b
	a2 := tileToFront(b, b.Reshape(a, tileDims(da.Shape, r-1, s, da.Shape[r-1]/s)...), r-1)
	b2 := tileToFront(b, b.Reshape(bb, tileDims(db.Shape, r-2, s, db.Shape[r-2]/s)...), r-2)
	b.Output("out", b.Reshape(b.Sum(b.MatMul(a2, b2), 0), g.Data(m.Root()).Shape...))
	gr, err := b.Build()
	if err != nil {
		return 0, false
	}
	return t.insert(g, gr)
}

// TestVerifyRejectsNarrowPartials: the planted split-K with partials in
// the operands' dtype is rejected in bf16 and passes in f32, where its
// partials are f32 anyway; split-K as it is, checked on the same draws
// (the same seed, left side and condition), passes in both.
func TestVerifyRejectsNarrowPartials(t *testing.T) {
	planted, err := ParseRules("planted.rules", []byte(
		"rule narrow-split-k: (matmul ?a ?b) => @test_narrow_split_k\n"+
			"    if shape(?a)[-1] >= 2048 and not weightonly(?a)\n"), Atom)
	require.NoError(t, err)
	narrow, err := Compile(planted)
	require.NoError(t, err)
	tile, err := Builtin("tile")
	require.NoError(t, err)
	byName := map[string]*Rule{}
	for _, r := range append(tile, narrow...) {
		byName[r.Decl.Name] = r
	}
	for _, tc := range []struct {
		rule      string
		dt        ir.DType
		instances int
		unsound   bool
	}{
		{"narrow-split-k", ir.BF16, 12, true},
		{"narrow-split-k", ir.F32, 8, false},
		{"split-k", ir.BF16, 12, false},
		{"split-k", ir.F32, 8, false},
	} {
		t.Run(tc.rule+"/"+tc.dt.String(), func(t *testing.T) {
			r := byName[tc.rule]
			require.NotNil(t, r)
			n, cx, err := r.Verify(context.Background(), VerifyOptions{Seed: 11, Instances: tc.instances, DTypes: []ir.DType{tc.dt}})
			require.NoError(t, err)
			if tc.unsound {
				require.NotNil(t, cx, "a tiling with %s partials passed (%d instances)", tc.dt, n.Total())
				require.Contains(t, cx.Reason, tc.dt.String()+" ")
				require.Contains(t, cx.String(), "rule "+tc.rule+" is unsound")
				return
			}
			require.Nil(t, cx, "%v", cx)
			require.Equal(t, Drawn{tc.dt: n.Total()}, n)
			require.GreaterOrEqual(t, n.Total(), tc.instances)
		})
	}
}

func TestNarrowPartial(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *ir.Builder) ir.Value
		bad   bool
	}{
		{"bf16 partial products summed", func(b *ir.Builder) ir.Value {
			return b.Sum(b.MatMul(b.Input("a", ir.BF16, 2, 3, 8), b.Input("b", ir.BF16, 2, 8, 4)), 0)
		}, true},
		{"widened after rounding", func(b *ir.Builder) ir.Value {
			p := b.MatMul(b.Input("a", ir.BF16, 2, 3, 8), b.Input("b", ir.BF16, 2, 8, 4))
			return b.Sum(b.Cast(b.Reshape(p, 2, 12), ir.F32), 0)
		}, true},
		{"weighted partial sums", func(b *ir.Builder) ir.Value {
			l := b.Sum(b.Input("x", ir.F16, 2, 3, 8), 2)
			return b.Sum(b.Mul(l, b.Input("w", ir.F16, 2, 3, 1)), 0)
		}, true},
		{"f32 accumulator", func(b *ir.Builder) ir.Value {
			p := b.Apply(ir.OpMatMul, ir.Attrs{DType: ir.F32}, b.Input("a", ir.BF16, 2, 3, 8), b.Input("b", ir.BF16, 2, 8, 4))
			return b.Cast(b.Sum(p, 0), ir.BF16)
		}, false},
		{"a full reduction, then nonlinear", func(b *ir.Builder) ir.Value {
			s := b.MatMul(b.Input("q", ir.BF16, 3, 8), b.Input("k", ir.BF16, 8, 16))
			return b.Sum(b.Exp(s), 1)
		}, false},
		{"one narrow sum", func(b *ir.Builder) ir.Value {
			return b.Sum(b.Input("x", ir.BF16, 4, 8), 1)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ir.NewBuilder(tc.name)
			b.Output("out", tc.build(b))
			g, err := b.Build()
			require.NoError(t, err)
			v, bad := narrowPartial(g)
			require.Equal(t, tc.bad, bad)
			if bad {
				require.Equal(t, ir.OpSum, g.Node(v).Op, "the sum that combines the partials")
			}
		})
	}
}
