package corpus

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// packedWeight is one dequant of a graph and the weights it reads: its
// codes, scales and (awq, gptq) zero points, each a weight leaf read
// directly or through a reshape (mxfp4's packed nn.Linear weight).
type packedWeight struct {
	node   *ir.Node // the dequant
	leaves []ir.Value
}

// packedWeights lists g's dequants whose operands are all weights, in the
// graph's order.
func packedWeights(g *ir.Graph) []packedWeight {
	var out []packedWeight
	for _, n := range g.Nodes {
		if n.Op != ir.OpDequant {
			continue
		}
		p := packedWeight{node: n}
		for _, in := range n.Inputs {
			for g.Node(in).Op == ir.OpReshape {
				in = g.Node(in).Inputs[0]
			}
			if g.Node(in).Op != ir.OpWeight {
				p.leaves = nil
				break
			}
			p.leaves = append(p.leaves, in)
		}
		if p.leaves != nil {
			out = append(out, p)
		}
	}
	return out
}

// layout is the dequant's result as batches of rows × cols (its leading
// axes flattened) and which of rows and cols are N and K.
func (p packedWeight) layout() (batch, rows, cols int) {
	s := p.node.Shape
	r := len(s)
	rows, cols = int(s[r-2]), int(s[r-1])
	return int(s.NumElements()) / (rows * cols), rows, cols
}

// randomPacked draws the float values of p's weight, normal with
// RandomWeights' std, in the dequant's result layout, from a generator
// keyed by the codes' name (so that a layer's weights are the same in
// every graph that has them), and packs them into p's leaves with the
// format's packer: the bytes a checkpoint of that weight would hold.
func randomPacked(g *ir.Graph, p packedWeight, seed uint64) (map[string]*ir.Tensor, error) {
	codes := g.Node(p.leaves[0])
	h := fnv.New64a()
	h.Write([]byte(codes.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	batch, rows, cols := p.layout()
	w32 := make([]float32, batch*rows*cols)
	fillNormal(rng, w32, weightStd)
	a := p.node.Attrs
	// Each leaf's elements at its own width (a real-shape expert weight
	// is gigabytes of codes): bytes for u8 leaves, words for i32 ones.
	var bytes [2][]uint8 // mxfp4 blocks and scales, fp8 codes
	var words [3][]int32 // awq/gptq qweight and (third leaf) qzeros
	var floats []float64 // fp8, awq and gptq scales
	plane := rows * cols
	wb := make([]float64, plane) // one batch's plane at a time
	for b := range batch {
		for j, v := range w32[b*plane : (b+1)*plane] {
			wb[j] = float64(v)
		}
		var err error
		switch a.Format {
		case quant.MXFP4:
			var blocks, scales []uint8
			if blocks, scales, err = packMXFP4(wb, rows, cols); err == nil {
				bytes[0], bytes[1] = append(bytes[0], blocks...), append(bytes[1], scales...)
			}
		case quant.FP8:
			var c []uint8
			var s []float32
			if c, s, err = packFP8(wb, rows, cols, int(a.GroupN), int(a.Group)); err == nil {
				bytes[0] = append(bytes[0], c...)
				for _, v := range s {
					floats = append(floats, float64(v))
				}
			}
		case quant.AWQ, quant.GPTQ:
			pack := packAWQ
			if a.Format == quant.GPTQ {
				pack = packGPTQ
			}
			var qw, qz []int32
			var s []float64
			if qw, qz, s, err = pack(wb, rows, cols, int(a.Group)); err == nil {
				words[0], words[2] = append(words[0], qw...), append(words[2], qz...)
				floats = append(floats, s...)
			}
		default:
			err = fmt.Errorf("format %s", a.Format)
		}
		if err != nil {
			return nil, fmt.Errorf("random weights: %s: %w", codes.Name, err)
		}
	}
	out := map[string]*ir.Tensor{}
	for i, v := range p.leaves {
		n := g.Node(v)
		var t *ir.Tensor
		var err error
		switch {
		case n.DType.IsFloat():
			t, err = ir.TensorOf(n.DType, n.Shape, floats...)
		case n.DType == ir.U8 && i < len(bytes):
			t, err = ir.TensorOfBytes(n.Shape, bytes[i])
		case n.DType == ir.I32:
			t = ir.NewTensor(ir.I32, n.Shape)
			if len(words[i]) != len(t.I32) {
				err = fmt.Errorf("tensor i32%v: %d values; want %d", n.Shape, len(words[i]), len(t.I32))
			}
			copy(t.I32, words[i])
		default:
			err = fmt.Errorf("a %s leaf of a %s weight", n.DType, a.Format)
		}
		if err != nil {
			return nil, fmt.Errorf("random weights: weight %q: %w", n.Name, err)
		}
		out[n.Name] = t
	}
	return out, nil
}

// Params is the number of parameters of the model g computes: each weight
// leaf's elements, but a quantized weight's values (its dequant's result)
// in place of its packed codes, scales and zero points, so that a model
// has as many parameters quantized as in its float checkpoint.
func Params(g *ir.Graph) int64 {
	n := g.NumParams()
	for _, p := range packedWeights(g) {
		for _, v := range p.leaves {
			n -= g.Node(v).Shape.NumElements()
		}
		n += p.node.Shape.NumElements()
	}
	return n
}
