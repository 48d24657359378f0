package ir

import (
	"errors"
	"flag"
	"github.com/lumsearch/lumsearch/quant"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// textCase is a graph built with the Builder, the way models are, so that
// the round trip is tested on exactly what the rest of the project makes.
type textCase struct {
	name  string
	build func(b *Builder)
}

var textCases = []textCase{
	{"empty", func(b *Builder) {}},
	{"leaves", func(b *Builder) {
		b.Output("x", b.Input("x", F32, 2, 3))
		b.Output("w", b.Weight("w", BF16, 4))
		b.Output("s", b.State("s", F16))
		b.Output("c", b.Const(I32, Shape{2, 2}, 1, -2, 3, 2147483647))
		b.Output("one", b.Scalar(F32, 0.5))
		b.Output("iota", b.Iota(I64, Shape{4, 5}, -1))
		b.Output("fiota", b.Iota(F32, Shape{3}, 0))
		b.Output("empty", b.Const(F32, Shape{0, 3}))
		b.Output("z", b.Input("z", F32, 0))
	}},
	{"const values", func(b *Builder) {
		b.Output("special", b.Const(F32, Shape{5}, math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1), 0))
		b.Output("f32", b.Const(F32, Shape{3}, float64(float32(0.1)), float64(math.MaxFloat32), float64(math.SmallestNonzeroFloat32)))
		b.Output("f16", b.Const(F16, Shape{2}, 65504, 0.0009765625))
		b.Output("bf16", b.Const(BF16, Shape{}, 1.5))
		b.Output("i64", b.Const(I64, Shape{5}, -(1<<62), 1<<53+2, 1e6, 16777216, math.MinInt64))
		b.Output("big", b.Const(F32, Shape{3}, float64(float32(1e21)), 1<<70, float64(float32(-1e20))))
		b.Output("bool", b.Const(Bool, Shape{2}, 1, 0))
	}},
	{"unary", func(b *Builder) {
		x := b.Input("x", F32, 2, 3)
		for _, op := range []Op{OpNeg, OpAbs, OpExp, OpLog, OpSqrt, OpRsqrt, OpRecip, OpSin, OpCos, OpTanh, OpSigmoid, OpErf, OpRelu, OpFloor, OpCeil} {
			b.Output(op.String(), b.Unary(op, x))
		}
		i := b.Input("i", I32, 3)
		b.Output("negi", b.Neg(i))
		b.Output("absi", b.Unary(OpAbs, i))
		c := b.Input("c", Bool, 3)
		b.Output("not", b.Unary(OpNot, c))
	}},
	{"binary", func(b *Builder) {
		x, y := b.Input("x", F32, 2, 3), b.Input("y", F32, 3) // broadcasts
		for _, op := range []Op{OpAdd, OpSub, OpMul, OpDiv, OpPow, OpMax, OpMin, OpMod} {
			b.Output(op.String(), b.Binary(op, x, y))
		}
		p, q := b.Input("p", Bool, 4), b.Input("q", Bool, 4)
		b.Output("and", b.Binary(OpAnd, p, q))
		b.Output("or", b.Binary(OpOr, p, q))
		i, j := b.Input("i", I64, 4), b.Input("j", I64, 4)
		b.Output("imod", b.Binary(OpMod, i, j))
	}},
	{"compare and where", func(b *Builder) {
		x, y := b.Input("x", F32, 2, 3), b.Input("y", F32, 2, 3)
		for _, op := range []Op{OpEq, OpNe, OpLt, OpLe, OpGt, OpGe} {
			b.Output(op.String(), b.Binary(op, x, y))
		}
		c := b.Binary(OpLt, x, y)
		b.Output("where", b.Where(c, x, b.Scalar(F32, math.Inf(-1))))
		p := b.Input("p", Bool, 2, 3)
		b.Output("beq", b.Binary(OpEq, p, c))
	}},
	{"reductions", func(b *Builder) {
		x := b.Input("x", F32, 2, 3, 4)
		b.Output("sum", b.Sum(x, 1))
		b.Output("max", b.ReduceMax(x, -1))
		b.Output("mean", b.Mean(x, 0))
		b.Output("softmax", b.Softmax(x, -1))
	}},
	{"views", func(b *Builder) {
		x := b.Input("x", F32, 2, 3, 4)
		b.Output("permute", b.Permute(x, 2, 0, 1))
		b.Output("transpose", b.Transpose(x, -1, -2))
		b.Output("reshape", b.Reshape(x, 6, 4))
		b.Output("flat", b.Reshape(b.Slice(x, 0, 1, 2, 1), 12))
		b.Output("scalar", b.Reshape(b.Sum(b.Sum(b.Sum(x, 0), 1), 2), []Dim{}...))
		b.Output("expand", b.Expand(b.Slice(x, 1, 0, 1, 1), 2, 7, 4))
		b.Output("slice", b.Slice(x, 2, 1, 4, 2))
		b.Output("pad", b.Pad(x, []int64{0, 1, 2}, []int64{3, 0, 0}, math.NaN()))
		b.Output("pad0", b.Pad(x, []int64{1, 1, 1}, []int64{0, 0, 0}, -1.5))
	}},
	{"data movement", func(b *Builder) {
		x, y := b.Input("x", F32, 2, 3), b.Input("y", F32, 2, 5)
		b.Output("concat", b.Concat(-1, x, y, x))
		b.Output("concat1", b.Concat(0, x))
		b.Output("f16", b.Cast(x, F16))
		b.Output("bool", b.Cast(b.Binary(OpGt, x, x), F32))
		emb, ids := b.Weight("emb", F32, 10, 4), b.Input("ids", I64, 2, 3)
		b.Output("gather", b.Gather(emb, ids, 0))
		b.Output("gather1", b.Gather(x, b.Input("j", I32), 1))
		kv, nw := b.State("kv", F32, 1, 2, 8, 4), b.Input("new", F32, 1, 2, 1, 4)
		up := b.SliceUpdate(kv, nw, 2, 5)
		b.Output("kv", up)
		b.UpdateState(kv, up)
		pool := b.State("pool", F32, 6, 2, 4)
		b.Output("scatter", b.Scatter(pool, b.Input("rows", F32, 3, 2, 4), b.Input("slots", I32, 3), 0))
		b.Output("scatter1", b.Scatter(x, b.Input("cols", F32, 2, 2), b.Input("at", I64, 2), -1))
	}},
	{"composites", func(b *Builder) {
		x := b.Input("x", F32, 2, 8)
		b.Output("matmul", b.MatMul(x, b.Weight("w", F32, 8, 3)))
		b.Output("bmm", b.MatMul(b.Input("a", F16, 4, 2, 3), b.Input("c", F16, 3, 5)))
		b.Output("ln", b.LayerNorm(x, b.Weight("g", F32, 8), b.Weight("b", F32, 8), 1e-5))
		b.Output("rms", b.RMSNorm(x, b.Weight("r", F32, 8), 1.0/3))
		q := b.Input("q", F32, 1, 4, 2, 8)
		k, v := b.State("k", F32, 1, 2, 5, 8), b.State("v", F32, 1, 2, 5, 8)
		b.Output("causal", b.Attention(q, k, v, 0.125, true, 3))
		b.Output("full", b.Attention(q, k, v, 1/math.Sqrt(8), false, 0))
		b.Output("oddoffset", b.Attention(q, k, v, math.SmallestNonzeroFloat64, false, -7))
		b.Output("causal0", b.Attention(q, k, v, math.MaxFloat64, true, 0))
	}},
	{"paged", func(b *Builder) {
		kp, vp := b.State("kpool", BF16, 12, 2, 8), b.State("vpool", BF16, 12, 2, 8)
		q := b.Input("q", BF16, 5, 4, 8)
		k, v := b.Input("k", BF16, 5, 2, 8), b.Input("v", BF16, 5, 2, 8)
		slots := b.Input("slots", I32, 5)
		kp2, vp2 := b.Scatter(kp, k, slots, 0), b.Scatter(vp, v, slots, -3)
		b.UpdateState(kp, kp2)
		b.UpdateState(vp, vp2)
		table, lens, starts := b.Input("table", I32, 3, 2), b.Input("lens", I32, 3), b.Input("starts", I32, 4)
		seqs := b.Symbol("seqs", 1, 3)
		b.Output("windowed", b.PagedAttention(q, k, v, kp2, vp2, table, lens, starts, seqs, 0.125, 4, 3))
		b.Output("full", b.PagedAttention(q, k, v, kp2, vp2, table, lens, starts, seqs, 1/math.Sqrt(8), 6, 0))
	}},
	{"paged attention", func(b *Builder) {
		q, k, v := b.Input("q", BF16, 6, 4, 8), b.Input("k", BF16, 6, 2, 8), b.Input("v", BF16, 6, 2, 8)
		kp, vp := b.Input("kpool", BF16, 32, 2, 8), b.Input("vpool", BF16, 32, 2, 8)
		table, lens, starts, seqs := b.Input("table", I32, 3, 4), b.Input("lens", I32, 3), b.Input("starts", I32, 4), b.Input("seqs", I64)
		b.Output("full", b.PagedAttention(q, k, v, kp, vp, table, lens, starts, seqs, 0.125, 8, 0))
		b.Output("window", b.PagedAttention(q, k, v, kp, vp, table, lens, starts, seqs, 1/math.Sqrt(8), 8, 5))
		b.Output("sinks", b.PagedAttentionSinks(q, k, v, kp, vp, table, lens, starts, seqs, b.Input("sinks", BF16, 4), 0.125, 8, 5))
		b.Output("sinks32", b.PagedAttentionSinks(q, k, v, kp, vp, table, lens, starts, seqs, b.Input("sinks32", F32, 4), 0.125, 8, 0))
	}},
	{"experts", func(b *Builder) {
		x := b.Input("x", BF16, 3, 4)
		logits := b.Input("logits", F32, 3, 5)
		gu, dn := b.Weight("gate_up", BF16, 5, 4, 6), b.Weight("down", BF16, 5, 3, 4)
		gub, dnb := b.Weight("gate_up_bias", BF16, 5, 6), b.Weight("down_bias", BF16, 5, 4)
		chosen := b.Route(logits, 2, GatingChosen)
		b.Output("all", b.Route(logits, 5, GatingAll))
		b.Output("clamped", b.Experts(x, chosen, gu, dn, gub, dnb, 2, GatingClampedSwiGLU, 7))
		b.Output("swiglu", b.Experts(x, chosen, gu, dn, gub, dnb, 3, GatingSwiGLU, 0))
		h := b.ExpertsUp(x, chosen, gu, gub, 2, GatingClampedSwiGLU, 7)
		b.Output("up", h)
		b.Output("down", b.ExpertsDown(h, chosen, dn, dnb, 2))
		b.Output("up_swiglu", b.ExpertsUp(x, chosen, gu, gub, 3, GatingSwiGLU, 0))
	}},
	{"dequant", func(b *Builder) {
		mx := b.Dequant(quant.MXFP4, BF16, 32, 0, b.Weight("blocks", U8, 2, 6, 2, 16), b.Weight("scales", U8, 2, 6, 2))
		b.Output("mxfp4", mx)
		b.Output("fp8", b.Dequant(quant.FP8, F16, 128, 1, b.Weight("w8", U8, 6, 64), b.Weight("s8", F32, 6, 1)))
		b.Output("awq", b.Dequant(quant.AWQ, BF16, 4, 0, b.Weight("qw", I32, 8, 2), b.Weight("sa", F16, 2, 16), b.Weight("qz", I32, 2, 2)))
		b.Output("w8a8", b.RoundE4M3(b.Input("act", F32, 2, 3)))
		b.Output("gptq", b.Dequant(quant.GPTQ, F32, 8, 0, b.Weight("qg", I32, 1, 16), b.Weight("sg", F16, 1, 16), b.Weight("zg", I32, 1, 2)))
	}},
	{"names", func(b *Builder) {
		x := b.Input("a \"quoted\"\nname ; not a comment", F32, 1)
		y := b.Input("\xff\x00é", F32, 1)
		b.Output("", b.Add(x, y))
		b.Output("%0 = input", x)
		b.Output("y", x) // one value, two outputs
	}},
	{"state loop", func(b *Builder) {
		s := b.State("step", I64)
		t := b.State("other", I64)
		b.UpdateState(s, b.Add(s, b.Scalar(I64, 1)))
		b.UpdateState(t, s)
		b.Output("step", s)
	}},
}

