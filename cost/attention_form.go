package cost

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
)

// AttentionParts name the nodes of an attention body in its eager form
// (Decompose writes the attention op that way): Probs x V, where Probs is
// softmax(Scores) along the keys and Scores is computed elementwise from
// QK = Q x KT.
type AttentionParts struct {
	QK, PV   ir.Value // the two matmuls
	Q, KT, V ir.Value // QK's operands and PV's right operand
	Scores   ir.Value // the softmax's input
	Probs    ir.Value // PV's left operand past its casts: the softmax's division
}

// Attention finds the parts of an eager attention body (two matmuls, no
// composite ops: Decompose first) and checks what the attention form
// computes: the second matmul's left operand is, up to casts,
// exp(s - max(s)) / sum(exp(s - max(s))) along the last axis (casts are
// skipped: the kernel keeps the probabilities in f32), and the scores s
// are QK's elements through elementwise ops and casts, whose other
// operands (a mask, a bias) do not depend on QK.
func Attention(body *ir.Graph) (AttentionParts, error) {
	var mms []ir.Value
	for i, n := range body.Nodes {
		if n.Op == ir.OpMatMul {
			mms = append(mms, ir.Value(i))
		}
	}
	if len(mms) != 2 {
		return AttentionParts{}, fmt.Errorf("attention with %d matmuls", len(mms))
	}
	p := AttentionParts{QK: mms[0], PV: mms[1]}
	qk, pv := body.Node(p.QK), body.Node(p.PV)
	p.Q, p.KT, p.V, p.Probs = qk.Inputs[0], qk.Inputs[1], pv.Inputs[1], pv.Inputs[0]
	for body.Node(p.Probs).Op == ir.OpCast {
		p.Probs = body.Node(p.Probs).Inputs[0]
	}
	// softmax(s) = exp(s - expand(max(s))) / expand(sum(exp(...))).
	noSoftmax := func(n *ir.Node) error {
		return fmt.Errorf("attention whose probabilities are no softmax (a %s where the softmax's division, exponential or reductions should be)", n.Op)
	}
	div := body.Node(p.Probs)
	if div.Op != ir.OpDiv {
		return p, noSoftmax(div)
	}
	ex, den := body.Node(div.Inputs[0]), body.Node(div.Inputs[1])
	if ex.Op != ir.OpExp {
		return p, noSoftmax(ex)
	}
	if den.Op != ir.OpExpand || body.Node(den.Inputs[0]).Op != ir.OpSum || body.Node(den.Inputs[0]).Inputs[0] != div.Inputs[0] {
		return p, noSoftmax(den)
	}
	sub := body.Node(ex.Inputs[0])
	if sub.Op != ir.OpSub || body.Node(sub.Inputs[1]).Op != ir.OpExpand {
		return p, noSoftmax(sub)
	}
	mx := body.Node(body.Node(sub.Inputs[1]).Inputs[0])
	if mx.Op != ir.OpMaxReduce || mx.Inputs[0] != sub.Inputs[0] {
		return p, noSoftmax(mx)
	}
	for _, red := range []*ir.Node{mx, body.Node(den.Inputs[0])} {
		in := body.Node(red.Inputs[0]).Shape
		if ax := red.Attrs.Axis; ax != -1 && ax != len(in)-1 {
			return p, fmt.Errorf("attention with a softmax across axis %d, not the keys", ax)
		}
	}
	p.Scores = sub.Inputs[0]
	if !body.Node(p.Scores).Shape.Equal(qk.Shape) {
		return p, fmt.Errorf("attention whose scores %v are not the first matmul's %v elementwise", body.Node(p.Scores).Shape, qk.Shape)
	}
	fromQK := make([]bool, len(body.Nodes))
	for i, n := range body.Nodes {
		fromQK[i] = ir.Value(i) == p.QK
		for _, in := range n.Inputs {
			fromQK[i] = fromQK[i] || fromQK[in]
		}
	}
	// The scores come from QK through elementwise ops and casts; any other
	// op on the way is a leaf of the score expression (a mask read through
	// its views), which must not need QK.
	seen := map[ir.Value]bool{}
	var check func(v ir.Value) error
	check = func(v ir.Value) error {
		if v == p.QK || seen[v] {
			return nil
		}
		seen[v] = true
		n := body.Node(v)
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			if n.Op != ir.OpCast {
				if fromQK[v] {
					return fmt.Errorf("attention whose scores pass through a %s of the first matmul's result (they are computed elementwise, a key at a time)", n.Op)
				}
				return nil
			}
		}
		for _, in := range n.Inputs {
			if err := check(in); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check(p.Scores); err != nil {
		return p, err
	}
	return p, nil
}

// attentionStructure checks an eager attention body (Attention) with one
// output, written through an epilogue that keeps the elements in place.
func attentionStructure(body *ir.Graph) error {
	p, err := Attention(body)
	if err != nil {
		return err
	}
	if len(body.Outputs) != 1 {
		return fmt.Errorf("attention with %d outputs (it writes its result only)", len(body.Outputs))
	}
	return epilogueStructure(body, p.PV, "attention")
}
