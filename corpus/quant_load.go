package corpus

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/safetensors"
)

// packedRole is what a weight leaf is to the dequant that reads it: its
// format, which operand (0 codes, 1 scales, 2 zero points) and the
// dequant's grouping.
type packedRole struct {
	dq      *ir.Node
	operand int
}

// packedRoles maps each weight leaf of g that a dequant reads to its
// role there.
func packedRoles(g *ir.Graph) map[ir.Value]packedRole {
	out := map[ir.Value]packedRole{}
	for _, p := range packedWeights(g) {
		for i, v := range p.leaves {
			out[v] = packedRole{dq: p.node, operand: i}
		}
	}
	return out
}

// fileDTypes are the checkpoint dtypes a packed leaf may have: fp8's
// codes e4m3; mxfp4's blocks bytes and its scales bytes or e8m0; awq's and
// gptq's words i32; scales any float dtype (converted exactly to f32, or
// to an f16 leaf when f16 holds every scale exactly: a bf16 scale past
// f16's range or below its subnormal step is refused, not rounded).
func (r packedRole) fileDTypes() []string {
	switch {
	case r.dq.Format == quant.FP8 && r.operand == 0:
		return []string{"F8_E4M3"}
	case r.dq.Format == quant.MXFP4 && r.operand == 0:
		return []string{"U8"}
	case r.dq.Format == quant.MXFP4:
		return []string{"U8", "F8_E8M0"}
	case r.operand == 1:
		return []string{"F32", "BF16", "F16"}
	}
	return []string{"I32"}
}

// stackAxis is the axis of one expert's tensor along which a stacked
// packed leaf joins the parts' tensors: their outputs, the rows of
// mxfp4's and fp8's tensors and the columns of awq's and gptq's.
func (r packedRole) stackAxis(rank int) int {
	if r.dq.Format == quant.AWQ || r.dq.Format == quant.GPTQ {
		return rank - 1
	}
	return 0
}

// sameElements says whether a checkpoint's shape holds a leaf's elements
// in the leaf's order: the same dims, or for an fp8 scale the same dims
// but for extents of 1 (a per-tensor scale stored as [] or [1] for the
// graph's [1, 1]).
func (r packedRole) sameElements(file []int64, s ir.Shape) bool {
	if sameDims(file, s) {
		return true
	}
	if r.dq.Format != quant.FP8 || r.operand != 1 {
		return false
	}
	squeeze := func(d []int64) []int64 {
		return slices.DeleteFunc(slices.Clone(d), func(x int64) bool { return x == 1 })
	}
	return slices.Equal(squeeze(file), squeeze(shapeInts(s)))
}

// packedTensor makes leaf n, of role r, from its checkpoint tensor t.
func packedTensor(t safetensors.Tensor, n *ir.Node, r packedRole) (*ir.Tensor, error) {
	if want := r.fileDTypes(); !slices.Contains(want, t.DType) {
		return nil, fmt.Errorf("dtype %s, want %s (%s %s)", t.DType, strings.Join(want, " or "), r.dq.Format, []string{"codes", "scales", "zero points"}[r.operand])
	}
	if !r.sameElements(t.Shape, n.Shape) {
		return nil, fmt.Errorf("shape %v, want %v (%s %s)", t.Shape, shapeInts(n.Shape), r.dq.Format, []string{"codes", "scales", "zero points"}[r.operand])
	}
	if n.DType.IsFloat() {
		if name, _ := safetensors.DTypeName(n.DType); t.DType == name {
			return weightTensor(t, n.DType, n.Shape)
		}
		// The leaf's dtype is the kernels' (awq's and gptq's f16
		// scales), not the checkpoint's: a scale it would round is
		// refused rather than changed.
		vals, err := t.Float32s() // fileDTypes: a float dtype
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			if got := float32(n.DType.Round(float64(v))); got != v && !(math.IsNaN(float64(v)) && math.IsNaN(float64(got))) {
				return nil, fmt.Errorf("element %d is %g in the checkpoint's %s, which %s does not hold exactly (%g): %s scales are read as %s", i, v, t.DType, n.DType, got, r.dq.Format, n.DType)
			}
		}
		return ir.TensorOfFloat32(n.DType, n.Shape, vals)
	}
	d, err := safetensors.Decode(t)
	if err != nil {
		return nil, err
	}
	d.Shape = n.Shape.Clone()
	return d, nil
}

