package corpus

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// The reference decoding of a quantized checkpoint's tensors, written
// from the formats' definitions (transformers' FP4_VALUES table,
// AutoAWQ's and AutoGPTQ's bit layouts) rather than from the dequant op,
// so that the graphs' names, shapes, layouts and transposes are checked
// against what the checkpoints mean.

// e2m1Values is transformers' FP4_VALUES: code c's value.
var e2m1Values = [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}

// awqShifts is where AutoAWQ's GEMM packing puts column j of a word
// (its reverse order 0, 4, 1, 5, 2, 6, 3, 7 read backwards).
var awqShifts = [8]uint{0, 16, 4, 20, 8, 24, 12, 28}

// refMatrix decodes the weight whose float tensor is named name (as the
// float graph names it) from ws, the quantized graph's weights, into its
// values [batch, n, k] row-major: n outputs, k inputs. f, group and
// groupN are the format and grouping.
func refMatrix(t *testing.T, ws map[string]*ir.Tensor, name string, f quant.Format, batch, n, k, group, groupN int) []float64 {
	t.Helper()
	get := func(names ...string) *ir.Tensor {
		for _, nm := range names {
			if w, ok := ws[nm]; ok {
				return w
			}
		}
		require.Failf(t, "missing tensor", "none of %v", names)
		return nil
	}
	out := make([]float64, batch*n*k)
	base := strings.TrimSuffix(name, ".weight")
	for b := range batch {
		for r := range n {
			for c := range k {
				var v float64
				switch f {
				case quant.MXFP4:
					blocks, scales := get(name+"_blocks", name+"_packed"), get(name+"_scales", name+"_scale")
					byteAt := int64((b*n+r)*k/2 + c/2)
					code := blocks.Int(byteAt)
					if c%2 == 1 {
						code >>= 4
					}
					s := scales.Int(int64((b*n+r)*k/32 + c/32))
					v = e2m1Values[code&15] * pow2(int(s)-127)
				case quant.FP8:
					codes, scales := get(name), get(name+"_scale_inv", name+"_scale")
					sk := (k + group - 1) / group
					sn := (n + groupN - 1) / groupN
					s := scales.At(int64((b*sn+r/groupN)*sk + c/group))
					v = quant.E4M3(uint8(codes.Int(int64((b*n+r)*k+c)))) * s
				case quant.AWQ, quant.GPTQ:
					qw, qz, sc := get(base+".qweight"), get(base+".qzeros"), get(base+".scales")
					g := c / group
					gs := k / group
					s := sc.At(int64((b*gs+g)*n + r))
					zw := uint32(qz.Int(int64((b*gs+g)*(n/8) + r/8)))
					if f == quant.AWQ {
						w := uint32(qw.Int(int64((b*k+c)*(n/8) + r/8)))
						q, z := w>>awqShifts[r%8]&15, zw>>awqShifts[r%8]&15
						v = float64(int(q)-int(z)) * s
					} else {
						w := uint32(qw.Int(int64((b*(k/8)+c/8)*n + r)))
						q, z := w>>(4*uint(c%8))&15, zw>>(4*uint(r%8))&15
						v = float64(int(q)-int(z)-1) * s
					}
				}
				out[(b*n+r)*k+c] = v
			}
		}
	}
	return out
}

func pow2(e int) float64 {
	v := 1.0
	for ; e > 0; e-- {
		v *= 2
	}
	for ; e < 0; e++ {
		v /= 2
	}
	return v
}

// floatWeights gives the float graph fg the quantized graph qg's weights
// ws: the tensors both have as they are, and each of fg's quantized
// weights decoded (refMatrix), rounded to its dtype and laid out as fg
// declares it ([n, k] for an nn.Linear, [batch, k, n] for experts).
func floatWeights(t *testing.T, fg, qg *ir.Graph, ws map[string]*ir.Tensor) map[string]*ir.Tensor {
	t.Helper()
	// The grouping of each quantized weight, by its float tensor's name.
	type info struct {
		f             quant.Format
		group, groupN int
	}
	infos := map[string]info{}
	for _, p := range packedWeights(qg) {
		name := qg.Node(p.leaves[0]).Name
		for _, suf := range []string{"_blocks", "_packed"} {
			name = strings.TrimSuffix(name, suf)
		}
		if strings.HasSuffix(name, ".qweight") {
			name = strings.TrimSuffix(name, ".qweight")
			if !strings.HasSuffix(name, "_proj") || strings.Contains(name, "*") || !strings.Contains(name, ".experts.") {
				name += ".weight"
			}
		}
		a := p.node.Attrs
		infos[name] = info{a.Format, int(a.Group), int(a.GroupN)}
	}
	out := map[string]*ir.Tensor{}
	for _, v := range fg.Weights() {
		n := fg.Node(v)
		if w, ok := ws[n.Name]; ok && w.DType == n.DType {
			out[n.Name] = w
			continue
		}
		in, ok := infos[n.Name]
		require.True(t, ok, "%s is neither in the quantized graph nor quantized there", n.Name)
		s := n.Shape
		r := len(s)
		linear := r == 2
		batch, N, K := 1, int(s[0]), int(s[1])
		if !linear {
			batch, K, N = int(s[0]), int(s[1]), int(s[2])
		}
		m := refMatrix(t, ws, n.Name, in.f, batch, N, K, in.group, in.groupN)
		vals := make([]float64, len(m))
		for b := range batch {
			for i := range N {
				for j := range K {
					x := m[(b*N+i)*K+j]
					if linear {
						vals[i*K+j] = x
					} else {
						vals[(b*K+j)*N+i] = x
					}
				}
			}
		}
		tt, err := ir.TensorOf(n.DType, n.Shape, vals...)
		require.NoError(t, err)
		out[n.Name] = tt
	}
	return out
}
