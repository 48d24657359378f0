package onnx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/corpus/onnx/onnxpb"
	"github.com/lumsearch/lumsearch/ir"
)

// ImportOptions tune Import.
type ImportOptions struct {
	// Dims gives a value to each symbolic input dimension by its name (the
	// command line's --dim name=value). The IR's shapes are static, so
	// every symbolic dimension of a graph input must be bound.
	Dims map[string]int64
	// Constants fixes the values of graph inputs by name: such an input
	// becomes a constant known at import time instead of an input of the
	// graph. Inputs that give shapes, axes or bounds (Reshape's shape,
	// Slice's starts, ...) must be known at import time, since the IR's
	// shapes are static; an import that needs one fails with an error
	// matching ErrNotConstant.
	Constants map[string]*ir.Tensor
}

// Imported is an ONNX model converted to the tensor IR.
type Imported struct {
	// Graph computes the model's outputs. Its inputs are the ONNX graph
	// inputs that are not initializers, named as in the model; its outputs
	// are the ONNX graph outputs, in order and by name.
	Graph *ir.Graph
	// Weights holds a tensor for every weight of Graph, by name: the
	// model's initializers that the graph reads. FLOAT initializers alias
	// the model's bytes (see Tensor.IRTensor), so the Model must stay open
	// while they are used.
	Weights map[string]*ir.Tensor
}

// ErrUnsupported is matched (errors.Is) by import errors that say the
// model uses something this importer does not implement: an operator, an
// operator version, an attribute value, an element type. Other import
// errors mean the model is malformed or inconsistent.
var ErrUnsupported = errors.New("unsupported")

// ErrNotConstant is matched (errors.Is) by import errors that say an input
// giving a shape, axes or bounds is not known at import time. They match
// ErrUnsupported too. ImportOptions.Constants can give such an input a
// value.
var ErrNotConstant = errors.New("not a constant")

type unsupportedError struct {
	msg      string
	notConst bool
}

func (e *unsupportedError) Error() string { return e.msg }

func (e *unsupportedError) Is(target error) bool {
	return target == ErrUnsupported || (e.notConst && target == ErrNotConstant)
}

// notConstant makes an error that matches ErrNotConstant.
func notConstant(format string, args ...any) error {
	return &unsupportedError{msg: fmt.Sprintf(format, args...), notConst: true}
}

// unsupported makes an error that matches ErrUnsupported.
func unsupported(format string, args ...any) error {
	return &unsupportedError{msg: fmt.Sprintf(format, args...)}
}

// NodeError is an import error at one node. Its message reads
//
//	node "add_1" (Add, opset 13): ...
//
// naming the node (or, for a node without a name, its first output), the
// operator (prefixed by its domain when that is not the default one) and
// the opset the model imports for the node's domain.
type NodeError struct {
	Node   string
	Op     string
	Domain string
	Opset  int64
	Err    error
}

// Error formats the error as node "NAME" (Op, opset N): cause.
func (e *NodeError) Error() string {
	op := e.Op
	if e.Domain != "" {
		op = e.Domain + "." + op
	}
	return fmt.Sprintf("node %q (%s, opset %d): %v", e.Node, op, e.Opset, e.Err)
}

// Unwrap returns the underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// foldLimit is the most elements a tensor computed at import time may
// have. Shape computations are far smaller; larger constant results are
// computed by the graph instead.
const foldLimit = 1 << 16

