package cost

import "github.com/lumsearch/lumsearch/ir"

// DirectLoad says where a matmul operand that is a plain buffer lives, so
// that a kernel can copy it with 16-byte loads instead of computing it
// element by element through the scalar prologue.
type DirectLoad struct {
	// Buf is the kernel input the operand reads.
	Buf ir.Value
	// BufShape is the shape whose linear offset of the index (reduced
	// axis K last) addresses Buf: the operand's own shape for a left
	// operand, the transposed source's for a right one.
	BufShape ir.Shape
	// FoldK, when set, says the right operand's batch axes are a split
	// of K (a split-K batch of a transposed weight [N, FoldK]): its
	// element (b..., k, n) is BufShape's (n, bflat * K + k), bflat the
	// linear index of b... in the operand's batch axes. Only
	// DirectFoldedOperand returns such loads.
	FoldK int64
	// Parts, when set, says the operand is a concatenation along its
	// columns of direct operands (a merged projection's weights read in
	// place from their own buffers: cost.GEMVWeight), in order; each
	// part's Cols is its column count. Buf and BufShape are then the
	// first part's.
	Parts []DirectLoad
	Cols  int64
}

// DirectOperand reports whether matmul operand v (of dtype dt, K its
// reduced length) is a plain buffer read with K contiguous: an input of
// dtype dt seen through reshapes (which keep the linear order), or, for
// the right operand (right true, read transposed), the permutation
// swapping the last two axes of such a value (an nn.Linear weight [N, K]).
// K must be a multiple of 8, so that every 16-byte chunk of a row is
// aligned and whole. The model prices a direct operand as streamed 16-byte
// copies; any other operand is computed per element.
func DirectOperand(body *ir.Graph, v ir.Value, dt ir.DType, K int64, right bool) (DirectLoad, bool) {
	if K%8 != 0 {
		return DirectLoad{}, false
	}
	if right {
		n := body.Node(v)
		if n.Op != ir.OpPermute {
			return DirectLoad{}, false
		}
		r := len(n.Attrs.Perm)
		for d, p := range n.Attrs.Perm {
			want := d
			switch d {
			case r - 2:
				want = r - 1
			case r - 1:
				want = r - 2
			}
			if p != want {
				return DirectLoad{}, false
			}
		}
		v = n.Inputs[0]
	}
	shape := body.Node(v).Shape
	for body.Node(v).Op == ir.OpReshape {
		v = body.Node(v).Inputs[0]
	}
	n := body.Node(v)
	if n.Op != ir.OpInput || n.DType != dt {
		return DirectLoad{}, false
	}
	return DirectLoad{Buf: v, BufShape: shape}, true
}

// DirectFoldedOperand is DirectOperand for a right operand, also
// recognising a transposed weight whose K axis a reshape splits into
// batches (a split-K matmul's weight: reshape(permute(W [N, K']), [S, K,
// N]) with S K = K'), which it returns with FoldK set. K must be a
// multiple of 8 either way.
func DirectFoldedOperand(body *ir.Graph, v ir.Value, dt ir.DType, K int64) (DirectLoad, bool) {
	if d, ok := DirectOperand(body, v, dt, K, true); ok {
		return d, true
	}
	if K%8 != 0 {
		return DirectLoad{}, false
	}
	shape := body.Node(v).Shape
	r := len(shape)
	for body.Node(v).Op == ir.OpReshape {
		v = body.Node(v).Inputs[0]
	}
	n := body.Node(v)
	if n.Op != ir.OpPermute || len(n.Shape) != 2 || r < 3 || n.Shape[1] != shape[r-1] {
		return DirectLoad{}, false
	}
	d, ok := DirectOperand(body, v, dt, int64(n.Shape[0]), true)
	if !ok || int64(n.Shape[0])%K != 0 {
		return DirectLoad{}, false
	}
	d.FoldK = int64(n.Shape[0])
	return d, true
}
