package cuda

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// elementwiseThreads is the block size of elementwise kernels.
const elementwiseThreads = 256

// elementwise prints a kernel computing every output element
// independently: a grid-stride loop over the elements of the (first)
// output, each element's value built by walking the body backwards from it
// with the element's index, through views (permute, reshape, expand,
// slice, pad), concatenations, casts, gathers, slice updates and
// scatters, down to loads from the argument buffers. Every output must have the first
// output's shape.
type elementwise struct {
	body *ir.Graph
	// reduced names the variables holding reductions a row kernel has
	// computed for the current row; reducedAt, when set, places them by
	// index (a matmul's per-row statistics in shared memory).
	reduced   map[ir.Value]string
	reducedAt func(v ir.Value, ix index) (string, bool)
	// inputAt, when set, may serve an input's element from where a
	// kernel staged it (the matrix-vector prologue's 16-byte loads)
	// instead of a load of its own.
	inputAt func(v ir.Value, ix index) (string, bool)
	lines   []string
	temps   map[string]string // "node@index" -> temp name, for unguarded values
	next    int
}

// index is a multi-index as C expressions, one per dimension.
type index []string

func (ix index) key() string { return strings.Join(ix, ",") }

// vectorizable reports whether the kernel can move four f32 elements per
// thread with 16-byte loads and stores: every input read at the output's
// own element, everything f32, the element count a multiple of four.
func vectorizable(body *ir.Graph) bool {
	out := body.Node(body.Outputs[0].Value)
	if out.Shape.NumElements()%4 != 0 {
		return false
	}
	for _, n := range body.Nodes {
		if !vectorDType(n.DType) {
			return false
		}
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary:
		case ir.ClassLeaf:
			if n.Op != ir.OpInput && n.Op != ir.OpConst {
				return false
			}
			if n.Op == ir.OpInput && !n.Shape.Equal(out.Shape) {
				return false
			}
		default:
			if n.Op != ir.OpCast || !vectorDType(body.Node(n.Inputs[0]).DType) {
				return false
			}
		}
	}
	return true
}

// vectorDType reports whether a value of dt goes four at a time through
// the vector path: f32 (16 bytes), f16 and bf16 (8 bytes: lum_ld4_f16,
// lum_st4_bf16, ...), widened to f32 on load and rounded once on store,
// as the scalar path does.
func vectorDType(dt ir.DType) bool { return dt == ir.F32 || dt == ir.F16 || dt == ir.BF16 }

// vectorSuffix is the vector load and store helpers' suffix for dt.
func vectorSuffix(dt ir.DType) string {
	switch dt {
	case ir.F16:
		return "_f16"
	case ir.BF16:
		return "_bf16"
	}
	return ""
}

func (e *elementwise) emit(format string, args ...any) {
	e.lines = append(e.lines, "    "+fmt.Sprintf(format, args...))
}

func (e *elementwise) temp(typ, expr string) string {
	name := fmt.Sprintf("v%d", e.next)
	e.next++
	e.emit("%s %s = %s;", typ, name, expr)
	return name
}

// cType is the C type a value of dt is computed in.
func cType(dt ir.DType) string {
	switch dt {
	case ir.I32, ir.I64, ir.U8:
		return "long long"
	case ir.Bool:
		return "bool"
	}
	return "float"
}

// storageType is the C type of a buffer element of dt.
func storageType(dt ir.DType) string {
	switch dt {
	case ir.F16:
		return "lum_f16"
	case ir.BF16:
		return "lum_bf16"
	case ir.I32:
		return "int"
	case ir.I64:
		return "long long"
	case ir.Bool, ir.U8:
		return "unsigned char"
	}
	return "float"
}

// load converts a stored element to its computing type.
func load(dt ir.DType, ref string) string {
	switch dt {
	case ir.F16:
		return "lum_f16_to_f32(" + ref + ")"
	case ir.BF16:
		return "lum_bf16_to_f32(" + ref + ")"
	case ir.I32, ir.U8:
		return "(long long)" + ref
	case ir.Bool:
		return "(" + ref + " != 0)"
	}
	return ref
}

// store converts a computed value to its storage type.
func store(dt ir.DType, v string) string {
	switch dt {
	case ir.F16:
		return "lum_f32_to_f16(" + v + ")"
	case ir.BF16:
		return "lum_f32_to_bf16(" + v + ")"
	case ir.I32:
		return "(int)" + v
	case ir.U8:
		return "(unsigned char)" + v
	case ir.Bool:
		return "(unsigned char)(" + v + ")"
	}
	return v
}