// Import converts the main graph of m to the tensor IR. Every operator is
// implemented by the version of it in effect at the model's opset (see
// sinceVersions); values known at import time (constants, shapes and
// whatever is computed from them alone) are folded, so that shape
// arithmetic becomes static. Integer and boolean initializers of at most
// foldLimit elements become constants; other initializers become weights.
// Errors name the node, operator and opset where one is at fault.
func Import(m *Model, opt ImportOptions) (*Imported, error) {
	if m == nil || m.Proto.GetGraph() == nil {
		return nil, errors.New("import: model has no graph")
	}
	g := m.Proto.GetGraph()
	name := g.GetName()
	if name == "" {
		name = "model"
	}
	imp := &importer{m: m, opt: opt, b: ir.NewBuilder(name), vals: map[string]*entry{}, weights: map[string]*ir.Tensor{}}
	opset, ok := m.Opsets[""]
	if !ok {
		opset = 0
	}
	imp.opset = opset
	if err := imp.initializers(g); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if err := imp.inputs(g); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	for i, n := range g.GetNode() {
		if err := imp.node(i, n); err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
	}
	if err := imp.outputs(g); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	built, err := imp.b.Build()
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	pruned, err := prune(built)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	out := &Imported{Graph: pruned, Weights: map[string]*ir.Tensor{}}
	for _, v := range pruned.Weights() {
		n := pruned.Node(v)
		out.Weights[n.Name] = imp.weights[n.Name]
	}
	return out, nil
}

// importer holds the state of one Import.
type importer struct {
	m       *Model
	opt     ImportOptions
	b       *ir.Builder
	opset   int64
	vals    map[string]*entry
	weights map[string]*ir.Tensor
}

// entry is what the importer knows of one ONNX value.
type entry struct {
	v ir.Value   // the value in the graph
	c *ir.Tensor // its elements, when known at import time
	// bad is set instead for a graph input or initializer of an element
	// type the IR lacks; using it is an error.
	bad error
}

// initializers declares the main graph's initializers.
func (imp *importer) initializers(g *onnxpb.GraphProto) error {
	for _, tp := range g.GetInitializer() {
		name := tp.GetName()
		t := imp.m.Tensors[name]
		if t == nil || imp.vals[name] != nil {
			continue
		}
		dt, ok := irDType(t.DType)
		if !ok {
			imp.vals[name] = &entry{bad: unsupported("initializer %q has unsupported dtype %s", name, DTypeName(t.DType))}
			continue
		}
		x, err := t.IRTensor()
		if err != nil {
			return fmt.Errorf("initializer %q: %w", name, err)
		}
		if !dt.IsFloat() && x.Len() <= foldLimit {
			imp.vals[name] = &entry{v: constValue(imp.b, x), c: x}
			continue
		}
		imp.weights[name] = x
		imp.vals[name] = &entry{v: imp.b.Weight(name, dt, x.Shape...)}
	}
	return imp.b.Err()
}

// inputs declares the graph inputs that are not initializers, binding
// symbolic dimensions from the options.
func (imp *importer) inputs(g *onnxpb.GraphProto) error {
	for _, vi := range g.GetInput() {
		name := vi.GetName()
		if imp.vals[name] != nil {
			continue // an initializer, listed as an input with a default value
		}
		tt := vi.GetType().GetTensorType()
		if k, ok := imp.opt.Constants[name]; ok {
			if err := checkBinding(name, tt, k); err != nil {
				return err
			}
			imp.vals[name] = &entry{v: constValue(imp.b, k), c: k}
			continue
		}
		if tt == nil {
			imp.vals[name] = &entry{bad: unsupported("input %q is not a tensor (sequence, map and optional values are not supported)", name)}
			continue
		}
		odt := onnxpb.TensorProto_DataType(tt.GetElemType())
		dt, ok := irDType(odt)
		if !ok {
			imp.vals[name] = &entry{bad: unsupported("input %q has unsupported dtype %s", name, DTypeName(odt))}
			continue
		}
		if tt.GetShape() == nil {
			return fmt.Errorf("input %q has no shape; the IR needs static shapes", name)
		}
		var shape ir.Shape
		for ax, d := range tt.GetShape().GetDim() {
			switch {
			case d.GetDimParam() != "":
				p := d.GetDimParam()
				v, ok := imp.opt.Dims[p]
				if !ok {
					return fmt.Errorf("input %q axis %d: symbolic dimension %q has no value; pass --dim %s=VALUE", name, ax, p, p)
				}
				if v < 0 {
					return fmt.Errorf("input %q axis %d: dimension %q = %d is negative", name, ax, p, v)
				}
				shape = append(shape, ir.Dim(v))
			case hasDimValue(d):
				v := d.GetDimValue()
				if v < 0 {
					return fmt.Errorf("input %q axis %d: negative dimension %d", name, ax, v)
				}
				shape = append(shape, ir.Dim(v))
			default:
				return fmt.Errorf("input %q axis %d: dimension has neither a value nor a name; the IR needs static shapes", name, ax)
			}
		}
		if err := shape.Check(); err != nil {
			return fmt.Errorf("input %q: %w", name, err)
		}
		imp.vals[name] = &entry{v: imp.b.Input(name, dt, shape...)}
		if err := imp.b.Err(); err != nil {
			return err
		}
	}
	return nil
}

