package rules

import (
	"context"
	"math"
	"testing"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/stretchr/testify/require"
)

// The verifier cannot check Go appliers, so each applier of the algebra
// set is checked here: a small graph goes into an e-graph, the one rule
// runs, and extractions of the result (random ones, and one that prefers
// the nodes the rule added) must compute what the graph computes, in the
// reference interpreter on random non-zero values.

// applierCase is a graph built for one rule of algebra.rules.
type applierCase struct {
	name  string
	build func(b *ir.Builder) ir.Value // the output
	// none says the rule must not fire (its applier or condition refuses).
	none bool
}

// algebraRule returns the rewrites of one built-in algebra rule.
func algebraRule(t *testing.T, name string) []*egraph.Rewrite[Data] {
	t.Helper()
	rs, err := Builtin("algebra")
	require.NoError(t, err)
	for _, r := range rs {
		if r.Decl.Name == name {
			return r.Rewrites
		}
	}
	t.Fatalf("no algebra rule %s", name)
	return nil
}

// checkApplier runs rule on each case's graph and compares extractions
// with the graph. It returns each case's saturated e-graph.
func checkApplier(t *testing.T, rule string, cases []applierCase) map[string]*saturated {
	t.Helper()
	return checkApplierRewrites(t, rule, algebraRule(t, rule), cases)
}

// compileTestRule compiles one rule written for a test.
func compileTestRule(t *testing.T, src string) []*egraph.Rewrite[Data] {
	t.Helper()
	f, err := ParseRules("test.rules", []byte(src), Atom)
	require.NoError(t, err)
	rs, err := Compile(f)
	require.NoError(t, err)
	return Rewrites(rs)
}

// checkApplierRewrites is checkApplier for any rewrites.
func checkApplierRewrites(t *testing.T, rule string, rws []*egraph.Rewrite[Data], cases []applierCase) map[string]*saturated {
	t.Helper()
	out := map[string]*saturated{}
	for i, c := range cases {
		t.Run(rule+"/"+c.name, func(t *testing.T) {
			b := ir.NewBuilder(rule + "/" + c.name)
			b.Output("out", c.build(b))
			g, err := b.Build()
			require.NoError(t, err)
			eg, an := NewEGraph(true)
			classes, err := AddGraph(eg, g)
			require.NoError(t, err)
			eg.Rebuild()
			before, classesBefore := egraph.NodeID(eg.NumNodeIDs()), eg.NumClasses()
			runner := egraph.Runner[Data]{IterLimit: 4, NodeLimit: 20_000}
			rep, err := runner.Run(context.Background(), eg, rws)
			require.NoError(t, err)
			require.Empty(t, an.Conflicts(), "the rule merged incompatible classes")
			applied := 0
			for _, st := range RuleStats(rep) {
				applied += st.Applied
			}
			s := &saturated{g: g, eg: eg, classes: classes, roots: GraphRoots(g, classes), report: rep}
			out[c.name] = s
			if c.none {
				require.Zero(t, applied, "%s fired", rule)
				return
			}
			require.Positive(t, applied, "%s did not fire", rule)
			// Random extractions, and the one that takes the rule's nodes
			// wherever it can.
			p := s.problem(t, func(eg2 *egraph.Graph, n egraph.NodeID) float64 {
				if !eg.Data(eg2.NodeClass(n)).Valid() {
					return math.Inf(1)
				}
				op, _ := OpOf(eg2.Node(n).Op)
				switch {
				case op.Class() == ir.ClassLeaf, op == ir.OpDequant:
					return 0 // every program reads the same leaves (a quantized weight's through its dequant)
				case op.Class() == ir.ClassView && n >= before:
					return 0
				case op.Class() == ir.ClassView:
					return 1 // views are almost free, as for kernels
				case n >= before:
					return 1
				}
				return 100
			})
			sols := randomSolutions(t, p, 8)
			fresh, _, err := extract.GreedyDAG(context.Background(), p)
			require.NoError(t, err)
			// The rule shows in the program: a node it built, or (for a
			// rule that finds a term equal to another) two classes merged.
			order, err := fresh.Needed(p)
			require.NoError(t, err)
			usesNew := false
			for _, c := range order {
				usesNew = usesNew || p.NodeIDs[fresh.Choice[c]] >= before
			}
			require.True(t, usesNew || eg.NumClasses() < classesBefore, "the program uses nothing the rule made")
			sols = append(sols, fresh)
			s.requireAgree(t, p, sols, uint64(100+i), false)
		})
	}
	return out
}

