package cuda

import (
	"fmt"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// dequant is a quantized weight's element at ix, decoded where it is read
// (ir/dequant.go says where each format keeps an element's code, scale and
// zero point): the code times its scale in f32, which is exact but for
// fp8's f32 scales (one rounding, as the reference's), then rounded to the
// weight's dtype as a cast would. The matrix-vector and experts kernels
// decode whole 16-byte loads instead (gemv_quant.go); this is every other
// form's operand load. It is one expression, with no temporaries, so that
// it is safe under a guard (a pad around the weight) too.
func (e *elementwise) dequant(n *ir.Node, ix index) (string, error) {
	r := len(n.Shape)
	if r < 2 {
		return "", fmt.Errorf("dequant of rank %d", r)
	}
	batch := "0"
	if r > 2 {
		batch = "(" + linear(n.Shape[:r-2], ix[:r-2]) + ")"
	}
	row, col := ix[r-2], ix[r-1]
	rows, cols := int64(n.Shape[r-2]), int64(n.Shape[r-1])
	// The operands are kernel arguments, seen through reshapes at most
	// (a checkpoint's [N, K/2] bytes viewed as [N, K/32, 16]), which
	// keep the linear offsets computed here.
	args := make([]ir.Value, len(n.Inputs))
	for k, in := range n.Inputs {
		a, ok := ir.DequantOperand(e.body, in)
		if !ok {
			return "", fmt.Errorf("dequant operand %d is a %s, not a kernel argument (a quantized weight's operands are its packed leaves)", k, e.body.Node(in).Op)
		}
		args[k] = a
	}
	codes, scales := paramName(e.body, args[0]), paramName(e.body, args[1])
	scaleOf := func(at string) string {
		return load(e.body.Node(args[1]).DType, fmt.Sprintf("%s[%s]", scales, at))
	}
	var v string
	switch n.Format {
	case quant.MXFP4:
		kb := cols / 32
		blk := fmt.Sprintf("((%s * %dLL + %s) * %dLL + %s / 32)", batch, rows, row, kb, col)
		code := fmt.Sprintf("(((unsigned)%s[%s * 16 + %s %% 32 / 2] >> ((%s & 1) * 4)) & 15u)", codes, blk, col, col)
		v = fmt.Sprintf("lum_e2m1_to_f32(%s) * lum_e8m0_to_f32(%s[%s])", code, scales, blk)
	case quant.FP8:
		sn, sk := (rows+n.GroupN-1)/n.GroupN, (cols+n.Group-1)/n.Group
		at := fmt.Sprintf("(%s * %dLL + %s / %dLL) * %dLL + %s / %dLL", batch, sn, row, n.GroupN, sk, col, n.Group)
		v = fmt.Sprintf("lum_e4m3_to_f32(%s[(%s * %dLL + %s) * %dLL + %s]) * %s", codes, batch, rows, row, cols, col, scaleOf(at))
	case quant.AWQ, quant.GPTQ:
		K, N, g := rows, cols, n.Group
		k, c := row, col
		zeros := paramName(e.body, args[2])
		grp := fmt.Sprintf("(%s * %dLL + %s / %dLL)", batch, K/g, k, g)
		z := fmt.Sprintf("lum_awq_nibble((unsigned)%s[%s * %dLL + %s / 8], (unsigned)(%s %% 8))", zeros, grp, N/8, c, c)
		q := fmt.Sprintf("lum_awq_nibble((unsigned)%s[(%s * %dLL + %s) * %dLL + %s / 8], (unsigned)(%s %% 8))", codes, batch, K, k, N/8, c, c)
		if n.Format == quant.GPTQ {
			z = fmt.Sprintf("(lum_gptq_nibble((unsigned)%s[%s * %dLL + %s / 8], (unsigned)(%s %% 8)) + 1u)", zeros, grp, N/8, c, c)
			q = fmt.Sprintf("lum_gptq_nibble((unsigned)%s[(%s * %dLL + %s / 8) * %dLL + %s], (unsigned)(%s %% 8))", codes, batch, K/8, k, N, c, k)
		}
		v = fmt.Sprintf("(float)((int)%s - (int)%s) * %s", q, z, scaleOf(fmt.Sprintf("%s * %dLL + %s", grp, N, c)))
	default:
		return "", fmt.Errorf("dequant of format %s", n.Format)
	}
	return castExpr(ir.F32, n.DType, v), nil
}