// literal prints a constant of dt.
// constLiteral is a splat constant's value as a C literal, integers
// exactly (an i64 constant may be 2^63-1, which float64 cannot hold).
func constLiteral(n *ir.Node) string {
	if n.DType.IsInt() {
		return intLiteral(n.Attrs.ConstInt(0))
	}
	return literal(n.DType, n.Attrs.ConstAt(0))
}

// intLiteral spells v as a long long literal; -2^63 has no literal of its
// own in C (the minus applies to a 2^63 that does not fit).
func intLiteral(v int64) string {
	if v == math.MinInt64 {
		return "(-9223372036854775807LL - 1)"
	}
	return strconv.FormatInt(v, 10) + "LL"
}

func literal(dt ir.DType, v float64) string {
	switch dt {
	case ir.I32, ir.I64:
		return intLiteral(dt.IntOf(v))
	case ir.Bool:
		if v != 0 {
			return "true"
		}
		return "false"
	}
	switch {
	case math.IsNaN(v):
		return "NAN"
	case math.IsInf(v, 1):
		return "INFINITY"
	case math.IsInf(v, -1):
		return "(-INFINITY)"
	}
	s := strconv.FormatFloat(float64(float32(v)), 'g', 9, 32)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s + "f"
}

// linear is the row-major offset of ix in shape.
func linear(shape ir.Shape, ix index) string {
	if len(shape) == 0 {
		return "0"
	}
	var terms []string
	stride := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] != 1 && ix[d] != "0" {
			if stride == 1 {
				terms = append(terms, ix[d])
			} else {
				terms = append(terms, fmt.Sprintf("%s * %dLL", ix[d], stride))
			}
		}
		stride *= int64(shape[d])
	}
	if len(terms) == 0 {
		return "0"
	}
	slices.Reverse(terms)
	return strings.Join(terms, " + ")
}

// split is the multi-index of linear offset off in shape.
func split(shape ir.Shape, off string) index {
	ix := make(index, len(shape))
	stride := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		switch {
		case shape[d] == 1:
			ix[d] = "0"
		case stride == 1 && d == 0:
			ix[d] = off
		case stride == 1:
			ix[d] = fmt.Sprintf("((%s) %% %dLL)", off, shape[d])
		case d == 0:
			ix[d] = fmt.Sprintf("((%s) / %dLL)", off, stride)
		default:
			ix[d] = fmt.Sprintf("(((%s) / %dLL) %% %dLL)", off, stride, shape[d])
		}
		stride *= int64(shape[d])
	}
	return ix
}

// value returns the C expression of node v's element at ix. Values
// computed where every load is safe are kept in temporaries; under a guard
// (a pad's or concat's branch, a slice update's) they are inlined so that
// nothing is loaded outside its buffer.
func (e *elementwise) value(v ir.Value, ix index, guarded bool) (string, error) {
	if r, ok := e.reduced[v]; ok {
		return r, nil
	}
	if e.reducedAt != nil {
		if r, ok := e.reducedAt(v, ix); ok {
			return r, nil
		}
	}
	key := fmt.Sprintf("%d@%s", v, ix.key())
	if !guarded {
		if t, ok := e.temps[key]; ok {
			return t, nil
		}
	}
	expr, err := e.expr(v, ix, guarded)
	if err != nil {
		return "", err
	}
	if guarded {
		return "(" + expr + ")", nil
	}
	t := e.temp(cType(e.body.Node(v).DType), expr)
	e.temps[key] = t
	return t, nil
}

