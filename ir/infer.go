package ir

import (
	"fmt"
	"math"
)

// Infer computes the shape and dtype of an op's result from its attributes
// and its inputs' types, checking everything the op requires. Errors name
// the op and the offending shapes; the caller adds which node it was.
func Infer(op Op, a Attrs, in []ValueType) (Shape, DType, error) {
	s, dt, err := infer(op, a, in)
	if err != nil {
		return nil, InvalidDType, fmt.Errorf("%s%s: %w", op, typesString(in), err)
	}
	if err := s.Check(); err != nil {
		return nil, InvalidDType, fmt.Errorf("%s: %w", op, err)
	}
	return s, dt, nil
}

func typesString(in []ValueType) string {
	if len(in) == 0 {
		return ""
	}
	s := "("
	for i, t := range in {
		if i > 0 {
			s += ", "
		}
		s += t.DType.String() + t.Shape.String()
	}
	return s + ")"
}

func infer(op Op, a Attrs, in []ValueType) (Shape, DType, error) {
	if !op.Valid() {
		return nil, 0, fmt.Errorf("invalid op")
	}
	if ar, most := op.Arity(), op.MaxArity(); (ar >= 0 && (len(in) < ar || len(in) > most)) || (ar < 0 && len(in) == 0) {
		if most > ar {
			return nil, 0, fmt.Errorf("takes %d or %d inputs, got %d", ar, most, len(in))
		}
		return nil, 0, fmt.Errorf("takes %d inputs, got %d", ar, len(in))
	}
	if ar := op.Arity(); ar >= 0 && len(in) > ar && op.HasPosition() {
		if p := in[ar]; !p.DType.IsInt() || len(p.Shape) != 0 {
			return nil, 0, fmt.Errorf("runtime position is %s%v; want an integer scalar", p.DType, p.Shape)
		}
		if op == OpAttention && !a.Causal {
			return nil, 0, fmt.Errorf("a runtime position needs causal attention")
		}
	}
	for i, t := range in {
		if !t.DType.Valid() {
			return nil, 0, fmt.Errorf("input %d has no valid dtype", i)
		}
	}
	switch op.Class() {
	case ClassLeaf:
		if !a.DType.Valid() {
			return nil, 0, fmt.Errorf("leaf without a valid dtype")
		}
		switch op {
		case OpInput, OpWeight, OpState:
			if a.Name == "" {
				return nil, 0, fmt.Errorf("needs a name")
			}
		case OpConst:
			if a.Ints != nil && (a.Data != nil || !a.DType.IsInt()) {
				return nil, 0, fmt.Errorf("integer values for a %s constant; want Data alone", a.DType)
			}
			if n := int64(a.ConstLen()); n != 1 && n != a.To.NumElements() {
				return nil, 0, fmt.Errorf("constant of shape %v has %d values; want 1 or %d", a.To, n, a.To.NumElements())
			}
			for _, v := range a.Ints {
				if a.DType.WrapInt(v) != v {
					return nil, 0, fmt.Errorf("constant value %d is not a %s", v, a.DType)
				}
			}
			for _, v := range a.Data {
				// 2^63 is what float64 makes of 2^63-1: refused rather
				// than read as either.
				if (a.DType.Round(v) != v && !math.IsNaN(v)) || (a.DType.IsInt() && math.Abs(v) >= 0x1p63) {
					return nil, 0, fmt.Errorf("constant value %v is not a %s", v, a.DType)
				}
			}
		case OpIota:
			if _, err := normAxis(a.Axis, len(a.To)); err != nil {
				return nil, 0, err
			}
			if !a.DType.IsInt() && !a.DType.IsFloat() {
				return nil, 0, fmt.Errorf("iota of %s", a.DType)
			}
		}
		return a.To.Clone(), a.DType, nil

	case ClassUnary:
		t := in[0]
		switch {
		case op == OpNot && t.DType != Bool:
			return nil, 0, fmt.Errorf("not of %s; want bool", t.DType)
		case op == OpNeg || op == OpAbs:
			if t.DType == Bool {
				return nil, 0, fmt.Errorf("%s of bool", op)
			}
		case op != OpNot && !t.DType.IsFloat():
			return nil, 0, fmt.Errorf("%s of %s; want a float type", op, t.DType)
		}
		return t.Shape.Clone(), t.DType, nil

	case ClassBinary, ClassCompare:
		x, y := in[0], in[1]
		if !x.Shape.Equal(y.Shape) {
			return nil, 0, fmt.Errorf("operand shapes %v and %v differ (broadcast with expand first)", x.Shape, y.Shape)
		}
		if x.DType != y.DType {
			return nil, 0, fmt.Errorf("operand dtypes %s and %s differ (cast first)", x.DType, y.DType)
		}
		switch op {
		case OpAnd, OpOr:
			if x.DType != Bool {
				return nil, 0, fmt.Errorf("%s of %s; want bool", op, x.DType)
			}
		case OpPow:
			if !x.DType.IsFloat() {
				return nil, 0, fmt.Errorf("pow of %s; want a float type", x.DType)
			}
		default:
			if x.DType == Bool && op != OpEq && op != OpNe {
				return nil, 0, fmt.Errorf("%s of bool", op)
			}
		}
		if op.Class() == ClassCompare {
			return x.Shape.Clone(), Bool, nil
		}
		return x.Shape.Clone(), x.DType, nil

	case ClassSelect:
		c, x, y := in[0], in[1], in[2]
		if c.DType != Bool {
			return nil, 0, fmt.Errorf("condition is %s; want bool", c.DType)
		}
		if !c.Shape.Equal(x.Shape) || !x.Shape.Equal(y.Shape) {
			return nil, 0, fmt.Errorf("shapes %v, %v, %v differ (broadcast with expand first)", c.Shape, x.Shape, y.Shape)
		}
		if x.DType != y.DType {
			return nil, 0, fmt.Errorf("branch dtypes %s and %s differ", x.DType, y.DType)
		}
		return x.Shape.Clone(), x.DType, nil

	case ClassReduce:
		t := in[0]
		ax, err := normAxis(a.Axis, len(t.Shape))
		if err != nil {
			return nil, 0, err
		}
		if t.DType == Bool {
			return nil, 0, fmt.Errorf("%s of bool", op)
		}
		s := t.Shape.Clone()
		s[ax] = 1
		return s, t.DType, nil
	}

	switch op {
	case OpPermute:
		t := in[0]
		if len(a.Perm) != len(t.Shape) {
			return nil, 0, fmt.Errorf("permutation %v for rank %d", a.Perm, len(t.Shape))
		}
		seen := make([]bool, len(a.Perm))
		s := make(Shape, len(a.Perm))
		for i, p := range a.Perm {
			if p < 0 || p >= len(a.Perm) || seen[p] {
				return nil, 0, fmt.Errorf("%v is not a permutation", a.Perm)
			}
			seen[p] = true
			s[i] = t.Shape[p]
		}
		return s, t.DType, nil

	case OpReshape:
		t := in[0]
		if err := a.To.Check(); err != nil {
			return nil, 0, err
		}
		if a.To.NumElements() != t.Shape.NumElements() {
			return nil, 0, fmt.Errorf("cannot reshape %v (%d elements) to %v (%d)", t.Shape, t.Shape.NumElements(), a.To, a.To.NumElements())
		}
		return a.To.Clone(), t.DType, nil

	case OpExpand:
		t := in[0]
		if len(a.To) != len(t.Shape) {
			return nil, 0, fmt.Errorf("cannot expand %v to %v: ranks differ (reshape first)", t.Shape, a.To)
		}
		for i := range a.To {
			if t.Shape[i] != a.To[i] && t.Shape[i] != 1 {
				return nil, 0, fmt.Errorf("cannot expand %v to %v: axis %d has extent %d", t.Shape, a.To, i, t.Shape[i])
			}
		}
		return a.To.Clone(), t.DType, nil

	case OpSlice:
		t := in[0]
		r := len(t.Shape)
		if len(a.Starts) != r || len(a.Ends) != r || len(a.Steps) != r {
			return nil, 0, fmt.Errorf("starts %v, ends %v, steps %v for rank %d", a.Starts, a.Ends, a.Steps, r)
		}
		s := make(Shape, r)
		for i := range r {
			st, en, sp := a.Starts[i], a.Ends[i], a.Steps[i]
			if sp <= 0 {
				return nil, 0, fmt.Errorf("axis %d: step %d; want a positive step", i, sp)
			}
			if st < 0 || en < st || en > int64(t.Shape[i]) {
				return nil, 0, fmt.Errorf("axis %d: slice [%d:%d] of extent %d", i, st, en, t.Shape[i])
			}
			if en > st {
				// Not (en-st+sp-1)/sp: that overflows for a step near 2^63.
				s[i] = Dim((en-st-1)/sp + 1)
			}
		}
		return s, t.DType, nil

	case OpPad:
		t := in[0]
		r := len(t.Shape)
		if len(a.Before) != r || len(a.After) != r {
			return nil, 0, fmt.Errorf("pads %v and %v for rank %d", a.Before, a.After, r)
		}
		s := make(Shape, r)
		for i := range r {
			if a.Before[i] < 0 || a.After[i] < 0 {
				return nil, 0, fmt.Errorf("axis %d: negative padding (slice instead)", i)
			}
			s[i] = t.Shape[i] + Dim(a.Before[i]+a.After[i])
		}
		if t.DType.Round(a.Value) != a.Value && !math.IsNaN(a.Value) {
			return nil, 0, fmt.Errorf("pad value %v is not a %s", a.Value, t.DType)
		}
		return s, t.DType, nil

	case OpConcat:
		first := in[0]
		ax, err := normAxis(a.Axis, len(first.Shape))
		if err != nil {
			return nil, 0, err
		}
		s := first.Shape.Clone()
		for _, t := range in[1:] {
			if t.DType != first.DType {
				return nil, 0, fmt.Errorf("dtypes %s and %s differ", first.DType, t.DType)
			}
			if len(t.Shape) != len(s) {
				return nil, 0, fmt.Errorf("ranks differ")
			}
			for i := range s {
				if i != ax && t.Shape[i] != s[i] {
					return nil, 0, fmt.Errorf("extents differ on axis %d", i)
				}
			}
			s[ax] += t.Shape[ax]
		}
		return s, first.DType, nil

	case OpCast:
		if !a.DType.Valid() {
			return nil, 0, fmt.Errorf("cast to an invalid dtype")
		}
		return in[0].Shape.Clone(), a.DType, nil

	case OpGather:
		d, idx := in[0], in[1]
		ax, err := normAxis(a.Axis, len(d.Shape))
		if err != nil {
			return nil, 0, err
		}
		if !idx.DType.IsInt() {
			return nil, 0, fmt.Errorf("indices are %s; want i32 or i64", idx.DType)
		}
		s := append(append(d.Shape[:ax:ax].Clone(), idx.Shape...), d.Shape[ax+1:]...)
		return s, d.DType, nil

	case OpSliceUpdate:
		base, up := in[0], in[1]
		ax, err := normAxis(a.Axis, len(base.Shape))
		if err != nil {
			return nil, 0, err
		}
		if base.DType != up.DType || len(base.Shape) != len(up.Shape) {
			return nil, 0, fmt.Errorf("update must have the base's dtype and rank")
		}
		for i := range base.Shape {
			if i == ax {
				// With a runtime position the static offset is its base;
				// the sum is checked where the position is known.
				if a.Offset < 0 || a.Offset > int64(base.Shape[i])-int64(up.Shape[i]) {
					return nil, 0, fmt.Errorf("update of extent %d at offset %d past extent %d on axis %d", up.Shape[i], a.Offset, base.Shape[i], i)
				}
			} else if up.Shape[i] != base.Shape[i] {
				return nil, 0, fmt.Errorf("extents differ on axis %d", i)
			}
		}
		return base.Shape.Clone(), base.DType, nil

	case OpScatter:
		base, up, idx := in[0], in[1], in[2]
		ax, err := normAxis(a.Axis, len(base.Shape))
		if err != nil {
			return nil, 0, err
		}
		if base.DType != up.DType || len(base.Shape) != len(up.Shape) {
			return nil, 0, fmt.Errorf("update must have the base's dtype and rank")
		}
		if !idx.DType.IsInt() || len(idx.Shape) != 1 || idx.Shape[0] != up.Shape[ax] {
			return nil, 0, fmt.Errorf("index must be an integer vector of %d (the update's extent on axis %d)", up.Shape[ax], ax)
		}
		for i := range base.Shape {
			if i != ax && up.Shape[i] != base.Shape[i] {
				return nil, 0, fmt.Errorf("extents differ on axis %d", i)
			}
		}
		return base.Shape.Clone(), base.DType, nil

	case OpPagedAttention:
		return inferPagedAttention(a, in)
	case OpRoute:
		return inferRoute(a, in)
	case OpExperts:
		return inferExperts(a, in)
	case OpExpertsUp:
		return inferExpertsUp(a, in)
	case OpExpertsDown:
		return inferExpertsDown(a, in)
	case OpDequant:
		return inferDequant(a, in)

	case OpMatMul:
		x, y := in[0], in[1]
		if x.DType != y.DType || !x.DType.IsFloat() {
			return nil, 0, fmt.Errorf("operands must share a float dtype")
		}
		r := len(x.Shape)
		if r < 2 || len(y.Shape) != r {
			return nil, 0, fmt.Errorf("operands must have the same rank, at least 2")
		}
		if !x.Shape[:r-2].Equal(y.Shape[:r-2]) {
			return nil, 0, fmt.Errorf("batch dimensions differ (expand first)")
		}
		if x.Shape[r-1] != y.Shape[r-2] {
			return nil, 0, fmt.Errorf("inner dimensions %d and %d differ", x.Shape[r-1], y.Shape[r-2])
		}
		s := x.Shape.Clone()
		s[r-1] = y.Shape[r-1]
		switch {
		case a.DType == InvalidDType:
			return s, x.DType, nil
		case a.DType != F32 || x.DType == F32:
			// One spelling per product: the only widening is a narrow
			// product accumulated and kept in f32 (a partial product
			// that a reduction consumes).
			return nil, 0, fmt.Errorf("dtype=%s on a %s product: a matmul's dtype is its operands', or f32 for f16 and bf16 operands", a.DType, x.DType)
		}
		return s, F32, nil

	case OpSoftmax:
		t := in[0]
		if _, err := normAxis(a.Axis, len(t.Shape)); err != nil {
			return nil, 0, err
		}
		if !t.DType.IsFloat() {
			return nil, 0, fmt.Errorf("softmax of %s", t.DType)
		}
		return t.Shape.Clone(), t.DType, nil

	case OpLayerNorm, OpRMSNorm:
		x := in[0]
		if len(x.Shape) == 0 || !x.DType.IsFloat() {
			return nil, 0, fmt.Errorf("needs a float tensor of rank at least 1")
		}
		last := Shape{x.Shape[len(x.Shape)-1]}
		for _, p := range in[1:] {
			if !p.Shape.Equal(last) || p.DType != x.DType {
				return nil, 0, fmt.Errorf("scale and bias must be %s%v", x.DType, last)
			}
		}
		if !(a.Eps > 0) {
			return nil, 0, fmt.Errorf("epsilon %v; want a positive epsilon", a.Eps)
		}
		return x.Shape.Clone(), x.DType, nil

	case OpAttention:
		q, k, v := in[0], in[1], in[2]
		if len(q.Shape) != 4 || len(k.Shape) != 4 || len(v.Shape) != 4 {
			return nil, 0, fmt.Errorf("q, k and v must have rank 4 [batch, heads, length, head size]")
		}
		if q.DType != k.DType || k.DType != v.DType || !q.DType.IsFloat() {
			return nil, 0, fmt.Errorf("q, k and v must share a float dtype")
		}
		if q.Shape[0] != k.Shape[0] || !k.Shape.Equal(v.Shape) || q.Shape[3] != k.Shape[3] {
			return nil, 0, fmt.Errorf("k and v must be [%d, heads, length, %d]", q.Shape[0], q.Shape[3])
		}
		if k.Shape[1] == 0 || q.Shape[1]%k.Shape[1] != 0 {
			return nil, 0, fmt.Errorf("%d query heads do not divide into %d key heads", q.Shape[1], k.Shape[1])
		}
		if a.Causal && (a.Offset < 0 || a.Offset > int64(k.Shape[2])-int64(q.Shape[2])) {
			return nil, 0, fmt.Errorf("causal queries at positions %d..%d past %d keys", a.Offset, a.Offset+int64(q.Shape[2]), k.Shape[2])
		}
		if !(a.Scale > 0) {
			return nil, 0, fmt.Errorf("scale %v; want a positive scale", a.Scale)
		}
		return q.Shape.Clone(), q.DType, nil
	}
	return nil, 0, fmt.Errorf("no type rule")
}