var textGraphNames = map[string]string{
	"names":      "a graph\twith \"odd\" name",
	"state loop": "",
}

func (c textCase) graph(t testing.TB) *Graph {
	t.Helper()
	name, ok := textGraphNames[c.name]
	if !ok {
		name = strings.ReplaceAll(c.name, " ", "_")
	}
	b := NewBuilder(name)
	c.build(b)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// nodeView is a node with every float as its bits, so that NaN equals NaN
// and -0 differs from 0, and with empty slices nil, so that a list the
// Builder cloned from an empty literal equals one the parser left nil.
type textNodeView struct {
	Op                                 Op
	Inputs                             []Value
	Name                               string
	Data                               []uint64
	Axis                               int
	To                                 Shape
	Perm                               []int
	Starts, Ends, Steps, Before, After []int64
	Value, Eps, Scale                  uint64
	AttrDType                          DType
	Causal                             bool
	Offset                             int64
	Block, Window, TopK                int64
	Gating                             Gating
	Limit                              uint64
	Shape                              Shape
	DType                              DType
	Format                             quant.Format
	Group, GroupN                      int64
}

type textGraphView struct {
	Name    string
	Nodes   []textNodeView
	Outputs []Output
	Updates []StateUpdate
}

func textNilIfEmpty[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

func viewTextGraph(g *Graph) textGraphView {
	v := textGraphView{Name: g.Name, Outputs: textNilIfEmpty(g.Outputs), Updates: textNilIfEmpty(g.Updates)}
	for _, n := range g.Nodes {
		nv := textNodeView{
			Op: n.Op, Inputs: textNilIfEmpty(n.Inputs), Name: n.Name, Axis: n.Axis, To: textNilIfEmpty(n.To),
			Perm: textNilIfEmpty(n.Perm), Starts: textNilIfEmpty(n.Starts), Ends: textNilIfEmpty(n.Ends), Steps: textNilIfEmpty(n.Steps),
			Before: textNilIfEmpty(n.Before), After: textNilIfEmpty(n.After),
			Value: math.Float64bits(n.Value), Eps: math.Float64bits(n.Eps), Scale: math.Float64bits(n.Scale),
			AttrDType: n.Attrs.DType, Causal: n.Causal, Offset: n.Offset,
			Block: n.Block, Window: n.Window, TopK: n.TopK, Gating: n.Gating, Limit: math.Float64bits(n.Limit), Shape: textNilIfEmpty(n.Shape), DType: n.DType,
			Format: n.Format, Group: n.Group, GroupN: n.GroupN,
		}
		for _, d := range n.Data {
			nv.Data = append(nv.Data, math.Float64bits(d))
		}
		v.Nodes = append(v.Nodes, nv)
	}
	return v
}

func TestTextRoundTrip(t *testing.T) {
	for _, c := range textCases {
		t.Run(c.name, func(t *testing.T) {
			g := c.graph(t)
			text := g.String()
			parsed, err := Parse(text)
			require.NoError(t, err, "parsing:\n%s", text)
			require.Equal(t, text, parsed.String())
			require.Equal(t, viewTextGraph(g), viewTextGraph(parsed))

			var sb strings.Builder
			require.NoError(t, Format(&sb, g))
			require.Equal(t, text, sb.String())
		})
	}
}

// TestTextCoversEveryOp fails when an op is added to the language without
// a round-trip case here, which is where its text form gets tested.
func TestTextCoversEveryOp(t *testing.T) {
	seen := map[Op]bool{}
	for _, c := range textCases {
		for _, n := range c.graph(t).Nodes {
			seen[n.Op] = true
		}
	}
	for _, op := range Ops() {
		assert.True(t, seen[op], "no text round-trip case uses %s", op)
	}
}

func TestTextExactFloats(t *testing.T) {
	for _, eps := range []float64{0.1, 1e-5, 1.0 / 3, math.SmallestNonzeroFloat64, math.MaxFloat64, 5e-324, 1 + 0x1p-52, 1 << 62, 1<<63 - 1024, 1 << 63, 1 << 64, 1e21, 123456789.5} {
		b := NewBuilder("eps")
		x := b.Input("x", F32, 4)
		b.Output("y", b.RMSNorm(x, b.Weight("s", F32, 4), eps))
		g, err := b.Build()
		require.NoError(t, err)
		parsed, err := Parse(g.String())
		require.NoError(t, err)
		assert.Equal(t, math.Float64bits(eps), math.Float64bits(parsed.Nodes[2].Eps), "eps %v printed %q", eps, g.String())
	}
}

// TestParseHandWritten is the format as people write it: own value names,
// comments, blank lines, CRLF, attributes in any order, result types left
// out or given.
func TestParseHandWritten(t *testing.T) {
	src := "; a tiny attention block\r\n" +
		"graph \"blk\" ; named with a string\r\n" +
		"\n" +
		"%q = input \"q\" f32[1,2,3,4]\n" +
		"%k = input \"k\" f32[1,1,5,4]\n" +
		"%v = input \"v\" f32[1,1,5,4]\n" +
		"%att = attention %q,%k , %v offset=2 causal scale=0.5\n" +
		"  %x.1 = slice %att steps=[1,1,1,2] ends=[1,2,3,4] starts=[0,0,0,0] : f32[1,2,3,2]\n" +
		"%c = const f32[] {-inf}\n" +
		"%p = pad %x.1 value=nan after=[0,0,0,2] before=[0,0,0,0]\n" +
		"output \"out;put\" = %p ; the name holds a ;\n"
	g, err := Parse(src)
	require.NoError(t, err)

	b := NewBuilder("blk")
	q, k, v := b.Input("q", F32, 1, 2, 3, 4), b.Input("k", F32, 1, 1, 5, 4), b.Input("v", F32, 1, 1, 5, 4)
	x := b.Slice(b.Attention(q, k, v, 0.5, true, 2), 3, 0, 4, 2)
	b.Scalar(F32, math.Inf(-1))
	b.Output("out;put", b.Pad(x, []int64{0, 0, 0, 0}, []int64{0, 0, 0, 2}, math.NaN()))
	want, err := b.Build()
	require.NoError(t, err)
	assert.Equal(t, viewTextGraph(want), viewTextGraph(g))
	assert.Equal(t, want.String(), g.String())
}

func TestParseErrors(t *testing.T) {
	const head = "graph g\n%0 = input \"x\" f32[2,3]\n"
	tests := []struct {
		name, src, want string
	}{
		{"empty source", "", "1:1: want `graph NAME` first"},
		{"only comments", "; nothing\n\n", "1:1: want `graph NAME` first"},
		{"no graph line", "%0 = input \"x\" f32[2]\n", "1:1: want `graph NAME` first, got %0"},
		{"second graph", head + "graph h\n", "3:1: a second graph statement; the graph was named at 1:1"},
		{"graph without name", "graph\n", "1:6: want the graph's name, got end of line"},
		{"unknown op", head + "%1 = matmull %0, %0\n", `3:6: unknown op "matmull"`},
		{"undefined value", head + "%1 = neg %7\n", "3:10: undefined value %7"},
		{"use before definition", head + "%1 = neg %1\n", "3:10: undefined value %1"},
		{"wrong type annotation", head + "%1 = neg %0 : f32[3,2]\n", "3:15: neg result is f32[2,3], but it is annotated f32[3,2]"},
		{"wrong dtype annotation", head + "%1 = lt %0, %0 : f32[2,3]\n", "3:18: lt result is bool[2,3], but it is annotated f32[2,3]"},
		{"bad dtype", "graph g\n%0 = input \"x\" f33[2]\n", `2:16: unknown dtype "f33"`},
		{"bad cast dtype", head + "%1 = cast %0 dtype=float\n", `3:20: unknown dtype "float"`},
		{"shape missing", "graph g\n%0 = input \"x\" f32\n", "2:19: malformed shape: want [dims], got end of line"},
		{"shape trailing comma", "graph g\n%0 = input \"x\" f32[2,]\n", `2:22: want an integer, got "]"`},
		{"shape without comma", "graph g\n%0 = input \"x\" f32[2 3]\n", `2:22: malformed list: want "," or "]", got "3"`},
		{"shape unclosed", "graph g\n%0 = input \"x\" f32[2\n", `2:21: malformed list: want "," or "]", got end of line`},
		{"shape not a number", "graph g\n%0 = input \"x\" f32[two]\n", "2:20: bad integer two"},
		{"negative dimension", "graph g\n%0 = input \"x\" f32[-2]\n", "2:6: input: shape [-2]: dimension 0 is negative"},
		{"wrong arity", head + "%1 = add %0\n", "3:6: add takes 2 operands, got 1"},
		{"operands on a leaf", head + "%1 = weight \"w\" f32[2] %0\n", "3:6: weight takes 0 operands, got 1"},
		{"concat of nothing", head + "%1 = concat axis=0\n", "3:6: concat takes at least 1 operand, got none"},
		{"dangling comma", head + "%1 = add %0, \n", "3:14: want a %value after \",\", got end of line"},
		{"missing attribute", head + "%1 = sum %0\n", "3:6: sum needs attribute axis"},
		{"missing slice steps", head + "%1 = slice %0 starts=[0,0] ends=[2,3]\n", "3:6: slice needs attribute steps"},
		{"missing pad value", head + "%1 = pad %0 before=[0,0] after=[0,0]\n", "3:6: pad needs attribute value"},
		{"missing attention scale", "graph g\n%0 = input \"q\" f32[1,1,1,1]\n%1 = attention %0, %0, %0 causal\n", "3:6: attention needs attribute scale"},
		{"missing const data", "graph g\n%0 = const f32[2]\n", `2:18: want "{" to open the constant's data, got end of line`},
		{"unknown attribute", head + "%1 = neg %0 axis=1\n", "3:13: neg has no attribute axis"},
		{"causal on the wrong op", head + "%1 = softmax %0 axis=0 causal\n", "3:24: softmax has no attribute causal"},
		{"attribute twice", head + "%1 = sum %0 axis=0 axis=1\n", "3:20: attribute axis given twice"},
		{"attribute without value", head + "%1 = sum %0 axis\n", `3:17: want "=" after axis, got end of line`},
		{"duplicate value name", head + "%1 = neg %0\n%1 = exp %0\n", "4:1: %1 is already defined at 3:1"},
		{"duplicate leaf value", head + "%0 = input \"y\" f32[2]\n", "3:1: %0 is already defined at 2:1"},
		{"duplicate input name", head + "%1 = input \"x\" f32[2]\n", `3:12: two inputs named "x"`},
		{"duplicate output", head + "output \"y\" = %0\noutput \"y\" = %0\n", `4:8: two outputs named "y"`},
		{"output name unquoted", head + "output y = %0\n", `3:8: want the output's quoted name, got "y"`},
		{"update of an input", head + "update %0 = %0\n", "3:8: update of %0, which is input, not a state"},
		{"update of another type", "graph g\n%s = state \"s\" f32[2]\n%t = iota f32[3] axis=0\nupdate %s = %t\n", `4:13: state "s" is f32[2] but its update %t is f32[3]`},
		{"type error from inference", "graph g\n%a = input \"a\" f32[2,3]\n%b = input \"b\" f32[4,5]\n%c = matmul %a, %b\n", "4:6: matmul(f32[2,3], f32[4,5]): inner dimensions 3 and 4 differ"},
		{"const count", "graph g\n%0 = const f32[3] {1, 2}\n", "2:6: const: constant of shape [3] has 2 values; want 1 or 3"},
		{"const not representable", "graph g\n%0 = const i32[] {0.5}\n", "2:19: const: constant value 0.5 is not a i32"},
		{"number out of range", "graph g\n%0 = const f32[] {1e400}\n", "2:19: bad number 1e400"},
		{"integer out of range", head + "%1 = sum %0 axis=99999999999999999999\n", "3:18: bad integer 99999999999999999999"},
		{"unterminated string", "graph g\n%0 = input \"x f32[2]\n", "2:12: unterminated string"},
		{"bad escape", "graph g\n%0 = input \"\\q\" f32[2]\n", `2:12: malformed string "\q"`},
		{"bad character", head + "%1 = neg %0 # no\n", "3:13: unexpected character '#'"},
		{"bare percent", head + "%1 = neg % 0\n", "3:10: want a value name after %"},
		{"trailing junk", head + "output \"y\" = %0 %0\n", "3:17: unexpected %0 after the output"},
		{"statement junk", head + "print %0\n", `3:1: want a statement (%value = ..., output, update, symbol), got "print"`},
		{"missing equals", head + "%1 neg %0\n", `3:4: want "=" after the value, got "neg"`},
		{"op is not a word", head + "%1 = %0\n", "3:6: want an op, got %0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Parse(tt.src)
			require.Error(t, err, "parsed as:\n%v", g)
			assert.Nil(t, g)
			assert.True(t, strings.HasPrefix(err.Error(), tt.want), "error %q\nwant prefix %q", err, tt.want)
		})
	}
}

// exampleMLP is a two-layer perceptron with exact GELU as torch.onnx
// exports nn.GELU before opset 20: x/sqrt(2), Erf, +1, *x, *0.5, with the
// Linear layers' [out, in] weights transposed before the matmul.
func exampleMLP() (*Graph, error) {
	b := NewBuilder("mlp")
	linear := func(x Value, name string, in, out Dim) Value {
		w := b.Weight(name+".weight", F32, out, in)
		bias := b.Weight(name+".bias", F32, out)
		return b.Add(b.MatMul(x, b.Transpose(w, 0, 1)), bias)
	}
	x := b.Input("x", F32, 2, 4)
	h := linear(x, "fc1", 4, 8)
	erf := b.Erf(b.Div(h, b.Scalar(F32, float64(float32(math.Sqrt2)))))
	gelu := b.Mul(b.Mul(h, b.Add(erf, b.Scalar(F32, 1))), b.Scalar(F32, 0.5))
	b.Output("y", linear(gelu, "fc2", 8, 3))
	return b.Build()
}

func TestTextGolden(t *testing.T) {
	path := filepath.Join("testdata", "example.graph")
	g, err := exampleMLP()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(g.String()), 0o644))
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	parsed, err := Parse(string(data))
	require.NoError(t, err)
	assert.Equal(t, string(data), parsed.String(), "re-printed golden file differs")
	assert.Equal(t, string(data), g.String(), "printer output changed; rerun with -update if intended")
	assert.Equal(t, viewTextGraph(g), viewTextGraph(parsed))
}