func (e *elementwise) expr(v ir.Value, ix index, guarded bool) (string, error) {
	n := e.body.Node(v)
	kid := func(k int, kix index) (string, error) { return e.value(n.Inputs[k], kix, guarded) }
	same := func(k int) (string, error) { return kid(k, ix) }
	switch n.Op.Class() {
	case ir.ClassLeaf:
		switch n.Op {
		case ir.OpInput:
			if e.inputAt != nil {
				if r, ok := e.inputAt(v, ix); ok {
					return r, nil
				}
			}
			return load(n.DType, fmt.Sprintf("%s[%s]", paramName(e.body, v), linear(n.Shape, ix))), nil
		case ir.OpConst:
			if n.Attrs.ConstLen() != 1 {
				return "", fmt.Errorf("a constant of %d values inside a kernel", n.Attrs.ConstLen())
			}
			return constLiteral(n), nil
		case ir.OpIota:
			ax := n.Attrs.Axis
			return fmt.Sprintf("(%s)(%s)", cType(n.DType), ix[ax]), nil
		}
		return "", fmt.Errorf("%s inside a kernel body", n.Op)
	case ir.ClassUnary:
		x, err := same(0)
		if err != nil {
			return "", err
		}
		return unary(n.Op, x, n.DType)
	case ir.ClassBinary, ir.ClassCompare:
		a, err := same(0)
		if err != nil {
			return "", err
		}
		b, err := same(1)
		if err != nil {
			return "", err
		}
		return binaryExpr(n.Op, a, b, e.body.Node(n.Inputs[0]).DType)
	case ir.ClassSelect:
		c, err := same(0)
		if err != nil {
			return "", err
		}
		a, err := same(1)
		if err != nil {
			return "", err
		}
		b, err := same(2)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s ? %s : %s", c, a, b), nil
	}
	in := func(k int) ir.Shape { return e.body.Node(n.Inputs[k]).Shape }
	if n.Op.Class() == ir.ClassReduce {
		return e.reduceLoop(n, ix, guarded)
	}
	switch n.Op {
	case ir.OpReshape:
		return kid(0, split(in(0), linear(n.Shape, ix)))
	case ir.OpExpand:
		src := in(0)
		kix := make(index, len(src))
		for d := range src {
			if src[d] == 1 {
				kix[d] = "0"
			} else {
				kix[d] = ix[d]
			}
		}
		return kid(0, kix)
	case ir.OpPermute:
		kix := make(index, len(ix))
		for d, p := range n.Attrs.Perm {
			kix[p] = ix[d]
		}
		return kid(0, kix)
	case ir.OpSlice:
		kix := make(index, len(ix))
		for d := range ix {
			start, step := n.Attrs.Starts[d], n.Attrs.Steps[d]
			switch {
			case start == 0 && step == 1:
				kix[d] = ix[d]
			case step == 1:
				kix[d] = fmt.Sprintf("(%s + %dLL)", ix[d], start)
			default:
				kix[d] = fmt.Sprintf("(%dLL + %s * %dLL)", start, ix[d], step)
			}
		}
		return kid(0, kix)
	case ir.OpPad:
		src := in(0)
		kix := make(index, len(ix))
		var inside []string
		for d := range ix {
			before := n.Attrs.Before[d]
			kix[d] = ix[d]
			if before != 0 {
				kix[d] = fmt.Sprintf("(%s - %dLL)", ix[d], before)
			}
			if before != 0 || n.Attrs.After[d] != 0 {
				inside = append(inside, fmt.Sprintf("%s >= 0 && %s < %dLL", kix[d], kix[d], src[d]))
			}
		}
		x, err := e.value(n.Inputs[0], kix, true)
		if err != nil {
			return "", err
		}
		if len(inside) == 0 {
			return x, nil
		}
		return fmt.Sprintf("(%s) ? %s : %s", strings.Join(inside, " && "), x, literal(n.DType, n.Attrs.Value)), nil
	case ir.OpConcat:
		ax := n.Attrs.Axis
		if ax < 0 {
			ax += len(n.Shape)
		}
		var parts []string
		off := int64(0)
		for k := range n.Inputs {
			size := int64(in(k)[ax])
			kix := slices.Clone(ix)
			if off != 0 {
				kix[ax] = fmt.Sprintf("(%s - %dLL)", ix[ax], off)
			}
			x, err := e.value(n.Inputs[k], kix, true)
			if err != nil {
				return "", err
			}
			if k == len(n.Inputs)-1 {
				parts = append(parts, x)
			} else {
				parts = append(parts, fmt.Sprintf("%s < %dLL ? %s : ", ix[ax], off+size, x))
			}
			off += size
		}
		return strings.Join(parts, ""), nil
	case ir.OpCast:
		x, err := same(0)
		if err != nil {
			return "", err
		}
		return castExpr(e.body.Node(n.Inputs[0]).DType, n.DType, x), nil
	case ir.OpGather:
		// out[i0..i(ax-1), j..., i(ax+1)...] = data[i0.., indices[j...], ...]
		ax := n.Attrs.Axis
		data, idx := in(0), in(1)
		jix := ix[ax : ax+len(idx)]
		j, err := kid(1, jix)
		if err != nil {
			return "", err
		}
		// Negative indices count from the end, as the interpreter does.
		at := fmt.Sprintf("(%s < 0 ? %s + %dLL : %s)", j, j, data[ax], j)
		kix := append(append(slices.Clone(ix[:ax]), at), ix[ax+len(idx):]...)
		return e.value(n.Inputs[0], kix, true)
	case ir.OpSliceUpdate:
		ax := n.Attrs.Axis
		size := int64(in(1)[ax])
		off := fmt.Sprintf("%dLL", n.Attrs.Offset)
		if p, ok := n.DynamicOffset(); ok {
			at, err := e.value(p, index{}, true)
			if err != nil {
				return "", err
			}
			off = fmt.Sprintf("(%dLL + (long long)%s)", n.Attrs.Offset, at)
		}
		uix := slices.Clone(ix)
		uix[ax] = fmt.Sprintf("(%s - %s)", ix[ax], off)
		u, err := e.value(n.Inputs[1], uix, true)
		if err != nil {
			return "", err
		}
		b, err := e.value(n.Inputs[0], ix, true)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("(%s >= %s && %s < %s + %dLL) ? %s : %s", ix[ax], off, ix[ax], off, size, u, b), nil
	case ir.OpScatter:
		return e.scatterLoop(n, ix)
	case ir.OpDequant:
		return e.dequant(n, ix)
	}
	return "", fmt.Errorf("%s has no elementwise form", n.Op)
}