func f32In(b *ir.Builder, name string, dims ...ir.Dim) ir.Value {
	return b.Input(name, ir.F32, dims...)
}

func TestApplierSumOfExpand(t *testing.T) {
	checkApplier(t, "sum-of-expand", []applierCase{
		{name: "repeated-axis", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Expand(f32In(b, "x", 3, 1, 4), 3, 5, 4), 1)
		}},
		{name: "repeated-axis-negative", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Expand(f32In(b, "x", 1, 2, 1), 6, 2, 3), -1)
		}},
		{name: "two-repeated-axes", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Expand(f32In(b, "x", 1, 1, 4), 3, 5, 4), 0)
		}},
		{name: "other-axis", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Expand(f32In(b, "x", 3, 1, 4), 3, 5, 4), 2)
		}},
		{name: "f16", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Expand(b.Input("x", ir.F16, 2, 1), 2, 7), 1)
		}},
	})
}

func TestApplierSumOfScaled(t *testing.T) {
	checkApplier(t, "sum-of-scaled", []applierCase{
		{name: "scalar", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(b.Scalar(ir.F32, 0.75), f32In(b, "x", 2, 3, 4)), 1)
		}},
		{name: "negative-axis", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(b.Scalar(ir.F32, -3), f32In(b, "x", 5, 4)), -1)
		}},
		{name: "full-constant", build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(b.Const(ir.F32, ir.Shape{2, 3}, 2.5), f32In(b, "x", 2, 3)), 0)
		}},
		{name: "not-a-splat", none: true, build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(b.Const(ir.F32, ir.Shape{2}, 1, 2), f32In(b, "x", 2)), 0)
		}},
		{name: "not-constant", none: true, build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(f32In(b, "c", 2, 3), f32In(b, "x", 2, 3)), 0)
		}},
		{name: "infinite", none: true, build: func(b *ir.Builder) ir.Value {
			return b.Sum(b.Mul(b.Scalar(ir.F32, math.Inf(1)), f32In(b, "x", 2, 3)), 0)
		}},
	})
}

func TestApplierPermuteCompose(t *testing.T) {
	checkApplier(t, "permute-permute", []applierCase{
		{name: "rank4", build: func(b *ir.Builder) ir.Value {
			return b.Permute(b.Permute(f32In(b, "x", 2, 3, 4, 5), 1, 2, 0, 3), 2, 0, 3, 1)
		}},
		{name: "cube", build: func(b *ir.Builder) ir.Value { // equal extents: only the values tell the order
			return b.Permute(b.Permute(f32In(b, "x", 3, 3, 3), 1, 2, 0), 1, 2, 0)
		}},
		{name: "inverse", build: func(b *ir.Builder) ir.Value {
			return b.Add(b.Permute(b.Permute(f32In(b, "x", 2, 3, 4), 1, 2, 0), 2, 0, 1), f32In(b, "y", 2, 3, 4))
		}},
	})
}

func TestApplierViewIdentity(t *testing.T) {
	plus := func(b *ir.Builder, v ir.Value) ir.Value { return b.Add(v, f32In(b, "y", b.Shape(v)...)) }
	checkApplier(t, "permute-identity", []applierCase{
		{name: "identity", build: func(b *ir.Builder) ir.Value { return plus(b, b.Permute(f32In(b, "x", 2, 3, 4), 0, 1, 2)) }},
		{name: "square-transpose", none: true, build: func(b *ir.Builder) ir.Value { return b.Permute(f32In(b, "x", 3, 3), 1, 0) }},
	})
	checkApplier(t, "reshape-identity", []applierCase{
		{name: "identity", build: func(b *ir.Builder) ir.Value { return plus(b, b.Reshape(f32In(b, "x", 2, 3), 2, 3)) }},
		{name: "real-reshape", none: true, build: func(b *ir.Builder) ir.Value { return b.Reshape(f32In(b, "x", 2, 3), 3, 2) }},
	})
	checkApplier(t, "expand-identity", []applierCase{
		{name: "identity", build: func(b *ir.Builder) ir.Value { return plus(b, b.Expand(f32In(b, "x", 2, 1), 2, 1)) }},
		{name: "real-expand", none: true, build: func(b *ir.Builder) ir.Value { return b.Expand(f32In(b, "x", 2, 1), 2, 4) }},
	})
}