// hasDimValue reports whether a dimension is given by its value.
func hasDimValue(d *onnxpb.TensorShapeProto_Dimension) bool {
	_, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
	return ok
}

// checkBinding checks a value given for an input against its declared
// type: the element type must match, and each declared extent (a symbolic
// one too) must be the tensor's.
func checkBinding(name string, tt *onnxpb.TypeProto_Tensor, k *ir.Tensor) error {
	if k == nil || tt == nil {
		return fmt.Errorf("input %q: a constant value must be a tensor for a tensor input", name)
	}
	if want := onnxpb.TensorProto_DataType(tt.GetElemType()); want != onnxDType(k.DType) {
		return fmt.Errorf("input %q is %s; the value given for it is %s", name, DTypeName(want), k.DType)
	}
	if s := tt.GetShape(); s != nil {
		d := s.GetDim()
		if len(d) != len(k.Shape) {
			return fmt.Errorf("input %q has rank %d; the value given for it is %v", name, len(d), k.Shape)
		}
		for i, x := range d {
			if hasDimValue(x) && x.GetDimValue() != int64(k.Shape[i]) {
				return fmt.Errorf("input %q has extent %d on axis %d; the value given for it is %v", name, x.GetDimValue(), i, k.Shape)
			}
		}
	}
	return nil
}

// outputs names the graph outputs, checking the types the model declares.
func (imp *importer) outputs(g *onnxpb.GraphProto) error {
	for _, vi := range g.GetOutput() {
		name := vi.GetName()
		e := imp.vals[name]
		if e == nil {
			return fmt.Errorf("output %q is computed by no node", name)
		}
		if e.bad != nil {
			return e.bad
		}
		if tt := vi.GetType().GetTensorType(); tt != nil {
			dt, shape := imp.b.DType(e.v), imp.b.Shape(e.v)
			if want := onnxpb.TensorProto_DataType(tt.GetElemType()); want != onnxpb.TensorProto_UNDEFINED && want != onnxDType(dt) {
				return fmt.Errorf("output %q: the model declares %s, the import computes %s", name, DTypeName(want), dt)
			}
			if s := tt.GetShape(); s != nil {
				dims := s.GetDim()
				if len(dims) != len(shape) {
					return fmt.Errorf("output %q: the model declares rank %d, the import computes %v", name, len(dims), shape)
				}
				for i, d := range dims {
					if hasDimValue(d) && d.GetDimValue() != int64(shape[i]) {
						return fmt.Errorf("output %q: the model declares extent %d on axis %d, the import computes %v", name, d.GetDimValue(), i, shape)
					}
				}
			}
		}
		imp.b.Output(name, e.v)
	}
	return imp.b.Err()
}

// nodeLabel names a node in errors: its name, or its first output's.
func nodeLabel(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	if len(n.GetOutput()) > 0 {
		return n.GetOutput()[0]
	}
	return ""
}

