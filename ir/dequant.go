package ir

import (
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/quant"
)

// A quantized weight is its packed codes, scales and zero points as the
// checkpoint stores them, leaves of their own storage dtypes, and a
// dequant op that gives the weight's values. Dequant has no kernel of its
// own: it is fused into the loads of the kernels that read the weight, so
// that the packed bytes are what moves. Its operands, for leading batch
// axes B (the experts of a stacked expert weight) and a weight of N
// output and K reduction elements:
//
//   - mxfp4: blocks u8 [B.., N, K/32, 16] (two e2m1 codes a byte, the low
//     nibble the even index) and scales u8 [B.., N, K/32] (e8m0); the
//     result is [B.., N, K] (gpt-oss's `*_blocks` and `*_scales`).
//   - fp8: codes u8 [B.., N, K] (e4m3) and scales f32 [B.., ⌈N/GroupN⌉,
//     ⌈K/Group⌉] (one per GroupN × Group block: per tensor, per output
//     channel or 128 × 128); the result is [B.., N, K].
//   - awq: qweight i32 [B.., K, N/8] (eight columns a word in AWQ's
//     order), qzeros i32 [B.., K/Group, N/8] (the same order) and scales
//     [B.., K/Group, N]; the result is [B.., K, N], (q − z) × s.
//   - gptq: qweight i32 [B.., K/8, N] (eight reduction elements a word,
//     in order), qzeros i32 [B.., K/Group, N/8] (stored minus one) and
//     scales [B.., K/Group, N]; the result is [B.., K, N], (q − z − 1) × s.
//
// Every element is its code's value times its scale (its scale group's),
// computed exactly and rounded once to the result's dtype, as a kernel
// that multiplies in f32 and rounds to the dtype computes it (the products
// are exact in f32 for every format but fp8, whose f32 product rounds once
// before the dtype's rounding, as Round goes through float32 too).

// Dequant gives a quantized weight's values in dtype dt from its packed
// operands (zeros only for awq and gptq).
func (b *Builder) Dequant(f quant.Format, dt DType, group, groupN int64, codes, scales Value, zeros ...Value) Value {
	return b.Apply(OpDequant, Attrs{DType: dt, Format: f, Group: group, GroupN: groupN}, append([]Value{codes, scales}, zeros...)...)
}

// dequantLayout is where each element of a dequant's result comes from.
type dequantLayout struct {
	f       quant.Format
	batch   int64 // product of the leading axes
	N, K    int64
	group   int64
	groupN  int64
	sn, sk  int64 // fp8: scale blocks along N and K
	rowsOut int64 // the result's second-to-last extent (N, or K for awq and gptq)
	colsOut int64
}

