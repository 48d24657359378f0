package rules

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// Data is what the tensor analysis knows of an e-class.
type Data struct {
	Shape ir.Shape
	DType ir.DType
	// Const is the value of every element when the class is known to be
	// a constant that holds one value (a splat), and IsConst says so.
	Const   float64
	IsConst bool
	// WeightOnly says the value depends on weights and constants only, so
	// it can be computed once at load time.
	WeightOnly bool
	// Outputs, for the class of a kernel with several outputs, are their
	// types; such a class is no tensor (Shape and DType are unset), and
	// (proj i K) nodes take its outputs apart.
	Outputs []ir.ValueType
	// Err is set when the class's nodes are ill-typed: a rule built a term
	// the type checker rejects. Sound rules never do.
	Err string
}

// Valid reports whether the class is a tensor with a type.
func (d Data) Valid() bool { return d.Err == "" && d.DType.Valid() }

// IsTuple reports whether the class is a multi-output kernel's outputs.
func (d Data) IsTuple() bool { return d.Err == "" && len(d.Outputs) > 0 }

// Analysis is the tensor analysis. Conflicts between the facts of merged
// classes (two shapes for one value, two constants) can only come from an
// unsound rule; they are recorded, not fatal, so that the caller can name
// the rule through union provenance.
type Analysis struct {
	mu        sync.Mutex
	conflicts []Conflict
	// Fold adds a constant node to every class found to be a splat
	// constant, so that extraction can pick it (constant folding).
	Fold bool
}

// Conflict is two incompatible facts about one class, found when a union
// merged them; union provenance names the rule.
type Conflict struct {
	A, B Data
}

// String prints both sides' facts.
func (c Conflict) String() string {
	return fmt.Sprintf("%s versus %s", c.A.typeText(), c.B.typeText())
}

