package ir

import "fmt"

// Op is an operation of the tensor language.
type Op uint8

// The ops. Leaves first, then elementwise math, reductions, views and data
// movement, and the composite ops that kernels or libraries match; a
// composite op's meaning is its decomposition into the ops above it, which
// the interpreter and the rule verifier use.
const (
	InvalidOp Op = iota

	// Leaves.
	OpInput  // a model input, fed at run time; attr Name
	OpWeight // a parameter, fixed at load time; attr Name
	OpState  // a buffer kept across runs (a KV cache), read here; attr Name
	OpConst  // a constant tensor; attr Data, or Ints for integer dtypes (one value broadcast, or every element)
	OpIota   // 0, 1, 2, ... along attr Axis of attr Shape

	// Unary elementwise.
	OpNeg
	OpAbs
	OpExp
	OpLog
	OpSqrt
	OpRsqrt
	OpRecip
	OpSin
	OpCos
	OpTanh
	OpSigmoid
	OpErf
	OpRelu
	OpFloor
	OpCeil
	OpNot // logical not of a bool

	// Binary elementwise: operands of equal shape and dtype.
	OpAdd
	OpSub
	OpMul
	OpDiv
	OpPow
	OpMax
	OpMin
	OpMod // remainder with the sign of the dividend (C fmod)
	OpAnd
	OpOr

	// Comparisons: bool result.
	OpEq
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe

	// OpWhere selects elementwise: cond ? a : b.
	OpWhere

	// One-axis reductions; the axis is kept with extent 1.
	OpSum // attr Axis
	OpMaxReduce

	// Views: no arithmetic, only where elements come from.
	OpPermute // attr Perm: output axis i is input axis Perm[i]
	OpReshape // attr Shape, same number of elements, row-major order
	OpExpand  // attr Shape, same rank; extent-1 axes repeat
	OpSlice   // attrs Starts, Ends, Steps per axis (Steps > 0)
	OpPad     // attrs Before, After per axis (non-negative), Value

	// Data movement.
	OpConcat      // attr Axis; any number of inputs
	OpCast        // attr DType
	OpGather      // attr Axis; (data, indices): out = data.shape[:axis] + indices.shape + data.shape[axis+1:]
	OpSliceUpdate // attrs Axis, Offset; (base, update[, at]): base with update written at Offset (+ at) along Axis

	// Composite ops.
	OpMatMul    // (a [..., M, K], b [..., K, N]) -> [..., M, N]; batch dims equal; dtype=f32 widens f16/bf16 operands
	OpSoftmax   // attr Axis
	OpLayerNorm // (x, scale, bias) over the last axis; attr Eps
	OpRMSNorm   // (x, scale) over the last axis; attr Eps
	OpAttention // (q [B,Hq,S,D], k [B,Hkv,T,D], v [B,Hkv,T,D][, pos]) -> [B,Hq,S,D]; attrs Scale, Causal, Offset (position of the first query, plus pos)

	// The serving step's ops, numbered after the others so that the
	// digests of existing kernel bodies (which hash op numbers) stay as
	// they were.
	OpScatter        // attr Axis; (base, update, index [n]): base with update's slice i written at index[i] along Axis; -1 skips
	OpPagedAttention // (q [T,Hq,D], k, v [T,Hkv,D], kpool, vpool [P,Hkv,D], table [S,M], lens [S], starts [S+1], seqs[, sinks [Hq]]) -> [T,Hq,D]; attrs Scale, Block, Window

	// Mixture of experts, numbered after the serving step's ops for the
	// same reason (see experts.go).
	OpRoute   // (logits [R,E]) -> f32 [R,E]: the TopK largest per row weighted, the rest 0; attrs TopK, Gating
	OpExperts // (x [R,H], weights f32 [R,E], gate_up [E,H,2I], down [E,I,H], gate_up_bias [E,2I], down_bias [E,H]) -> [R,H]; attrs TopK, Gating, Limit
	// Experts split in two: each row's chosen experts as slots, in
	// ascending expert order (slots past a row's choices hold 0).
	OpExpertsUp   // (x [R,H], weights f32 [R,E], gate_up [E,H,2I], gate_up_bias [E,2I]) -> [R,K,I]: the slots' gated activations; attrs TopK, Gating, Limit
	OpExpertsDown // (h [R,K,I], weights f32 [R,E], down [E,I,H], down_bias [E,H]) -> f32 [R,K,H]: the slots' outputs times their weights; attr TopK

	// Quantized weights, numbered after the mixture-of-experts ops for
	// the same reason (see dequant.go).
	OpDequant // (codes, scales[, zeros]) -> the weight's values in attr DType; attrs Format, Group, GroupN
	// OpRoundE4M3 rounds to the nearest e4m3 value (ties to even),
	// saturating at ±448: an activation's quantization to fp8 (W8A8).
	OpRoundE4M3

	numOps
)

// Class groups ops by how they compute.
type Class uint8

// The op classes.
const (
	ClassLeaf Class = iota
	ClassUnary
	ClassBinary
	ClassCompare
	ClassSelect
	ClassReduce
	ClassView
	ClassMove
	ClassComposite
)

