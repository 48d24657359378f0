package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
)

// The attention kernel form, flash style, computed in f32 (half-precision
// operands widened on load): a block owns one query
// row of one batch and head. It loads the row (its prologue, rotary say,
// computed on the way) into shared memory, then streams the keys in tiles
// of 32: a warp computes the tile's scores (each lane one key's dot
// product, the key's prologue computed as it is read, then the
// elementwise scale and mask), and the online softmax keeps a running max
// and sum, rescaling the output row accumulated from the values. The
// scores never reach memory. Tensor cores and several rows per block are
// not printed yet.

const (
	attnThreads = 128
	attnTile    = 32
)

// attentionParts are the nodes of an attention body.
type attentionParts struct {
	qk, pv         ir.Value // the two matmuls
	scores         ir.Value // the softmax's input, from qk through elementwise ops
	q, kt, v       ir.Value // qk's operands and pv's right operand
	softmaxOutputs ir.Value // pv's left operand: softmax(scores)
}

// findAttention checks that body is softmax(scores) x v with scores
// computed elementwise from q x kt, and names the parts.
func findAttention(body *ir.Graph) (attentionParts, error) {
	var mms []ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			mms = append(mms, ir.Value(i))
		}
	}
	if len(mms) != 2 {
		return attentionParts{}, fmt.Errorf("attention with %d matmuls", len(mms))
	}
	p := attentionParts{qk: mms[0], pv: mms[1]}
	qk, pv := body.Node(p.qk), body.Node(p.pv)
	p.q, p.kt, p.v, p.softmaxOutputs = qk.Inputs[0], qk.Inputs[1], pv.Inputs[1], pv.Inputs[0]
	// Half-precision attention computes in f32 all the same (operands
	// are widened as they are loaded); the cast that rounds the
	// probabilities back to the operands' precision is skipped, which
	// keeps them more precise than the graph does.
	for body.Node(p.softmaxOutputs).Op == ir.OpCast {
		p.softmaxOutputs = body.Node(p.softmaxOutputs).Inputs[0]
	}
	// softmax(s) = exp(s - expand(max(s))) / expand(sum(exp(...))).
	div := body.Node(p.softmaxOutputs)
	if div.Op != ir.OpDiv {
		return p, fmt.Errorf("attention whose probabilities are no softmax (a %s)", div.Op)
	}
	ex := body.Node(div.Inputs[0])
	den := body.Node(div.Inputs[1])
	if ex.Op != ir.OpExp || den.Op != ir.OpExpand || body.Node(den.Inputs[0]).Op != ir.OpSum || body.Node(den.Inputs[0]).Inputs[0] != div.Inputs[0] {
		return p, fmt.Errorf("attention whose probabilities are no softmax")
	}
	sub := body.Node(ex.Inputs[0])
	if sub.Op != ir.OpSub || body.Node(sub.Inputs[1]).Op != ir.OpExpand {
		return p, fmt.Errorf("attention whose probabilities are no softmax")
	}
	mx := body.Node(body.Node(sub.Inputs[1]).Inputs[0])
	if mx.Op != ir.OpMaxReduce || mx.Inputs[0] != sub.Inputs[0] {
		return p, fmt.Errorf("attention whose probabilities are no softmax")
	}
	for _, red := range []*ir.Node{mx, body.Node(den.Inputs[0])} {
		in := body.Node(red.Inputs[0]).Shape
		if ax := red.Attrs.Axis; ax != -1 && ax != len(in)-1 {
			return p, fmt.Errorf("attention with a softmax across axis %d", ax)
		}
	}
	p.scores = sub.Inputs[0]
	if !body.Node(p.scores).Shape.Equal(qk.Shape) {
		return p, fmt.Errorf("attention whose scores are reshaped after the first matmul")
	}
	// The scores come from qk through elementwise ops only.
	var check func(v ir.Value) error
	check = func(v ir.Value) error {
		if v == p.qk {
			return nil
		}
		n := body.Node(v)
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpCast {
				return nil // another input of the scores (a mask), read through its views
			}
		}
		for _, in := range n.Inputs {
			if err := check(in); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check(p.scores); err != nil {
		return p, err
	}
	return p, nil
}