// scatterLoop computes a scatter's element at ix the naive way: a loop
// over the index vector finds the update slice written at ix's position
// along the axis, if any, else the element is the base's. It is one
// expression (a lambda called in place), the update read only under the
// slice found and the base only without one, so that it is safe under a
// guard too. The kernel that writes a state's new slices in place (a
// Slots window) loops over the slices instead.
func (e *elementwise) scatterLoop(n *ir.Node, ix index) (string, error) {
	ax := n.Attrs.Axis
	if ax < 0 {
		ax += len(n.Shape)
	}
	rows := int64(e.body.Node(n.Inputs[1]).Shape[ax])
	found := fmt.Sprintf("s%d", e.next)
	e.next++
	j := fmt.Sprintf("j%d", e.next)
	e.next++
	at, err := e.value(n.Inputs[2], index{j}, true)
	if err != nil {
		return "", err
	}
	uix := slices.Clone(ix)
	uix[ax] = found
	u, err := e.value(n.Inputs[1], uix, true)
	if err != nil {
		return "", err
	}
	b, err := e.value(n.Inputs[0], ix, true)
	if err != nil {
		return "", err
	}
	typ := cType(n.DType)
	return fmt.Sprintf("([&]() -> %s { long long %s = -1; for (long long %s = 0; %s < %dLL; %s++) { if ((long long)%s == %s) %s = %s; } return %s >= 0 ? (%s)%s : (%s)%s; }())",
		typ, found, j, j, rows, j, at, ix[ax], found, j, found, typ, u, typ, b), nil
}