func TestApplierMergeMatmuls(t *testing.T) {
	qkv := func(b *ir.Builder, x ir.Value, k ir.Dim, ns ...ir.Dim) ir.Value {
		var out ir.Value = ir.NoValue
		for i, n := range ns {
			s := b.Shape(x).Clone()
			s[len(s)-2], s[len(s)-1] = k, n
			y := b.MatMul(x, b.Weight(string(rune('a'+i)), ir.F32, s...))
			// Every product reaches the output through its own columns.
			y = b.Sum(y, -1)
			if out == ir.NoValue {
				out = y
			} else {
				out = b.Mul(out, y)
			}
		}
		return out
	}
	cases := []applierCase{
		{name: "gate-up", build: func(b *ir.Builder) ir.Value { return qkv(b, f32In(b, "x", 4, 8), 8, 6, 6) }},
		{name: "qkv", build: func(b *ir.Builder) ir.Value { return qkv(b, f32In(b, "x", 4, 8), 8, 8, 4, 4) }},
		{name: "batched", none: true, build: func(b *ir.Builder) ir.Value { return qkv(b, f32In(b, "x", 2, 3, 5), 5, 2, 3) }},
		{name: "transposed-weights", build: func(b *ir.Builder) ir.Value {
			x := f32In(b, "x", 3, 4)
			p := b.MatMul(x, b.Transpose(b.Weight("wq", ir.F32, 5, 4), 0, 1))
			q := b.MatMul(x, b.Transpose(b.Weight("wk", ir.F32, 2, 4), 0, 1))
			return b.Mul(b.Sum(p, 1), b.Sum(q, 1))
		}},
		{name: "activation-operand", none: true, build: func(b *ir.Builder) ir.Value {
			x := f32In(b, "x", 3, 4)
			return b.Add(b.MatMul(x, f32In(b, "a", 4, 3)), b.MatMul(x, b.Weight("b", ir.F32, 4, 3)))
		}},
		{name: "quantized-qkv", build: func(b *ir.Builder) ir.Value {
			x := f32In(b, "x", 2, 64)
			out := b.Sum(b.MatMul(x, mxfp4Weight(b, "wq", 8, 64)), 1)
			for _, w := range []ir.Value{mxfp4Weight(b, "wk", 4, 64), mxfp4Weight(b, "wv", 4, 64)} {
				out = b.Mul(out, b.Sum(b.MatMul(x, w), 1))
			}
			return out
		}},
		{name: "quantized-and-plain", none: true, build: func(b *ir.Builder) ir.Value {
			x := f32In(b, "x", 2, 64)
			return b.Add(b.MatMul(x, mxfp4Weight(b, "wq", 4, 64)), b.MatMul(x, b.Weight("wk", ir.F32, 64, 4)))
		}},
	}
	got := checkApplier(t, "merge-matmuls", cases)
	// Saturated, Q, K and V give the three products and four merged ones
	// (QK, QV, KV, QKV), each once: the e-graph stays bounded.
	s := got["qkv"]
	require.Equal(t, "saturated", s.report.Stop.String())
	matmuls := 0
	for _, c := range s.eg.Classes() {
		for _, n := range s.eg.ClassNodes(c) {
			if s.eg.Node(n).Op == Symbol(ir.OpMatMul) {
				matmuls++
			}
		}
	}
	require.Equal(t, 7, matmuls)

	// The rule leaves batched matmuls alone; its applier merges them too.
	checkApplierRewrites(t, "merge-batched", compileTestRule(t, "rule merge-batched: (matmul ?x ?a), (matmul ?x ?b) => @merge_matmuls\n"), []applierCase{
		{name: "batched", build: func(b *ir.Builder) ir.Value { return qkv(b, f32In(b, "x", 2, 3, 5), 5, 2, 3, 4) }},
		{name: "same-weight", none: true, build: func(b *ir.Builder) ir.Value {
			x, w := f32In(b, "x", 3, 4), b.Weight("w", ir.F32, 4, 2)
			return b.Add(b.MatMul(x, w), b.MatMul(x, w))
		}},
	})
}