// forward maps an index of value from to the index of value to, which
// from reaches through permutes, reshapes and elementwise ops (those keep
// the index) only.
func forward(body *ir.Graph, from, to ir.Value, ix index) (index, error) {
	reaches := make([]bool, len(body.Nodes))
	reaches[to] = true
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		if reaches[i] {
			for _, in := range body.Nodes[i].Inputs {
				reaches[in] = true
			}
		}
	}
	if !reaches[from] {
		return nil, fmt.Errorf("the output does not read the result")
	}
	cur := from
	for cur != to {
		next := ir.Value(-1)
		for i, n := range body.Nodes {
			if reaches[i] && slices.Contains(n.Inputs, cur) {
				next = ir.Value(i)
				break
			}
		}
		n := body.Node(next)
		switch {
		case n.Op == ir.OpPermute:
			out := make(index, len(ix))
			for d, p := range n.Attrs.Perm {
				out[d] = ix[p]
			}
			ix = out
		case n.Op == ir.OpReshape:
			ix = split(n.Shape, linear(body.Node(cur).Shape, ix))
		case n.Op == ir.OpCast, n.Op.Class() == ir.ClassUnary, n.Op.Class() == ir.ClassBinary, n.Op.Class() == ir.ClassCompare, n.Op.Class() == ir.ClassSelect:
			if !n.Shape.Equal(body.Node(cur).Shape) {
				return nil, fmt.Errorf("a broadcast of the result before the output")
			}
		default:
			return nil, fmt.Errorf("a %s between the result and the output", n.Op)
		}
		cur = next
	}
	return ix, nil
}