// reduceLoop computes a reduction's element at ix by a loop over the
// reduced axis, its input's values computed inside the loop.
func (e *elementwise) reduceLoop(n *ir.Node, ix index, guarded bool) (string, error) {
	src := e.body.Node(n.Inputs[0]).Shape
	ax := n.Attrs.Axis
	if ax < 0 {
		ax += len(src)
	}
	acc := fmt.Sprintf("r%d", e.next)
	e.next++
	v := fmt.Sprintf("j%d", e.next)
	e.next++
	kix := slices.Clone(ix)
	kix[ax] = v
	inner := &elementwise{body: e.body, reduced: e.reduced, reducedAt: e.reducedAt, temps: map[string]string{}, next: e.next}
	x, err := inner.value(n.Inputs[0], kix, guarded)
	if err != nil {
		return "", err
	}
	e.next = inner.next
	typ := cType(n.DType)
	init, combine := "0.0f", fmt.Sprintf("%s = %s + %s;", acc, acc, x)
	switch {
	case typ == "long long" && n.Op == ir.OpMaxReduce:
		// Integers accumulate exactly in 64 bits, from the dtype's least
		// value (the maximum over an empty axis; spelled so that no
		// literal overflows).
		init = "(-9223372036854775807LL - 1)"
		if n.DType == ir.I32 {
			init = "(-2147483647LL - 1)"
		}
		combine = fmt.Sprintf("%s = %s > %s ? %s : %s;", acc, acc, x, acc, x)
	case typ == "long long":
		init = "0LL"
		combine = fmt.Sprintf("%s = %s;", acc, wrapInt(ir.I64, fmt.Sprintf("(unsigned long long)%s + (unsigned long long)%s", acc, x)))
	case typ == "bool":
		return "", fmt.Errorf("a %s reduction over %s: the ir reduces no bools", n.Op, n.DType)
	case n.Op == ir.OpMaxReduce:
		init = "-INFINITY"
		combine = fmt.Sprintf("%s = (%s != %s || %s > %s) ? %s : %s;", acc, acc, acc, acc, x, acc, x)
	}
	// result rounds the accumulator as a stored element of the dtype
	// would be (an i32 sum wraps).
	result := func(a string) string {
		switch {
		case n.DType == ir.F32, n.DType == ir.I64:
			return a
		case n.DType == ir.I32:
			return castExpr(ir.I64, ir.I32, a)
		}
		return castExpr(ir.F32, n.DType, a)
	}
	if guarded {
		// A guarded value is one expression, evaluated only where its
		// guard holds (a concat's or pad's branch reads out of bounds
		// elsewhere): the loop goes inside a lambda called in place.
		if len(inner.lines) > 0 {
			return "", fmt.Errorf("a %s reduction whose operand needs statements, under a guard", n.Op)
		}
		expr := fmt.Sprintf("([&]() -> %s { %s %s = %s; for (long long %s = 0; %s < %dLL; %s++) { %s } return %s; }())",
			typ, typ, acc, init, v, v, src[ax], v, combine, acc)
		return result(expr), nil
	}
	e.emit("%s %s = %s;", typ, acc, init)
	e.emit("for (long long %s = 0; %s < %dLL; %s++) {", v, v, src[ax], v)
	for _, l := range inner.lines {
		e.lines = append(e.lines, "  "+l)
	}
	e.emit("  %s", combine)
	e.emit("}")
	return result(acc), nil
}

// castExpr converts x from dtype from to dtype to, rounding as a stored
// element of to would be.
func castExpr(from, to ir.DType, x string) string {
	switch to {
	case ir.F32:
		return "(float)" + x
	case ir.F16:
		return fmt.Sprintf("lum_f16_to_f32(lum_f32_to_f16((float)%s))", x)
	case ir.BF16:
		return fmt.Sprintf("lum_bf16_to_f32(lum_f32_to_bf16((float)%s))", x)
	case ir.Bool:
		return fmt.Sprintf("(%s != 0)", x)
	case ir.I32:
		if from.IsFloat() {
			return fmt.Sprintf("(long long)(int)(%s != %s ? 0.0f : %s)", x, x, x)
		}
		return fmt.Sprintf("(long long)(int)%s", x)
	}
	if from.IsFloat() {
		return fmt.Sprintf("(%s != %s ? 0LL : (long long)%s)", x, x, x)
	}
	return "(long long)" + x
}