func newDequantLayout(a Attrs, out Shape) dequantLayout {
	r := len(out)
	l := dequantLayout{f: a.Format, group: a.Group, groupN: a.GroupN, rowsOut: int64(out[r-2]), colsOut: int64(out[r-1])}
	l.batch = out.NumElements() / (l.rowsOut * l.colsOut)
	switch a.Format {
	case quant.AWQ, quant.GPTQ:
		l.K, l.N = l.rowsOut, l.colsOut
	default:
		l.N, l.K = l.rowsOut, l.colsOut
	}
	if a.Format == quant.FP8 {
		l.sn, l.sk = ceilDiv(l.N, a.GroupN), ceilDiv(l.K, a.Group)
	}
	return l
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// dequantSource is the operand elements one result element reads: the
// code's element (a byte or word) and which 4-bit field of it (-1 for a
// whole byte), the scale's element, and for awq and gptq the zero point's
// word and field.
type dequantSource struct {
	code      int64
	field     int
	scale     int64
	zero      int64
	zeroField int
}

func (l dequantLayout) source(j int64) dequantSource {
	plane := l.rowsOut * l.colsOut
	b, r, c := j/plane, j%plane/l.colsOut, j%l.colsOut
	switch l.f {
	case quant.MXFP4:
		n, k, kb := r, c, l.K/32
		blk := (b*l.N+n)*kb + k/32
		return dequantSource{code: blk*16 + k%32/2, field: int(k % 2), scale: blk}
	case quant.FP8:
		n, k := r, c
		return dequantSource{code: j, field: -1, scale: (b*l.sn+n/l.groupN)*l.sk + k/l.group}
	}
	k, n, g := r, c, l.K/l.group
	zs := dequantSource{scale: (b*g+k/l.group)*l.N + n, zero: (b*g+k/l.group)*(l.N/8) + n/8, zeroField: int(n % 8)}
	if l.f == quant.AWQ {
		zs.code, zs.field = (b*l.K+k)*(l.N/8)+n/8, int(n%8)
	} else {
		zs.code, zs.field = (b*(l.K/8)+k/8)*l.N+n, int(k%8)
	}
	return zs
}

// dequantValue is one element's value before the result's rounding, from
// its operand elements as source reads them.
func dequantValue(f quant.Format, s dequantSource, code, scale float64, zero int64) float64 {
	switch f {
	case quant.MXFP4:
		c := uint8(code)
		if s.field == 1 {
			c >>= 4
		}
		return quant.E2M1(c&15) * quant.E8M0(uint8(scale))
	case quant.FP8:
		return quant.E4M3(uint8(code)) * scale
	case quant.AWQ:
		q := quant.AWQNibble(uint32(int64(code)), s.field)
		z := quant.AWQNibble(uint32(zero), s.zeroField)
		return float64(int(q)-int(z)) * scale
	}
	q := quant.GPTQNibble(uint32(int64(code)), s.field)
	z := quant.GPTQNibble(uint32(zero), s.zeroField)
	return float64(int(q)-int(z)-1) * scale
}

func inferDequant(a Attrs, in []ValueType) (Shape, DType, error) {
	if !a.DType.IsFloat() {
		return nil, 0, fmt.Errorf("dtype %s; a dequantized weight is f32, f16 or bf16", a.DType)
	}
	codes, scales := in[0], in[1]
	zero := a.Format == quant.AWQ || a.Format == quant.GPTQ
	if zero != (len(in) == 3) {
		return nil, 0, fmt.Errorf("%s takes %s", a.Format, map[bool]string{true: "codes, scales and zero points", false: "codes and scales"}[zero])
	}
	want := func(what string, t ValueType, dt DType, s Shape) error {
		if t.DType != dt || !t.Shape.Equal(s) {
			return fmt.Errorf("%s %s: %s must be %s%v", a.Format, what, ValueType{t.Shape, t.DType}, dt, s)
		}
		return nil
	}
	r := len(codes.Shape)
	for i, d := range codes.Shape {
		if d == 0 {
			return nil, 0, fmt.Errorf("%s codes %s%v: extent 0 on axis %d (a weight has elements)", a.Format, codes.DType, codes.Shape, i)
		}
	}
	switch a.Format {
	case quant.MXFP4:
		if r < 3 || codes.Shape[r-1] != 16 {
			return nil, 0, fmt.Errorf("mxfp4 blocks must be u8[.., N, K/32, 16], got %s%v", codes.DType, codes.Shape)
		}
		if a.Group != 32 || a.GroupN != 0 {
			return nil, 0, fmt.Errorf("mxfp4 takes group=32 (its block), got group=%d group_n=%d", a.Group, a.GroupN)
		}
		lead := codes.Shape[:r-1]
		if err := want("blocks", codes, U8, codes.Shape); err != nil {
			return nil, 0, err
		}
		if err := want("scales", scales, U8, lead); err != nil {
			return nil, 0, err
		}
		out := codes.Shape[:r-1].Clone()
		out[r-2] *= 32
		return out, a.DType, nil
	case quant.FP8:
		if r < 2 || a.Group < 1 || a.GroupN < 1 {
			return nil, 0, fmt.Errorf("fp8 codes must be u8[.., N, K] with positive group and group_n, got %s%v group=%d group_n=%d", codes.DType, codes.Shape, a.Group, a.GroupN)
		}
		if err := want("codes", codes, U8, codes.Shape); err != nil {
			return nil, 0, err
		}
		s := codes.Shape.Clone()
		s[r-2], s[r-1] = Dim(ceilDiv(int64(s[r-2]), a.GroupN)), Dim(ceilDiv(int64(s[r-1]), a.Group))
		if err := want("scales", scales, F32, s); err != nil {
			return nil, 0, err
		}
		return codes.Shape.Clone(), a.DType, nil
	case quant.AWQ, quant.GPTQ:
		if r < 2 || a.Group < 1 || a.GroupN != 0 {
			return nil, 0, fmt.Errorf("%s qweight must be i32 of rank 2 or more with a positive group (and no group_n), got %s%v group=%d", a.Format, codes.DType, codes.Shape, a.Group)
		}
		out := codes.Shape.Clone()
		if a.Format == quant.AWQ {
			out[r-1] *= 8
		} else {
			out[r-2] *= 8
		}
		K, N := int64(out[r-2]), int64(out[r-1])
		if K%a.Group != 0 {
			return nil, 0, fmt.Errorf("%s: K=%d is no multiple of the group %d", a.Format, K, a.Group)
		}
		if N%8 != 0 {
			// The zero points pack eight columns a word.
			return nil, 0, fmt.Errorf("%s: N=%d is no multiple of 8 (qzeros hold eight columns a word)", a.Format, N)
		}
		if err := want("qweight", codes, I32, codes.Shape); err != nil {
			return nil, 0, err
		}
		zs := out.Clone()
		zs[r-2], zs[r-1] = Dim(K/a.Group), Dim(N/8)
		if err := want("qzeros", in[2], I32, zs); err != nil {
			return nil, 0, err
		}
		ss := zs.Clone()
		ss[r-1] = Dim(N)
		if !scales.DType.IsFloat() || !scales.Shape.Equal(ss) {
			return nil, 0, fmt.Errorf("%s scales: %s%v must be a float tensor %v", a.Format, scales.DType, scales.Shape, ss)
		}
		return out, a.DType, nil
	}
	return nil, 0, fmt.Errorf("format %s; want mxfp4, fp8, awq or gptq", a.Format)
}

func (e *evaluator) dequant() (*Tensor, *Tensor, error) {
	n := e.n
	v, m := e.out()
	l := newDequantLayout(n.Attrs, n.Shape)
	codes, scales := e.in(0), e.in(1)
	for i := range v.Len() {
		s := l.source(i)
		var z int64
		if len(n.Inputs) == 3 {
			z = e.in(2).Int(s.zero)
		}
		v.Set(i, dequantValue(l.f, s, float64(codes.Int(s.code)), scales.At(s.scale), z))
		if m != nil {
			m.F64[i] = math.Abs(v.At(i))
		}
	}
	return v, m, nil
}

func (pe *pointEval) demandDequant(n *Node, idx []int64) error {
	l := newDequantLayout(n.Attrs, n.Shape)
	for _, j := range idx {
		s := l.source(j)
		pe.add1(n.Inputs[0], s.code)
		pe.add1(n.Inputs[1], s.scale)
		if len(n.Inputs) == 3 {
			pe.add1(n.Inputs[2], s.zero)
		}
	}
	return pe.tick(int64(len(idx)))
}

func (pe *pointEval) computeDequant(n *Node, idx []int64, out *pointStore) error {
	l := newDequantLayout(n.Attrs, n.Shape)
	for p, j := range idx {
		s := l.source(j)
		code, _ := pe.store[n.Inputs[0]].at(s.code)
		scale, _ := pe.store[n.Inputs[1]].at(s.scale)
		var z int64
		if len(n.Inputs) == 3 {
			zv, _ := pe.store[n.Inputs[2]].at(s.zero)
			z = int64(zv)
		}
		y := n.DType.Round(dequantValue(l.f, s, code, scale, z))
		out.put(p, y, math.Abs(y))
	}
	return pe.tick(int64(len(idx)))
}

func (p *textParser) format() (quant.Format, error) {
	t := p.next()
	if t.kind != tWord {
		return 0, textErrorf(t.textPos, "want a weight format, got %s", t.describe())
	}
	f, err := quant.ParseFormat(t.text)
	if err != nil || !f.Valid() {
		if err == nil {
			err = fmt.Errorf("format none is no quantized format")
		}
		return 0, textErrorf(t.textPos, "%v", err)
	}
	return f, nil
}

// roundE4M3Magnitude is the magnitude of y = round_e4m3(x), x's magnitude
// being mx. Rounding to e4m3 is discontinuous: an x within the error its
// magnitude allows of the midpoint between two e4m3 values may round to
// either, a step of 2^-3 relative, far past an f32 allowance. There the
// magnitude grows so that the allowance holds the step (for f32 results,
// whose unit roundoff scales magnitudes into allowances: the op computes
// in f32); elsewhere the rounding is exact and the value's.
func roundE4M3Magnitude(x, y, mx float64) float64 {
	ax := math.Abs(x)
	if math.IsNaN(x) || ax >= quant.MaxE4M3 {
		return math.Max(mx, math.Abs(y))
	}
	step := e4m3Step(ax)
	lo := math.Floor(ax/step) * step
	mid := lo + step/2
	if math.Abs(ax-mid) <= 4*F32.Eps()*mx+0x1p-30*ax {
		return math.Abs(y) + step/F32.Eps()
	}
	return math.Max(mx, math.Abs(y))
}

// e4m3Step is the distance between e4m3 values around magnitude a.
func e4m3Step(a float64) float64 {
	_, e := math.Frexp(a)
	return math.Ldexp(1, max(e-1, -6)-3)
}

// DequantUnder is the dequant value v is, or reads through views and
// casts: a quantized weight as the ops that read it see it; false when v
// is no such chain.
func DequantUnder(g *Graph, v Value) (Value, bool) {
	for {
		n := g.Node(v)
		if n.Op == OpDequant {
			return v, true
		}
		if (n.Op.Class() != ClassView && n.Op != OpCast) || len(n.Inputs) != 1 {
			return v, false
		}
		v = n.Inputs[0]
	}
}

// DequantOperand is the leaf a dequant operand v of g reads (in a kernel
// body, the kernel argument): an input, weight or state, seen through
// reshapes at most, which keep its linear order, so that the operand's
// layout is the leaf's; false for anything else.
func DequantOperand(g *Graph, v Value) (Value, bool) {
	for g.Node(v).Op == OpReshape {
		v = g.Node(v).Inputs[0]
	}
	switch g.Node(v).Op {
	case OpInput, OpWeight, OpState:
		return v, true
	}
	return v, false
}