func TestApplierSoftmax(t *testing.T) {
	checkApplier(t, "softmax-decompose", []applierCase{
		{name: "last-axis", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 3, 5), -1) }},
		{name: "middle-axis", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 3, 5), 1) }},
		{name: "f16", build: func(b *ir.Builder) ir.Value { return b.Softmax(b.Input("x", ir.F16, 4, 6), 1) }},
	})
	checkApplier(t, "softmax-online", []applierCase{
		{name: "last-axis", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 3, 512), 2) }},
		{name: "negative-axis", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 1024), -1) }},
		{name: "bf16", build: func(b *ir.Builder) ir.Value { return b.Softmax(b.Input("x", ir.BF16, 3, 514), -1) }},
		{name: "short-row", none: true, build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 8), -1) }},
		{name: "not-last-axis", none: true, build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 512, 512), 0) }},
	})
	// The applier itself, on short rows, and where it refuses.
	checkApplierRewrites(t, "online-any-length", compileTestRule(t, "rule o: (softmax[?p] ?x) => @softmax_online\n"), []applierCase{
		{name: "short-row", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 3, 8), 2) }},
		{name: "two", build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 5, 2), -1) }},
		{name: "odd-extent", none: true, build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 2, 5), -1) }},
		{name: "not-last-axis", none: true, build: func(b *ir.Builder) ir.Value { return b.Softmax(f32In(b, "x", 4, 4), 0) }},
	})
}

func TestApplierNorms(t *testing.T) {
	checkApplier(t, "rms-norm-decompose", []applierCase{
		{name: "rank3", build: func(b *ir.Builder) ir.Value {
			return b.RMSNorm(f32In(b, "x", 2, 3, 8), f32In(b, "w", 8), 1e-5)
		}},
		{name: "rank1", build: func(b *ir.Builder) ir.Value { return b.RMSNorm(f32In(b, "x", 6), f32In(b, "w", 6), 1e-6) }},
		{name: "f16", build: func(b *ir.Builder) ir.Value {
			return b.RMSNorm(b.Input("x", ir.F16, 3, 8), b.Input("w", ir.F16, 8), 1e-5)
		}},
	})
	checkApplier(t, "layer-norm-decompose", []applierCase{
		{name: "rank3", build: func(b *ir.Builder) ir.Value {
			return b.LayerNorm(f32In(b, "x", 2, 3, 8), f32In(b, "w", 8), f32In(b, "c", 8), 1e-5)
		}},
		{name: "bf16", build: func(b *ir.Builder) ir.Value {
			return b.LayerNorm(b.Input("x", ir.BF16, 4, 6), b.Input("w", ir.BF16, 6), b.Input("c", ir.BF16, 6), 1e-5)
		}},
	})
	// The decomposition as the corpus builders emit it (Mean multiplies
	// by 1/n).
	rms := func(b *ir.Builder, x, w ir.Value, inv, eps float64) ir.Value {
		v := b.Mul(b.Sum(b.Mul(x, x), -1+len(b.Shape(x))), b.Scalar(ir.F32, ir.F32.Round(inv)))
		return b.Mul(w, b.Mul(x, b.Rsqrt(b.Add(v, b.Scalar(ir.F32, ir.F32.Round(eps))))))
	}
	checkApplier(t, "rms-norm-recognize", []applierCase{
		{name: "rank3", build: func(b *ir.Builder) ir.Value {
			return rms(b, f32In(b, "x", 2, 3, 8), b.Weight("w", ir.F32, 8), 1.0/8, 1e-5)
		}},
		{name: "rank2-768", build: func(b *ir.Builder) ir.Value { // 1/768 is not exact in f32
			return rms(b, f32In(b, "x", 2, 768), b.Weight("w", ir.F32, 768), 1.0/768, 1e-6)
		}},
		{name: "not-a-mean", none: true, build: func(b *ir.Builder) ir.Value {
			return rms(b, f32In(b, "x", 2, 8), b.Weight("w", ir.F32, 8), 1.0/7, 1e-5)
		}},
		{name: "zero-eps", none: true, build: func(b *ir.Builder) ir.Value {
			return rms(b, f32In(b, "x", 2, 8), b.Weight("w", ir.F32, 8), 1.0/8, 0)
		}},
	})
}

// mxfp4Weight is an nn.Linear weight [N, K] in mxfp4 read transposed, as
// a projection reads it.
func mxfp4Weight(b *ir.Builder, name string, N, K ir.Dim) ir.Value {
	return b.Transpose(b.Dequant(quant.MXFP4, ir.F32, 32, 0, b.Weight(name+".blocks", ir.U8, N, K/32, 16), b.Weight(name+".scales", ir.U8, N, K/32)), 0, 1)
}