func unary(op ir.Op, x string, dt ir.DType) (string, error) {
	if dt.IsInt() || dt == ir.Bool {
		switch op {
		case ir.OpNeg:
			return wrapInt(dt, fmt.Sprintf("0ULL - (unsigned long long)%s", x)), nil
		case ir.OpAbs:
			return wrapInt(dt, fmt.Sprintf("(%s < 0 ? 0ULL - (unsigned long long)%s : (unsigned long long)%s)", x, x, x)), nil
		case ir.OpNot:
			return "!" + x, nil
		}
		return "", fmt.Errorf("%s on %s", op, dt)
	}
	switch op {
	case ir.OpNeg:
		return "-" + x, nil
	case ir.OpAbs:
		return "fabsf(" + x + ")", nil
	case ir.OpExp:
		return "expf(" + x + ")", nil
	case ir.OpLog:
		return "logf(" + x + ")", nil
	case ir.OpSqrt:
		return "sqrtf(" + x + ")", nil
	case ir.OpRsqrt:
		return "rsqrtf(" + x + ")", nil
	case ir.OpRecip:
		return "1.0f / " + x, nil
	case ir.OpSin:
		return "sinf(" + x + ")", nil
	case ir.OpCos:
		return "cosf(" + x + ")", nil
	case ir.OpTanh:
		return "tanhf(" + x + ")", nil
	case ir.OpSigmoid:
		return fmt.Sprintf("(%s >= 0.0f ? 1.0f / (1.0f + expf(-%s)) : expf(%s) / (1.0f + expf(%s)))", x, x, x, x), nil
	case ir.OpErf:
		return "erff(" + x + ")", nil
	case ir.OpRelu:
		return fmt.Sprintf("(%s > 0.0f || %s != %s ? %s : 0.0f)", x, x, x, x), nil
	case ir.OpFloor:
		return "floorf(" + x + ")", nil
	case ir.OpCeil:
		return "ceilf(" + x + ")", nil
	case ir.OpRoundE4M3:
		return "lum_round_e4m3(" + x + ")", nil
	case ir.OpNot:
		return fmt.Sprintf("(%s == 0.0f)", x), nil
	}
	return "", fmt.Errorf("unary %s has no CUDA form", op)
}

// wrapInt is an integer result x, computed as an unsigned long long
// (whose arithmetic wraps, where signed overflow is undefined in C), as a
// value of dt: two's complement, an i32 wrapped to 32 bits, as the
// interpreter wraps every integer op's result.
func wrapInt(dt ir.DType, x string) string {
	if dt == ir.I32 {
		return fmt.Sprintf("(long long)(int)(unsigned int)(%s)", x)
	}
	return fmt.Sprintf("(long long)(%s)", x)
}

func binaryExpr(op ir.Op, a, b string, dt ir.DType) (string, error) {
	isInt := dt.IsInt() || dt == ir.Bool
	arith := func(sym string) string {
		if dt.IsInt() {
			return wrapInt(dt, fmt.Sprintf("(unsigned long long)%s %s (unsigned long long)%s", a, sym, b))
		}
		return a + " " + sym + " " + b
	}
	switch op {
	case ir.OpAdd:
		return arith("+"), nil
	case ir.OpSub:
		return arith("-"), nil
	case ir.OpMul:
		return arith("*"), nil
	case ir.OpDiv:
		if isInt {
			// Division truncates; by zero it is 0 (the interpreter refuses
			// it), and -2^63 / -1 wraps to -2^63 rather than trapping.
			return fmt.Sprintf("(%[2]s == 0 ? 0LL : %[2]s == -1 ? %[3]s : %[1]s / %[2]s)", a, b, wrapInt(dt, "0ULL - (unsigned long long)"+a)), nil
		}
		return a + " / " + b, nil
	case ir.OpMod:
		if isInt {
			return fmt.Sprintf("(%[2]s == 0 || %[2]s == -1 ? 0LL : %[1]s %% %[2]s)", a, b), nil
		}
		return fmt.Sprintf("fmodf(%s, %s)", a, b), nil
	case ir.OpPow:
		if isInt {
			return "", fmt.Errorf("pow on %s", dt)
		}
		return fmt.Sprintf("powf(%s, %s)", a, b), nil
	case ir.OpMax:
		if isInt {
			return fmt.Sprintf("(%s > %s ? %s : %s)", a, b, a, b), nil
		}
		return fmt.Sprintf("(%s != %s || %s > %s ? %s : %s)", a, a, a, b, a, b), nil
	case ir.OpMin:
		if isInt {
			return fmt.Sprintf("(%s < %s ? %s : %s)", a, b, a, b), nil
		}
		return fmt.Sprintf("(%s != %s || %s < %s ? %s : %s)", a, a, a, b, a, b), nil
	case ir.OpAnd:
		return fmt.Sprintf("(%s != 0 && %s != 0)", a, b), nil
	case ir.OpOr:
		return fmt.Sprintf("(%s != 0 || %s != 0)", a, b), nil
	case ir.OpEq:
		return a + " == " + b, nil
	case ir.OpNe:
		return a + " != " + b, nil
	case ir.OpLt:
		return a + " < " + b, nil
	case ir.OpLe:
		return a + " <= " + b, nil
	case ir.OpGt:
		return a + " > " + b, nil
	case ir.OpGe:
		return a + " >= " + b, nil
	}
	return "", fmt.Errorf("binary %s has no CUDA form", op)
}