// assemblePacked makes the stacked packed leaf n (shape [experts, ...])
// from each expert's parts, named by st, joined along r's axis.
func assemblePacked(set *safetensors.Set, st Stacked, n *ir.Node, r packedRole) (*ir.Tensor, error) {
	E := int(n.Shape[0])
	part := n.Shape[1:].Clone()
	axis := r.stackAxis(len(part))
	parts := len(st.parts)
	if int(part[axis])%parts != 0 {
		return nil, fmt.Errorf("stacked weight %s: shape %v does not split into %d parts", n.Name, n.Shape, parts)
	}
	part[axis] /= ir.Dim(parts)
	out := ir.NewTensor(n.DType, n.Shape)
	// A part's tensor is outer × its extent × inner, placed at its
	// offset along the stacked extent.
	outer, inner := part[:axis].NumElements(), part[axis+1:].NumElements()
	ext := int64(part[axis])
	for e := range E {
		for p, name := range st.Names(e) {
			t, ok := set.Tensor(name)
			if !ok {
				return nil, fmt.Errorf("stacked weight %s: %s: missing", n.Name, name)
			}
			pn := &ir.Node{Attrs: ir.Attrs{Name: name}, DType: n.DType, Shape: part}
			src, err := packedTensor(t, pn, r)
			if err != nil {
				return nil, fmt.Errorf("stacked weight %s: %s: %w", n.Name, name, err)
			}
			for o := range outer {
				for x := range ext {
					for i := range inner {
						j := int64(e)*outer*ext*int64(parts)*inner + (o*ext*int64(parts)+int64(p)*ext+x)*inner + i
						s := (o*ext+x)*inner + i
						if n.DType.IsFloat() {
							out.Set(j, src.At(s))
						} else {
							out.SetInt(j, src.Int(s))
						}
					}
				}
			}
		}
	}
	return out, nil
}

// checkGIdx checks the g_idx tensors of g's gptq weights, which the graph
// does not declare: present, each must give input k the group k / group,
// the order desc_act false means; a checkpoint may leave them out.
func checkGIdx(set *safetensors.Set, g *ir.Graph) []string {
	var problems []string
	for _, p := range packedWeights(g) {
		if p.node.Format != quant.GPTQ {
			continue
		}
		qw := g.Node(p.leaves[0]).Name
		base := strings.TrimSuffix(qw, ".qweight")
		names := []string{base + ".g_idx"}
		if st, ok := ParseStacked(base + ".g_idx"); ok {
			names = nil
			for e := range int(p.node.Shape[0]) {
				names = append(names, st.Names(e)...)
			}
		}
		K := p.node.Shape[len(p.node.Shape)-2]
		for _, name := range names {
			t, ok := set.Tensor(name)
			if !ok {
				continue
			}
			if t.DType != "I32" || !slices.Equal(t.Shape, []int64{int64(K)}) {
				problems = append(problems, fmt.Sprintf("%s: %s%v, want I32[%d]", name, t.DType, t.Shape, K))
				continue
			}
			d, err := safetensors.Decode(t)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			for k := range d.Len() {
				if d.Int(k) != k/p.node.Group {
					problems = append(problems, fmt.Sprintf("%s: input %d is in group %d, not %d: act-order (desc_act) weights are not supported", name, k, d.Int(k), k/p.node.Group))
					break
				}
			}
		}
	}
	return problems
}