// node converts one node.
func (imp *importer) node(index int, n *onnxpb.NodeProto) error {
	op := n.GetOpType()
	domain := n.GetDomain()
	if domain == "ai.onnx" {
		domain = ""
	}
	nerr := func(err error) error {
		opset := imp.opset
		if domain != "" {
			opset = imp.m.Opsets[domain]
		}
		return &NodeError{Node: nodeLabel(n), Op: op, Domain: domain, Opset: opset, Err: err}
	}
	if domain != "" {
		return nerr(unsupported("operators of domain %q are not supported", domain))
	}
	if imp.opset == 0 {
		return nerr(errors.New("the model imports no opset of the default domain"))
	}
	def, ok := handlers[op]
	if !ok {
		return nerr(unsupported("operator %s is not supported", op))
	}
	ver, ok := versionInEffect(op, imp.opset)
	if !ok {
		return nerr(fmt.Errorf("operator %s does not exist at opset %d", op, imp.opset))
	}
	if !slices.Contains(def.impl, ver) {
		return nerr(unsupported("%s-%d, the version in effect at opset %d, is not implemented (implemented: %s)", op, ver, imp.opset, versionList(op, def.impl)))
	}
	c := &nodeCtx{node: n, op: op, version: ver, attrs: map[string]*onnxpb.AttributeProto{}, used: map[string]bool{}}
	for _, a := range n.GetAttribute() {
		if a.GetRefAttrName() != "" {
			return nerr(unsupported("attribute %q refers to a function attribute", a.GetName()))
		}
		c.attrs[a.GetName()] = a
	}
	allConst, someInput := true, false
	for i, name := range n.GetInput() {
		if name == "" {
			c.inNames = append(c.inNames, "")
			c.entries = append(c.entries, nil)
			continue
		}
		e := imp.vals[name]
		if e == nil {
			return nerr(fmt.Errorf("input %d (%q) is not defined before the node", i, name))
		}
		if e.bad != nil {
			return nerr(e.bad)
		}
		c.inNames = append(c.inNames, name)
		c.entries = append(c.entries, e)
		someInput = true
		allConst = allConst && e.c != nil
	}
	var outs []result
	var err error
	folded := false
	if someInput && allConst {
		outs, folded, err = imp.fold(c, def)
	}
	if err == nil && !folded {
		outs, err = imp.run(c, def, imp.b)
	}
	if err != nil {
		return nerr(err)
	}
	for i, name := range n.GetOutput() {
		if name == "" {
			continue
		}
		if i >= len(outs) || outs[i].v < 0 {
			return nerr(unsupported("output %d (%q) is not supported", i, name))
		}
		imp.vals[name] = &entry{v: outs[i].v, c: outs[i].c}
	}
	return nil
}