func TestFormatBrokenGraph(t *testing.T) {
	// Printing is for looking at graphs, broken ones included: it must not
	// panic, and what it prints must not parse as something else.
	g := &Graph{Name: "bad", Nodes: []*Node{nil, {Op: Op(200)}, {Op: OpNeg, Inputs: []Value{7}}}}
	text := g.String()
	assert.Equal(t, "graph bad\n%0 = <nil>\n%1 = op(200)\n%2 = neg %7 : invalid[]\n", text)
	_, err := Parse(text)
	assert.Error(t, err)
	assert.Equal(t, "graph \"\"\n", (*Graph)(nil).String())
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFormatReportsWriteErrors(t *testing.T) {
	g, err := exampleMLP()
	require.NoError(t, err)
	assert.EqualError(t, Format(failingWriter{}, g), "disk full")
}

func FuzzParse(f *testing.F) {
	for _, c := range textCases {
		f.Add(c.graph(f).String())
	}
	if g, err := exampleMLP(); err == nil {
		f.Add(g.String())
	}
	for _, s := range []string{
		"",
		"graph",
		"graph g\n%0 = input \"x\" f32[2,3]\n%1 = slice %0 starts=[0,0] ends=[2,3] steps=[1,1]\n",
		"graph g\n%0 = const f32[2] {nan, -inf}\n%1 = pad %0 before=[1] after=[0] value=-0\n",
		"graph \"\\x00\"\n%a.b = iota i32[3] axis=-1 ; c\r\n",
		"graph g\n%0 = input \"q\" f32[1,1,1,1]\n%1 = attention %0, %0, %0 scale=1e-300 causal offset=-1\n",
		"graph g\n%0 = state \"s\" i64[]\nupdate %0 = %0\noutput \"\" = %0\n",
		"graph g\n%0 = input \"x\" f32[9223372036854775807]\n",
		"graph g\n%0 = const bool[0] {}\n%1 = concat %0, %0, %0 axis=0\n",
		"graph g\n%0 = input \"x\\\"\" f32[2]\n%1 = cast %0 dtype=bf16 : bf16[2]\n",
		"%%%%",
		"graph g\n{[,]}:=\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src)
		if err != nil {
			if g != nil {
				t.Fatalf("Parse returned a graph and an error %v", err)
			}
			return
		}
		text := g.String()
		again, err := Parse(text)
		if err != nil {
			t.Fatalf("printed graph does not parse: %v\n%s", err, text)
		}
		if got := again.String(); got != text {
			t.Fatalf("printing is not stable:\n%s\nthen\n%s", text, got)
		}
		if !assert.Equal(t, viewTextGraph(g), viewTextGraph(again)) {
			t.FailNow()
		}
	})
}