// typeText prints a class's type and constant fact.
func (d Data) typeText() string {
	if d.IsTuple() {
		var parts []string
		for _, o := range d.Outputs {
			parts = append(parts, fmt.Sprintf("%s%v", o.DType, o.Shape))
		}
		return fmt.Sprintf("a kernel's outputs (%s)", strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%s%v (const %v: %v)", d.DType, d.Shape, d.IsConst, d.Const)
}

// Conflicts returns the conflicts seen so far.
func (a *Analysis) Conflicts() []Conflict {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Conflict(nil), a.conflicts...)
}

// Make implements egraph.Analysis.
func (a *Analysis) Make(g *egraph.EGraph[Data], n egraph.Node) Data {
	if n.Op == KernelSymbol {
		kids := make([]Data, len(n.Children))
		for i, c := range n.Children {
			if kids[i] = g.Data(c); kids[i].Err != "" {
				return Data{Err: kids[i].Err}
			}
		}
		return kernelData(n, kids)
	}
	if n.Op == ProjSymbol {
		return projData(n, g.Data(n.Children[0]))
	}
	op, ok := OpOf(n.Op)
	if !ok {
		return Data{Err: fmt.Sprintf("%s is not a tensor op", n.Op)}
	}
	attrs, ok := Attrs(n.Payload)
	if !ok {
		return Data{Err: fmt.Sprintf("%s has an unknown payload %d", op, n.Payload)}
	}
	kids := make([]Data, len(n.Children))
	types := make([]ir.ValueType, len(n.Children))
	// A dequantized weight is decoded where it is read, never prepared
	// into a copy at load time: the packed bytes are what the run moves
	// and what memory holds.
	weightOnly := op != ir.OpInput && op != ir.OpState && op != ir.OpDequant
	for i, c := range n.Children {
		kids[i] = g.Data(c)
		if kids[i].Err != "" {
			return Data{Err: kids[i].Err}
		}
		types[i] = ir.ValueType{Shape: kids[i].Shape, DType: kids[i].DType}
		weightOnly = weightOnly && kids[i].WeightOnly
	}
	shape, dt, err := ir.Infer(op, attrs, types)
	if err != nil {
		return Data{Err: err.Error()}
	}
	d := Data{Shape: shape, DType: dt, WeightOnly: weightOnly}
	d.Const, d.IsConst = constValue(op, attrs, kids, dt)
	return d
}

// constValue folds splat constants through the ops that keep them splats.
func constValue(op ir.Op, a ir.Attrs, kids []Data, dt ir.DType) (float64, bool) {
	all := func() bool {
		for _, k := range kids {
			if !k.IsConst {
				return false
			}
		}
		return len(kids) > 0
	}
	var v float64
	switch {
	case op == ir.OpConst:
		return a.ConstSplat()
	case !all():
		return 0, false
	case op == ir.OpReshape || op == ir.OpExpand || op == ir.OpPermute || op == ir.OpSlice:
		return kids[0].Const, true
	case op == ir.OpCast:
		return dt.Round(kids[0].Const), true
	case op == ir.OpNeg:
		v = -kids[0].Const
	case op == ir.OpRecip:
		v = 1 / kids[0].Const
	case op == ir.OpSqrt:
		v = math.Sqrt(kids[0].Const)
	case op == ir.OpExp:
		v = math.Exp(kids[0].Const)
	case op == ir.OpAdd:
		v = kids[0].Const + kids[1].Const
	case op == ir.OpSub:
		v = kids[0].Const - kids[1].Const
	case op == ir.OpMul:
		v = kids[0].Const * kids[1].Const
	case op == ir.OpMax:
		v = math.Max(kids[0].Const, kids[1].Const)
	case op == ir.OpMin:
		v = math.Min(kids[0].Const, kids[1].Const)
	default:
		return 0, false
	}
	// A folded value is a constant of the dtype only if the dtype holds it
	// exactly; the float64 truth would otherwise differ from the constant.
	if dt.Round(v) != v {
		return 0, false
	}
	return v, true
}

// Merge implements egraph.Analysis.
func (a *Analysis) Merge(to *Data, from Data) egraph.DidMerge {
	switch {
	case to.Err != "" && from.Err == "":
		*to = from
		return egraph.DidMerge{To: true}
	case from.Err != "":
		return egraph.DidMerge{From: to.Err == ""}
	}
	var dm egraph.DidMerge
	if !sameTypes(to.Outputs, from.Outputs) || !to.Shape.Equal(from.Shape) || to.DType != from.DType ||
		(to.IsConst && from.IsConst && to.Const != from.Const && !(math.IsNaN(to.Const) && math.IsNaN(from.Const))) {
		a.mu.Lock()
		a.conflicts = append(a.conflicts, Conflict{A: *to, B: from})
		a.mu.Unlock()
		return egraph.DidMerge{From: true}
	}
	if from.IsConst && !to.IsConst {
		to.Const, to.IsConst = from.Const, true
		dm.To = true
	} else if to.IsConst && !from.IsConst {
		dm.From = true
	}
	if from.WeightOnly && !to.WeightOnly {
		to.WeightOnly = true
		dm.To = true
	} else if to.WeightOnly && !from.WeightOnly {
		dm.From = true
	}
	return dm
}

// sameTypes reports whether two output lists agree.
func sameTypes(a, b []ir.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Shape.Equal(b[i].Shape) || a[i].DType != b[i].DType {
			return false
		}
	}
	return true
}

// Modify implements egraph.Analysis: with Fold, a class known to be a splat
// constant gets the constant node.
func (a *Analysis) Modify(g *egraph.EGraph[Data], id egraph.ClassID) {
	d := g.Data(id)
	if !a.Fold || !d.IsConst || !d.Valid() {
		return
	}
	attrs := ir.Attrs{DType: d.DType, To: d.Shape, Data: []float64{d.Const}}
	c, err := g.Add(egraph.Node{Op: Symbol(ir.OpConst), Payload: AttrPayload(ir.OpConst, attrs)})
	if err == nil {
		g.Union(id, c, "constant folding")
	}
}