// versionList prints the implemented versions of op.
func versionList(op string, impl []int64) string {
	var parts []string
	for _, v := range impl {
		parts = append(parts, fmt.Sprintf("%s-%d", op, v))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// result is one output of a converted node.
type result struct {
	v ir.Value
	c *ir.Tensor
}

// run calls the handler with inputs in builder b and checks what it did.
func (imp *importer) run(c *nodeCtx, def opDef, b *ir.Builder) ([]result, error) {
	c.b = b
	c.err = nil
	c.known = map[ir.Value]*ir.Tensor{}
	c.ins = make([]ir.Value, len(c.entries))
	for i, e := range c.entries {
		c.ins[i] = ir.NoValue
		if e != nil {
			if b == imp.b {
				c.ins[i] = e.v
			} else {
				c.ins[i] = constValue(b, e.c)
			}
		}
	}
	vs, err := def.fn(c)
	if err == nil {
		err = c.err
	}
	if err == nil {
		err = b.Err()
	}
	if err == nil {
		for name := range c.attrs {
			if !c.used[name] {
				err = unsupported("attribute %q is not supported", name)
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]result, len(vs))
	for i, v := range vs {
		out[i] = result{v: v, c: c.known[v]}
	}
	return out, nil
}

// fold computes a node whose inputs are all known at import time: the
// handler builds its ops in a scratch graph over constant inputs, the
// reference interpreter evaluates them, and the results become constants.
// It reports false (and no error) when a result is too large to fold.
func (imp *importer) fold(c *nodeCtx, def opDef) ([]result, bool, error) {
	sb := ir.NewBuilder("fold")
	vs, err := imp.run(c, def, sb)
	if err != nil {
		return nil, false, err
	}
	for i, r := range vs {
		if r.v < 0 {
			continue
		}
		if sb.Shape(r.v).NumElements() > foldLimit {
			return nil, false, nil
		}
		sb.Output(fmt.Sprint(i), r.v)
	}
	g, err := sb.Build()
	if err != nil {
		return nil, false, err
	}
	for _, n := range g.Nodes {
		if n.Shape.NumElements() > foldLimit {
			return nil, false, nil // a large intermediate: leave it to the graph
		}
	}
	res, err := ir.Eval(context.Background(), g, nil, ir.EvalOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("computing a constant: %w", err)
	}
	out := make([]result, len(vs))
	for i, r := range vs {
		out[i].v = ir.NoValue
		if r.v < 0 {
			continue
		}
		k, err := knownTensor(res.Outputs[fmt.Sprint(i)])
		if err != nil {
			return nil, false, err
		}
		out[i] = result{v: constValue(imp.b, k), c: k}
	}
	if err := imp.b.Err(); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// knownTensor is a folded result as the importer keeps it: integer and
// bool values exact, float values rounded to their dtype (the interpreter
// keeps them in float64), in storage of the tensor's own.
func knownTensor(t *ir.Tensor) (*ir.Tensor, error) {
	if t.DType.IsInt() || t.DType == ir.Bool {
		return ir.TensorOfInts(t.DType, t.Shape, t.Int64s()...)
	}
	return ir.TensorOf(t.DType, t.Shape, t.Float64s()...)
}

// constValue adds a constant holding t's elements to b, as one broadcast
// value when they are all equal. Integer values go in exactly (ConstInts):
// float64 would turn torch's 2^63-1 into 2^63.
func constValue(b *ir.Builder, t *ir.Tensor) ir.Value {
	if t.DType.IsInt() {
		vals := t.Int64s()
		switch {
		case len(vals) == 0:
			vals = []int64{0}
		case !slices.ContainsFunc(vals, func(v int64) bool { return v != vals[0] }):
			vals = vals[:1]
		}
		return b.ConstInts(t.DType, t.Shape, vals...)
	}
	vals := t.Float64s()
	if len(vals) > 0 && allSame(vals) {
		vals = vals[:1]
	}
	if len(vals) == 0 {
		vals = []float64{0}
	}
	return b.Const(t.DType, t.Shape, vals...)
}

func allSame(vals []float64) bool {
	for _, v := range vals[1:] {
		if v != vals[0] && !(v != v && vals[0] != vals[0]) {
			return false
		}
	}
	return true
}

// prune drops the nodes no output depends on (constants made for folding,
// unused initializers), keeping every input so that the graph's signature
// is the model's.
func prune(g *ir.Graph) (*ir.Graph, error) {
	live := make([]bool, len(g.Nodes))
	for _, o := range g.Outputs {
		live[o.Value] = true
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		if n.Op == ir.OpInput {
			live[i] = true
		}
		if live[i] {
			for _, in := range n.Inputs {
				live[in] = true
			}
		}
	}
	out := &ir.Graph{Name: g.Name}
	remap := make([]ir.Value, len(g.Nodes))
	for i, n := range g.Nodes {
		if !live[i] {
			continue
		}
		m := *n
		m.Inputs = make([]ir.Value, len(n.Inputs))
		for k, in := range n.Inputs {
			m.Inputs[k] = remap[in]
		}
		remap[i] = ir.Value(len(out.Nodes))
		out.Nodes = append(out.Nodes, &m)
	}
	for _, o := range g.Outputs {
		out.Outputs = append(out.Outputs, ir.Output{Name: o.Name, Value: remap[o.Value]})
	}
	if err := out.Check(); err != nil {
		return nil, err
	}
	return out, nil
}