// attrSet names the attributes an op carries, for checking, printing and
// parsing.
type attrSet uint16

const (
	aName attrSet = 1 << iota
	aData
	aAxis
	aShape
	aPerm
	aSlice // Starts, Ends, Steps
	aPad   // Before, After, Value
	aDType
	aEps
	aAttn // Scale, Causal, Offset
	aOffset
	aPaged // Scale, Block, Window
	aRoute // TopK, Gating
	aMoE   // TopK, Gating, Limit
	aTopK  // TopK
	aQuant // DType, Format, Group, GroupN
)

type opInfo struct {
	name  string
	class Class
	arity int // -1: any number (at least one)
	attrs attrSet
	// optional is the number of operands that may follow the arity's:
	// a runtime position (an integer scalar added to Offset), for the
	// ops whose offset can be a symbol's value.
	optional int
}

// extras is, per op, the number of operands that may follow the arity's
// and are no position (paged attention's sinks). An op has optional or
// extra operands, not both.
var extras = [numOps]int{OpPagedAttention: 1, OpDequant: 1}

var ops = [numOps]opInfo{
	OpInput:  {"input", ClassLeaf, 0, aName, 0},
	OpWeight: {"weight", ClassLeaf, 0, aName, 0},
	OpState:  {"state", ClassLeaf, 0, aName, 0},
	OpConst:  {"const", ClassLeaf, 0, aData, 0},
	OpIota:   {"iota", ClassLeaf, 0, aAxis, 0},

	OpNeg:     {"neg", ClassUnary, 1, 0, 0},
	OpAbs:     {"abs", ClassUnary, 1, 0, 0},
	OpExp:     {"exp", ClassUnary, 1, 0, 0},
	OpLog:     {"log", ClassUnary, 1, 0, 0},
	OpSqrt:    {"sqrt", ClassUnary, 1, 0, 0},
	OpRsqrt:   {"rsqrt", ClassUnary, 1, 0, 0},
	OpRecip:   {"recip", ClassUnary, 1, 0, 0},
	OpSin:     {"sin", ClassUnary, 1, 0, 0},
	OpCos:     {"cos", ClassUnary, 1, 0, 0},
	OpTanh:    {"tanh", ClassUnary, 1, 0, 0},
	OpSigmoid: {"sigmoid", ClassUnary, 1, 0, 0},
	OpErf:     {"erf", ClassUnary, 1, 0, 0},
	OpRelu:    {"relu", ClassUnary, 1, 0, 0},
	OpFloor:   {"floor", ClassUnary, 1, 0, 0},
	OpCeil:    {"ceil", ClassUnary, 1, 0, 0},
	OpNot:     {"not", ClassUnary, 1, 0, 0},

	OpAdd: {"add", ClassBinary, 2, 0, 0},
	OpSub: {"sub", ClassBinary, 2, 0, 0},
	OpMul: {"mul", ClassBinary, 2, 0, 0},
	OpDiv: {"div", ClassBinary, 2, 0, 0},
	OpPow: {"pow", ClassBinary, 2, 0, 0},
	OpMax: {"max", ClassBinary, 2, 0, 0},
	OpMin: {"min", ClassBinary, 2, 0, 0},
	OpMod: {"mod", ClassBinary, 2, 0, 0},
	OpAnd: {"and", ClassBinary, 2, 0, 0},
	OpOr:  {"or", ClassBinary, 2, 0, 0},

	OpEq: {"eq", ClassCompare, 2, 0, 0},
	OpNe: {"ne", ClassCompare, 2, 0, 0},
	OpLt: {"lt", ClassCompare, 2, 0, 0},
	OpLe: {"le", ClassCompare, 2, 0, 0},
	OpGt: {"gt", ClassCompare, 2, 0, 0},
	OpGe: {"ge", ClassCompare, 2, 0, 0},

	OpWhere: {"where", ClassSelect, 3, 0, 0},

	OpSum:       {"sum", ClassReduce, 1, aAxis, 0},
	OpMaxReduce: {"reduce_max", ClassReduce, 1, aAxis, 0},

	OpPermute: {"permute", ClassView, 1, aPerm, 0},
	OpReshape: {"reshape", ClassView, 1, aShape, 0},
	OpExpand:  {"expand", ClassView, 1, aShape, 0},
	OpSlice:   {"slice", ClassView, 1, aSlice, 0},
	OpPad:     {"pad", ClassView, 1, aPad, 0},

	OpConcat:      {"concat", ClassMove, -1, aAxis, 0},
	OpCast:        {"cast", ClassMove, 1, aDType, 0},
	OpGather:      {"gather", ClassMove, 2, aAxis, 0},
	OpSliceUpdate: {"slice_update", ClassMove, 2, aAxis | aOffset, 1},

	OpMatMul:    {"matmul", ClassComposite, 2, aDType, 0},
	OpSoftmax:   {"softmax", ClassComposite, 1, aAxis, 0},
	OpLayerNorm: {"layer_norm", ClassComposite, 3, aEps, 0},
	OpRMSNorm:   {"rms_norm", ClassComposite, 2, aEps, 0},
	OpAttention: {"attention", ClassComposite, 3, aAttn, 1},

	OpScatter:        {"scatter", ClassMove, 3, aAxis, 0},
	OpPagedAttention: {"paged_attention", ClassComposite, 9, aPaged, 0},

	OpRoute:   {"route", ClassComposite, 1, aRoute, 0},
	OpExperts: {"experts", ClassComposite, 6, aMoE, 0},

	OpExpertsUp:   {"experts_up", ClassComposite, 4, aMoE, 0},
	OpExpertsDown: {"experts_down", ClassComposite, 4, aTopK, 0},

	OpDequant:   {"dequant", ClassComposite, 2, aQuant, 0},
	OpRoundE4M3: {"round_e4m3", ClassUnary, 1, 0, 0},
}

