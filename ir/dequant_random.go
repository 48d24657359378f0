package ir

import (
	"math/rand/v2"
	"slices"

	"github.com/lumsearch/lumsearch/quant"
)

// dequantFeeds redraws the packed operands of every dequant whose operand
// is a leaf (and not one the caller stated a range for) so that they mean
// what a checkpoint's do: any code (but fp8's NaN codes), scales that
// give weights of a trained model's size (|w| up to about 0.05 to 0.1,
// never the e8m0 NaN), any zero point. A plain random draw of a u8 scale
// would make weights of 2^128, or NaN.
func dequantFeeds(g *Graph, seed uint64, out map[string]*Tensor, stated map[string]Range) error {
	done := map[string]bool{}
	for i, n := range g.Nodes {
		if n.Op != OpDequant {
			continue
		}
		for k, v := range n.Inputs {
			if lv, ok := DequantOperand(g, v); ok {
				v = lv // a leaf seen through reshapes holds the same elements
			}
			leaf := g.Nodes[v]
			_, drawn := out[leaf.Name]
			_, fixed := stated[leaf.Name]
			if !drawn || fixed || done[leaf.Name] || !slices.Contains([]Op{OpInput, OpWeight, OpState}, leaf.Op) {
				continue
			}
			done[leaf.Name] = true
			rng := rand.New(rand.NewPCG(seed, 0xde9^uint64(i)<<8^uint64(k)))
			t := NewTensor(leaf.DType, leaf.Shape)
			for j := range t.Len() {
				switch {
				case k == 0 && n.Format == quant.FP8:
					c := rng.IntN(254) // 0x7F and 0xFF are NaN
					if c >= 0x7F {
						c++
					}
					t.SetInt(j, int64(c))
				case k == 1 && n.Format == quant.MXFP4:
					t.SetInt(j, int64(119+rng.IntN(6))) // 2^-8 .. 2^-3
				case k == 1 && n.Format == quant.FP8:
					t.Set(j, (1+rng.Float64())/8192) // 448 / 8192 ≈ 0.05
				case k == 1:
					t.Set(j, 0.001+0.003*rng.Float64()) // 15 steps ≈ 0.05
				case leaf.DType == U8:
					t.SetInt(j, int64(rng.IntN(256)))
				default:
					t.SetInt(j, int64(int32(rng.Uint32())))
				}
			}
			out[leaf.Name] = t
		}
	}
	return nil
}
