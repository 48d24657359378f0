package ir

import (
	"fmt"
	"math"
)

// Experts split in two ops, so that each is one kernel: experts_up computes
// the gated activations of each row's chosen experts, slot by slot, and
// experts_down their down projections times their weights, each slot's
// [hidden] row apart in f32 (a partial of the row's sum, kept in its
// accumulator's precision); a sum over the slots and a cast give experts'
// result. A row's slots are its chosen experts (weights other than 0) in
// ascending expert order, and the slots past them hold 0.

// ExpertsUp is experts' first half: x [rows, hidden] through the gate-up
// projection of each slot's expert and the gated activation, [rows, k,
// intermediate] in x's dtype.
func (b *Builder) ExpertsUp(x, weights, gateUp, gateUpBias Value, k int, g Gating, limit float64) Value {
	return b.Apply(OpExpertsUp, Attrs{TopK: int64(k), Gating: g, Limit: limit}, x, weights, gateUp, gateUpBias)
}

// ExpertsDown is experts' second half: each slot's activations h [rows, k,
// intermediate] through its expert's down projection plus bias, times its
// weight, f32 [rows, k, hidden].
func (b *Builder) ExpertsDown(h, weights, down, downBias Value, k int) Value {
	return b.Apply(OpExpertsDown, Attrs{TopK: int64(k)}, h, weights, down, downBias)
}

// Slots lists the experts a row of weights chooses (those other than 0),
// in ascending order; more than k is an error.
func Slots(w []float64, k int) ([]int, error) {
	var out []int
	for ex, v := range w {
		if v != 0 {
			out = append(out, ex)
		}
	}
	if len(out) > k {
		return nil, fmt.Errorf("%d experts chosen, more than k=%d", len(out), k)
	}
	return out, nil
}

func inferExpertsUp(a Attrs, in []ValueType) (Shape, DType, error) {
	x, w, gu, gub := in[0], in[1], in[2], in[3]
	if len(x.Shape) != 2 || !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("x must be a float matrix [rows, hidden]")
	}
	R, H := x.Shape[0], x.Shape[1]
	E, err := slotWeights(a, w, R)
	if err != nil {
		return nil, 0, err
	}
	if len(gu.Shape) != 3 || gu.Shape[0] != E || gu.Shape[1] != H || gu.Shape[2]%2 != 0 || gu.Shape[2] == 0 || gu.DType != x.DType {
		return nil, 0, fmt.Errorf("gate_up must be %s[%d, %d, 2 × intermediate]", x.DType, E, H)
	}
	I := gu.Shape[2] / 2
	if !gub.Shape.Equal(Shape{E, 2 * I}) || gub.DType != x.DType {
		return nil, 0, fmt.Errorf("gate_up_bias must be %s%v", x.DType, Shape{E, 2 * I})
	}
	if err := checkActivation(a); err != nil {
		return nil, 0, err
	}
	return Shape{R, Dim(a.TopK), I}, x.DType, nil
}

func inferExpertsDown(a Attrs, in []ValueType) (Shape, DType, error) {
	h, w, dn, dnb := in[0], in[1], in[2], in[3]
	if len(h.Shape) != 3 || !h.DType.IsFloat() {
		return nil, 0, fmt.Errorf("h must be a float tensor [rows, k, intermediate]")
	}
	R, I := h.Shape[0], h.Shape[2]
	E, err := slotWeights(a, w, R)
	if err != nil {
		return nil, 0, err
	}
	if h.Shape[1] != Dim(a.TopK) {
		return nil, 0, fmt.Errorf("h has %d slots a row, not k=%d", h.Shape[1], a.TopK)
	}
	if len(dn.Shape) != 3 || dn.Shape[0] != E || dn.Shape[1] != I || dn.DType != h.DType {
		return nil, 0, fmt.Errorf("down must be %s[%d, %d, hidden]", h.DType, E, I)
	}
	H := dn.Shape[2]
	if !dnb.Shape.Equal(Shape{E, H}) || dnb.DType != h.DType {
		return nil, 0, fmt.Errorf("down_bias must be %s%v", h.DType, Shape{E, H})
	}
	return Shape{R, Dim(a.TopK), H}, F32, nil
}

// slotWeights checks the weights [R, E] and k, returning E.
func slotWeights(a Attrs, w ValueType, R Dim) (Dim, error) {
	if len(w.Shape) != 2 || w.Shape[0] != R || w.DType != F32 {
		return 0, fmt.Errorf("weights must be f32[%d, experts]", R)
	}
	E := w.Shape[1]
	if a.TopK < 1 || a.TopK > int64(E) {
		return 0, fmt.Errorf("k=%d of %d experts; want 1..%d", a.TopK, E, E)
	}
	return E, nil
}

// slotsRow computes row r of experts_up or experts_down into y (its k
// slots, each of the result's last extent L) and ym when not nil; the row
// is checked (compute).
func (o *expertsOperands) slotsRow(op Op, k, r int, y, ym []float64) error {
	clear(y)
	if ym != nil {
		clear(ym)
	}
	slots, err := Slots(o.w[r*o.E:(r+1)*o.E], k)
	if err != nil {
		return fmt.Errorf("row %d: %w", r, err)
	}
	mag := ym != nil
	if op == OpExpertsUp {
		hm := make([]float64, o.I)
		for s, ex := range slots {
			o.up(r, ex, y[s*o.I:(s+1)*o.I], hm, mag)
			if mag {
				copy(ym[s*o.I:], hm)
			}
		}
		return nil
	}
	d, dm := make([]float64, o.H), make([]float64, o.H)
	for s, ex := range slots {
		base := (r*k + s) * o.I
		var hm []float64
		if mag {
			hm = o.xm[base : base+o.I]
		}
		o.down(ex, o.x[base:base+o.I], hm, d, dm, mag)
		wt := o.w[r*o.E+ex]
		for j := range o.H {
			y[s*o.H+j] = wt * d[j]
			if mag {
				ym[s*o.H+j] = math.Abs(wt)*dm[j] + o.wm[r*o.E+ex]*math.Abs(d[j])
			}
		}
	}
	return nil
}