// String is the op's name in the text format.
func (o Op) String() string {
	if o > InvalidOp && o < numOps {
		return ops[o].name
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Class says how the op computes.
func (o Op) Class() Class { return ops[o].class }

// Arity is the number of inputs, or -1 for any number (concat). An op
// with optional operands (MaxArity above Arity) takes Arity at least.
func (o Op) Arity() int { return ops[o].arity }

// MaxArity is the most inputs the op takes: Arity plus its optional
// runtime position operand (slice_update, attention) or its extra
// operands (paged attention's sinks), -1 for concat.
func (o Op) MaxArity() int {
	if ops[o].arity < 0 {
		return -1
	}
	return ops[o].arity + ops[o].optional + extras[o]
}

// HasPosition says the op's operand past its arity, when given, is a
// runtime position (Node.DynamicOffset), not an extra operand.
func (o Op) HasPosition() bool { return o.Valid() && ops[o].optional > 0 }

// DynamicOffset returns the operand that holds a node's runtime position,
// the integer scalar added to its static Offset (slice_update's write
// position, attention's first query position), if the node has one.
func (n *Node) DynamicOffset() (Value, bool) {
	if n.Op.Valid() && ops[n.Op].optional > 0 && len(n.Inputs) > ops[n.Op].arity {
		return n.Inputs[ops[n.Op].arity], true
	}
	return NoValue, false
}

// Valid reports whether o is an op of the language.
func (o Op) Valid() bool { return o > InvalidOp && o < numOps }

// ParseOp reads an op name.
func ParseOp(s string) (Op, error) {
	for o := Op(1); o < numOps; o++ {
		if ops[o].name == s {
			return o, nil
		}
	}
	return InvalidOp, fmt.Errorf("unknown op %q", s)
}

// Ops lists every op, for tables and exhaustive tests.
func Ops() []Op {
	out := make([]Op, 0, numOps-1)
	for o := Op(1); o < numOps; o++ {
		out = append(out, o)
	}
	return out
}

// Normalize returns a with only the fields op uses (and, for leaves, their
// declared shape and dtype), so that two nodes with the same op and the
// same meaning have equal attributes: the form the e-graph interns.
func (o Op) Normalize(a Attrs) Attrs {
	if !o.Valid() {
		return Attrs{}
	}
	set := ops[o].attrs
	var n Attrs
	if o.Class() == ClassLeaf {
		n.DType, n.To = a.DType, a.To.Clone()
	}
	if set&aName != 0 {
		n.Name = a.Name
	}
	if set&aData != 0 {
		n.Data = append([]float64(nil), a.Data...)
		if a.Ints != nil {
			n.Ints = append([]int64{}, a.Ints...)
		}
		intConstData(n.DType, &n)
	}
	if set&aAxis != 0 {
		n.Axis = a.Axis
	}
	if set&aShape != 0 {
		n.To = a.To.Clone()
	}
	if set&aPerm != 0 {
		n.Perm = append([]int(nil), a.Perm...)
	}
	if set&aSlice != 0 {
		n.Starts = append([]int64(nil), a.Starts...)
		n.Ends = append([]int64(nil), a.Ends...)
		n.Steps = append([]int64(nil), a.Steps...)
	}
	if set&aPad != 0 {
		n.Before = append([]int64(nil), a.Before...)
		n.After = append([]int64(nil), a.After...)
		n.Value = a.Value
	}
	if set&aDType != 0 {
		n.DType = a.DType
	}
	if set&aEps != 0 {
		n.Eps = a.Eps
	}
	if set&aAttn != 0 {
		n.Scale, n.Causal, n.Offset = a.Scale, a.Causal, a.Offset
	}
	if set&aOffset != 0 {
		n.Offset = a.Offset
	}
	if set&aPaged != 0 {
		n.Scale, n.Block, n.Window = a.Scale, a.Block, a.Window
	}
	if set&aRoute != 0 {
		n.TopK, n.Gating = a.TopK, a.Gating
	}
	if set&aMoE != 0 {
		n.TopK, n.Gating, n.Limit = a.TopK, a.Gating, a.Limit
	}
	if set&aTopK != 0 {
		n.TopK = a.TopK
	}
	if set&aQuant != 0 {
		n.DType, n.Format, n.Group, n.GroupN = a.DType, a.Format, a.Group, a.GroupN
	}
	return n
}