// inferPagedAttention checks paged attention's operands: q [T, Hq, D]; the
// step's own keys and values k, v [T, Hkv, D]; the pools kpool, vpool
// [P, Hkv, D] (P slots, Block to a block); the block table [S, M], the
// sequence lengths [S] and the query starts [S+1], integers; and the count
// of sequences present, an integer scalar; and optionally the sinks
// [Hq], one logit a query head, f32 or q's dtype.
func inferPagedAttention(a Attrs, in []ValueType) (Shape, DType, error) {
	q, k, v, kp, vp := in[0], in[1], in[2], in[3], in[4]
	table, lens, starts, seqs := in[5], in[6], in[7], in[8]
	for _, t := range []ValueType{q, k, v, kp, vp} {
		if len(t.Shape) != 3 {
			return nil, 0, fmt.Errorf("q, k, v and the pools must have rank 3 ([tokens, heads, head size] and [slots, heads, head size])")
		}
		if t.DType != q.DType || !t.DType.IsFloat() {
			return nil, 0, fmt.Errorf("q, k, v and the pools must share a float dtype")
		}
	}
	if !k.Shape.Equal(v.Shape) || k.Shape[0] != q.Shape[0] || k.Shape[2] != q.Shape[2] {
		return nil, 0, fmt.Errorf("k and v must be [%d, heads, %d]", q.Shape[0], q.Shape[2])
	}
	if !kp.Shape.Equal(vp.Shape) || kp.Shape[1] != k.Shape[1] || kp.Shape[2] != k.Shape[2] {
		return nil, 0, fmt.Errorf("the pools must be [slots, %d, %d]", k.Shape[1], k.Shape[2])
	}
	if k.Shape[1] == 0 || q.Shape[1]%k.Shape[1] != 0 {
		return nil, 0, fmt.Errorf("%d query heads do not divide into %d key heads", q.Shape[1], k.Shape[1])
	}
	if a.Block <= 0 || int64(kp.Shape[0])%a.Block != 0 {
		return nil, 0, fmt.Errorf("block size %d does not divide the pool's %d slots", a.Block, kp.Shape[0])
	}
	if a.Window < 0 {
		return nil, 0, fmt.Errorf("window %d; want 0 (none) or a positive window", a.Window)
	}
	if !(a.Scale > 0) {
		return nil, 0, fmt.Errorf("scale %v; want a positive scale", a.Scale)
	}
	s := lens.Shape
	if len(s) != 1 || len(table.Shape) != 2 || table.Shape[0] != s[0] || len(starts.Shape) != 1 || starts.Shape[0] != s[0]+1 {
		return nil, 0, fmt.Errorf("want a block table [S, blocks], sequence lengths [S] and query starts [S+1]")
	}
	for _, t := range []ValueType{table, lens, starts, seqs} {
		if !t.DType.IsInt() {
			return nil, 0, fmt.Errorf("the block table, lengths, query starts and sequence count must be integers")
		}
	}
	if len(seqs.Shape) != 0 {
		return nil, 0, fmt.Errorf("the sequence count must be a scalar")
	}
	if len(in) > 9 {
		if sk := in[9]; len(sk.Shape) != 1 || sk.Shape[0] != q.Shape[1] || (sk.DType != F32 && sk.DType != q.DType) {
			return nil, 0, fmt.Errorf("the sinks are %s%v; want f32 or %s [%d], one a query head", sk.DType, sk.Shape, q.DType, q.Shape[1])
		}
	}
	return q.Shape.Clone(), q.DType, nil
}