func printAttention(k *Kernel, body *ir.Graph, s cost.Schedule) (string, error) {
	p, err := findAttention(body)
	if err != nil {
		return "", err
	}
	if len(body.Outputs) != 1 {
		return "", fmt.Errorf("attention with %d outputs", len(body.Outputs))
	}
	pv := body.Node(p.pv).Shape
	q := body.Node(p.q).Shape
	kt := body.Node(p.kt).Shape
	r := len(pv)
	S, Dv := int64(pv[r-2]), int64(pv[r-1])
	D, T := int64(q[len(q)-1]), int64(kt[len(kt)-1])
	if s == (cost.Schedule{}) {
		s = cost.Schedule{BM: 1, BN: attnTile, Threads: attnThreads}
	}
	if s.BM != 1 || s.BN != attnTile || s.BK != 0 || s.Stages != 0 || s.Rows != 0 || s.Tensor || s.Threads%32 != 0 || s.Threads > 1024 {
		return "", fmt.Errorf("attention: schedule %s: the attention form takes a query row (bm=1) and %d keys (bn) a block, 32 to 1024 threads, no tensor cores", s, attnTile)
	}
	threads := int64(s.Threads)
	if Dv > 4*threads {
		return "", fmt.Errorf("attention with value rows of %d: at most %d (4 per thread) are printed with %d threads", Dv, 4*threads, threads)
	}
	k.Schedule = s
	rows := pv.NumElements() / Dv
	batch := rows / S
	k.Block = [3]int{int(threads), 1, 1}
	k.Grid = [3]int{int(min(rows, 65535)), 1, 1}
	outV := body.Outputs[0].Value
	outShape := body.Node(outV).Shape

	// Indices over the batch dims of pv (b0..), with an operand's size-1
	// batch dims read at 0.
	opIndex := func(shape ir.Shape, row, col string) index {
		ix := make(index, len(shape))
		off := r - len(shape)
		for d := 0; d < len(shape)-2; d++ {
			if shape[d] == 1 {
				ix[d] = "0"
			} else {
				ix[d] = fmt.Sprintf("b%d", d+off)
			}
		}
		ix[len(shape)-2], ix[len(shape)-1] = row, col
		return ix
	}
	emitter := func(reduced map[ir.Value]string) *elementwise {
		return &elementwise{body: body, temps: map[string]string{}, reduced: reduced}
	}
	lines := func(b *strings.Builder, e *elementwise, indent string) {
		for _, l := range e.lines {
			b.WriteString(indent + strings.TrimPrefix(l, "    ") + "\n")
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  __shared__ float Qs[%d];\n  __shared__ float Ps[%d];\n  __shared__ float St[3];\n", D, attnTile)
	fmt.Fprintf(&b, "  for (long long row = blockIdx.x; row < %dLL; row += gridDim.x) {\n", batch*S)
	fmt.Fprintf(&b, "    long long s = row %% %dLL, bz = row / %dLL;\n", S, S)
	for d := r - 3; d >= 0; d-- {
		fmt.Fprintf(&b, "    long long b%d = bz %% %dLL; bz /= %dLL;\n", d, pv[d], pv[d])
	}
	// The query row, its prologue computed.
	e := emitter(nil)
	qv, err := e.value(p.q, opIndex(q, "s", "dd"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (long long dd = threadIdx.x; dd < %dLL; dd += blockDim.x) {\n", D)
	lines(&b, e, "      ")
	fmt.Fprintf(&b, "      Qs[dd] = %s;\n    }\n", qv)
	b.WriteString("    float m = -INFINITY, l = 0.0f;\n")
	fmt.Fprintf(&b, "    float o[%d];\n    for (int j = 0; j < %d; j++) o[j] = 0.0f;\n", (Dv+threads-1)/threads, (Dv+threads-1)/threads)
	b.WriteString("    __syncthreads();\n")
	fmt.Fprintf(&b, "    for (long long t0 = 0; t0 < %dLL; t0 += %d) {\n", T, attnTile)
	fmt.Fprintf(&b, "      if (threadIdx.x < %d) {\n", attnTile)
	b.WriteString("        long long t = t0 + threadIdx.x;\n        float sc = -INFINITY;\n")
	fmt.Fprintf(&b, "        if (t < %dLL) {\n          float dot = 0.0f;\n", T)
	ek := emitter(nil)
	kv, err := ek.value(p.kt, opIndex(kt, "dd", "t"), false)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "          for (long long dd = 0; dd < %dLL; dd++) {\n", D)
	lines(&b, ek, "            ")
	fmt.Fprintf(&b, "            dot += Qs[dd] * %s;\n          }\n", kv)
	es := emitter(map[ir.Value]string{p.qk: "dot"})
	sv, err := es.value(p.scores, opIndex(body.Node(p.scores).Shape, "s", "t"), false)
	if err != nil {
		return "", err
	}
	lines(&b, es, "          ")
	fmt.Fprintf(&b, "          sc = %s;\n        }\n", sv)
	b.WriteString(`        float mx = sc;
        for (int w = 16; w > 0; w >>= 1) { float y = __shfl_xor_sync(0xffffffffu, mx, w); mx = (mx != mx || mx > y) ? mx : y; }
        float mnew = (m != m || m > mx) ? m : mx;
        float pt = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        float ps = pt;
        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
        Ps[threadIdx.x] = pt;
        if (threadIdx.x == 0) {
          float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
          St[0] = alpha; St[1] = mnew; St[2] = l * alpha + ps;
        }
      }
      __syncthreads();
      float alpha = St[0];
      m = St[1]; l = St[2];
`)
	fmt.Fprintf(&b, "      for (int j = 0; j < %d; j++) {\n", (Dv+threads-1)/threads)
	fmt.Fprintf(&b, "        long long d = threadIdx.x + j * %d;\n        if (d >= %dLL) break;\n", threads, Dv)
	b.WriteString("        float acc = o[j] * alpha;\n")
	fmt.Fprintf(&b, "        for (int tt = 0; tt < %d && t0 + tt < %dLL; tt++) {\n          long long t = t0 + tt;\n", attnTile, T)
	ev := emitter(nil)
	vv, err := ev.value(p.v, opIndex(body.Node(p.v).Shape, "t", "d"), false)
	if err != nil {
		return "", err
	}
	lines(&b, ev, "          ")
	fmt.Fprintf(&b, "          acc += Ps[tt] * %s;\n        }\n        o[j] = acc;\n      }\n      __syncthreads();\n    }\n", vv)
	// Write the row through the views after pv.
	pix := make(index, r)
	for d := 0; d < r-2; d++ {
		pix[d] = fmt.Sprintf("b%d", d)
	}
	pix[r-2], pix[r-1] = "s", "d"
	oix, err := forward(body, p.pv, outV, pix)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "    for (int j = 0; j < %d; j++) {\n", (Dv+threads-1)/threads)
	fmt.Fprintf(&b, "      long long d = threadIdx.x + j * %d;\n      if (d >= %dLL) break;\n", threads, Dv)
	fmt.Fprintf(&b, "      out0[%s] = %s;\n    }\n", linear(outShape, oix), store(body.Node(outV).DType, "(o[j] / l)"))
	b.WriteString("    __syncthreads();\n  }\n")
	return b.String(), nil
}
