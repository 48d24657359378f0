package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file is the text format's parser; text.go describes the format and
// prints it.

// Parse reads a graph in the text format that Format writes (see the
// comment at the top of text.go). It builds each node with Infer, checks
// any written result type against it, and checks the finished graph.
// Errors are "line:col: message" and name the op and types involved.
func Parse(src string) (*Graph, error) {
	lines, err := lexText(src)
	if err != nil {
		return nil, err
	}
	p := &textParser{g: &Graph{}, values: map[string]textValueDef{}, outputs: map[string]bool{}, leaves: map[leafKey]bool{}}
	for _, p.toks = range lines {
		p.i = 0
		if err := p.statement(); err != nil {
			return nil, err
		}
	}
	if !p.sawGraph {
		return nil, fmt.Errorf("1:1: want `graph NAME` first; the source has no statements")
	}
	if err := p.g.Check(); err != nil {
		// The parser checks everything Check does as it goes, with
		// positions; this is a backstop against the two drifting apart.
		return nil, fmt.Errorf("%d:%d: %w", p.graphPos.line, p.graphPos.col, err)
	}
	return p.g, nil
}

// The lexer turns the source into one token list per non-empty line, each
// ending with an end-of-line token, so that the parser never looks across
// a line break and every error has a position.

type textTokKind uint8

const (
	tEOL    textTokKind = iota
	tWord               // names of ops, dtypes, keys; numbers; bare graph names
	tValue              // %name; text holds the name without %
	tString             // a Go-quoted string; text holds the unquoted value
	tPunct              // one of = , [ ] { } :
)

type textPos struct{ line, col int }

type textToken struct {
	kind textTokKind
	text string
	textPos
}

func (t textToken) describe() string {
	switch t.kind {
	case tEOL:
		return "end of line"
	case tValue:
		return "%" + t.text
	}
	return strconv.Quote(t.text)
}

func isTextWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '+' || c == '-'
}

func lexText(src string) ([][]textToken, error) {
	var lines [][]textToken
	var cur []textToken
	line, start := 1, 0 // start: byte offset of the current line
	endLine := func(i int) {
		cur = append(cur, textToken{kind: tEOL, textPos: textPos{line, i - start + 1}})
		if len(cur) > 1 {
			lines = append(lines, cur)
		}
		cur = nil
	}
	for i := 0; i < len(src); {
		c := src[i]
		p := textPos{line, i - start + 1}
		switch {
		case c == '\n':
			endLine(i)
			i++
			line, start = line+1, i
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == ';':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' && src[j] != '\n' {
				if src[j] == '\\' && j+1 < len(src) && src[j+1] != '\n' {
					j++
				}
				j++
			}
			if j >= len(src) || src[j] != '"' {
				return nil, fmt.Errorf("%d:%d: unterminated string", p.line, p.col)
			}
			s, err := strconv.Unquote(src[i : j+1])
			if err != nil {
				return nil, fmt.Errorf("%d:%d: malformed string %s", p.line, p.col, src[i:j+1])
			}
			cur = append(cur, textToken{tString, s, p})
			i = j + 1
		case c == '%':
			j := i + 1
			for j < len(src) && isTextWordByte(src[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("%d:%d: want a value name after %%", p.line, p.col)
			}
			cur = append(cur, textToken{tValue, src[i+1 : j], p})
			i = j
		case isTextWordByte(c):
			j := i
			for j < len(src) && isTextWordByte(src[j]) {
				j++
			}
			cur = append(cur, textToken{tWord, src[i:j], p})
			i = j
		case strings.IndexByte("=,[]{}:", c) >= 0:
			cur = append(cur, textToken{tPunct, src[i : i+1], p})
			i++
		default:
			return nil, fmt.Errorf("%d:%d: unexpected character %q", p.line, p.col, rune(c))
		}
	}
	endLine(len(src))
	return lines, nil
}

type textValueDef struct {
	v Value
	textPos
}

type textParser struct {
	g        *Graph
	toks     []textToken
	i        int
	sawGraph bool
	graphPos textPos
	values   map[string]textValueDef
	outputs  map[string]bool
	leaves   map[leafKey]bool // the inputs, weights and states so far
}

func (p *textParser) peek() textToken { return p.toks[p.i] }

// next returns the current token and moves on, staying on the final
// end-of-line token so that a parser reading too far sees it again rather
// than running off the line.
func (p *textParser) next() textToken {
	t := p.toks[p.i]
	if t.kind != tEOL {
		p.i++
	}
	return t
}

func textErrorf(at textPos, format string, args ...any) error {
	return fmt.Errorf("%d:%d: %s", at.line, at.col, fmt.Sprintf(format, args...))
}

func (p *textParser) isPunct(s string) bool {
	t := p.peek()
	return t.kind == tPunct && t.text == s
}

func (p *textParser) expectPunct(s, what string) error {
	t := p.next()
	if t.kind != tPunct || t.text != s {
		return textErrorf(t.textPos, "want %q %s, got %s", s, what, t.describe())
	}
	return nil
}

func (p *textParser) expectEOL(what string) error {
	if t := p.next(); t.kind != tEOL {
		return textErrorf(t.textPos, "unexpected %s after %s", t.describe(), what)
	}
	return nil
}

func (p *textParser) statement() error {
	t := p.peek()
	if !p.sawGraph {
		if t.kind != tWord || t.text != "graph" {
			return textErrorf(t.textPos, "want `graph NAME` first, got %s", t.describe())
		}
	}
	switch {
	case t.kind == tValue:
		return p.nodeStatement()
	case t.kind == tWord && t.text == "graph":
		return p.graphStatement()
	case t.kind == tWord && t.text == "output":
		return p.outputStatement()
	case t.kind == tWord && t.text == "update":
		return p.updateStatement()
	case t.kind == tWord && t.text == "symbol":
		return p.symbolStatement()
	}
	return textErrorf(t.textPos, "want a statement (%%value = ..., output, update, symbol), got %s", t.describe())
}

func (p *textParser) graphStatement() error {
	t := p.next()
	if p.sawGraph {
		return textErrorf(t.textPos, "a second graph statement; the graph was named at %d:%d", p.graphPos.line, p.graphPos.col)
	}
	p.sawGraph, p.graphPos = true, t.textPos
	name := p.next()
	if name.kind != tWord && name.kind != tString {
		return textErrorf(name.textPos, "want the graph's name, got %s", name.describe())
	}
	p.g.Name = name.text
	return p.expectEOL("the graph's name")
}

func (p *textParser) value() (Value, textToken, error) {
	t := p.next()
	if t.kind != tValue {
		return NoValue, t, textErrorf(t.textPos, "want a %%value, got %s", t.describe())
	}
	d, ok := p.values[t.text]
	if !ok {
		return NoValue, t, textErrorf(t.textPos, "undefined value %%%s", t.text)
	}
	return d.v, t, nil
}

func (p *textParser) outputStatement() error {
	p.next()
	name := p.next()
	if name.kind != tString {
		return textErrorf(name.textPos, "want the output's quoted name, got %s", name.describe())
	}
	if p.outputs[name.text] {
		return textErrorf(name.textPos, "two outputs named %s", strconv.Quote(name.text))
	}
	if err := p.expectPunct("=", "after the output's name"); err != nil {
		return err
	}
	v, _, err := p.value()
	if err != nil {
		return err
	}
	p.outputs[name.text] = true
	p.g.Outputs = append(p.g.Outputs, Output{Name: name.text, Value: v})
	return p.expectEOL("the output")
}

func (p *textParser) updateStatement() error {
	p.next()
	s, st, err := p.value()
	if err != nil {
		return err
	}
	sn := p.g.Nodes[s]
	if sn.Op != OpState {
		return textErrorf(st.textPos, "update of %%%s, which is %s, not a state", st.text, sn.Op)
	}
	if err := p.expectPunct("=", "after the state"); err != nil {
		return err
	}
	v, vt, err := p.value()
	if err != nil {
		return err
	}
	if vn := p.g.Nodes[v]; !vn.Shape.Equal(sn.Shape) || vn.DType != sn.DType {
		return textErrorf(vt.textPos, "state %s is %s%v but its update %%%s is %s%v", strconv.Quote(sn.Name), sn.DType, sn.Shape, vt.text, vn.DType, vn.Shape)
	}
	p.g.Updates = append(p.g.Updates, StateUpdate{State: s, Value: v})
	return p.expectEOL("the update")
}

// symbolStatement reads `symbol "NAME" LO..HI`; Graph.Check, run on the
// parsed graph, checks the input that carries it.
func (p *textParser) symbolStatement() error {
	p.next()
	name := p.next()
	if name.kind != tString {
		return textErrorf(name.textPos, "want the symbol's quoted name, got %s", name.describe())
	}
	if _, dup := p.g.Symbol(name.text); dup {
		return textErrorf(name.textPos, "two symbols named %s", strconv.Quote(name.text))
	}
	r := p.next()
	lo, hi, ok := strings.Cut(r.text, "..")
	var a, b int64
	var err1, err2 error
	if ok {
		a, err1 = strconv.ParseInt(lo, 10, 64)
		b, err2 = strconv.ParseInt(hi, 10, 64)
	}
	if r.kind != tWord || !ok || err1 != nil || err2 != nil {
		return textErrorf(r.textPos, "want the symbol's range LO..HI (integers), got %s", r.describe())
	}
	p.g.Symbols = append(p.g.Symbols, Symbol{Name: name.text, Lo: a, Hi: b})
	return p.expectEOL("the symbol")
}

// textAttrKey describes one key=value attribute: the op-table bit that allows
// it, and how to read its value into Attrs.
type textAttrKey struct {
	bit  attrSet
	read func(p *textParser, a *Attrs) error
}

var textAttrKeys map[string]textAttrKey

func init() {
	// Built in init because the readers refer to parser methods, which
	// refer back to the table.
	textAttrKeys = map[string]textAttrKey{
		"axis": {aAxis, func(p *textParser, a *Attrs) error {
			v, err := p.int(strconv.IntSize)
			a.Axis = int(v)
			return err
		}},
		"to": {aShape, func(p *textParser, a *Attrs) (err error) {
			a.To, err = p.shape()
			return err
		}},
		"perm": {aPerm, func(p *textParser, a *Attrs) error {
			xs, err := p.ints(strconv.IntSize)
			for _, x := range xs {
				a.Perm = append(a.Perm, int(x))
			}
			return err
		}},
		"starts":  {aSlice, func(p *textParser, a *Attrs) (err error) { a.Starts, err = p.ints(64); return err }},
		"ends":    {aSlice, func(p *textParser, a *Attrs) (err error) { a.Ends, err = p.ints(64); return err }},
		"steps":   {aSlice, func(p *textParser, a *Attrs) (err error) { a.Steps, err = p.ints(64); return err }},
		"before":  {aPad, func(p *textParser, a *Attrs) (err error) { a.Before, err = p.ints(64); return err }},
		"after":   {aPad, func(p *textParser, a *Attrs) (err error) { a.After, err = p.ints(64); return err }},
		"value":   {aPad, func(p *textParser, a *Attrs) (err error) { a.Value, err = p.float(); return err }},
		"dtype":   {aDType | aQuant, func(p *textParser, a *Attrs) (err error) { a.DType, err = p.dtype(); return err }},
		"eps":     {aEps, func(p *textParser, a *Attrs) (err error) { a.Eps, err = p.float(); return err }},
		"scale":   {aAttn | aPaged, func(p *textParser, a *Attrs) (err error) { a.Scale, err = p.float(); return err }},
		"causal":  {aAttn, nil}, // a flag: no value
		"offset":  {aAttn | aOffset, func(p *textParser, a *Attrs) (err error) { a.Offset, err = p.int(64); return err }},
		"block":   {aPaged, func(p *textParser, a *Attrs) (err error) { a.Block, err = p.int(64); return err }},
		"window":  {aPaged, func(p *textParser, a *Attrs) (err error) { a.Window, err = p.int(64); return err }},
		"k":       {aRoute | aMoE | aTopK, func(p *textParser, a *Attrs) (err error) { a.TopK, err = p.int(64); return err }},
		"gating":  {aRoute | aMoE, func(p *textParser, a *Attrs) (err error) { a.Gating, err = p.gating(); return err }},
		"limit":   {aMoE, func(p *textParser, a *Attrs) (err error) { a.Limit, err = p.float(); return err }},
		"format":  {aQuant, func(p *textParser, a *Attrs) (err error) { a.Format, err = p.format(); return err }},
		"group":   {aQuant, func(p *textParser, a *Attrs) (err error) { a.Group, err = p.int(64); return err }},
		"group_n": {aQuant, func(p *textParser, a *Attrs) (err error) { a.GroupN, err = p.int(64); return err }},
	}
}

// optionalTextAttr is true for the attributes that may be left out: the
// causal flag, the query offset that only a causal attention uses, and a
// matmul's accumulator dtype.
func optionalTextAttr(op Op, key string) bool {
	return op == OpAttention && (key == "causal" || key == "offset") || op == OpMatMul && key == "dtype" ||
		op == OpPagedAttention && key == "window" || (op == OpExperts || op == OpExpertsUp) && key == "limit" ||
		op == OpDequant && key == "group_n"
}

// textAttrOrder is the order in which missing attributes are reported, the
// order printing uses.
var textAttrOrder = []string{"axis", "to", "perm", "starts", "ends", "steps", "before", "after", "value", "dtype", "eps", "scale", "causal", "offset", "block", "window", "k", "gating", "limit", "format", "group", "group_n"}

func (p *textParser) nodeStatement() error {
	def := p.next()
	if d, ok := p.values[def.text]; ok {
		return textErrorf(def.textPos, "%%%s is already defined at %d:%d", def.text, d.line, d.col)
	}
	if err := p.expectPunct("=", "after the value"); err != nil {
		return err
	}
	opTok := p.next()
	if opTok.kind != tWord {
		return textErrorf(opTok.textPos, "want an op, got %s", opTok.describe())
	}
	op, err := ParseOp(opTok.text)
	if err != nil {
		return textErrorf(opTok.textPos, "%v", err)
	}
	info := ops[op]
	var a Attrs
	if info.attrs&aName != 0 {
		t := p.next()
		if t.kind != tString {
			return textErrorf(t.textPos, "%s wants a quoted name, got %s", op, t.describe())
		}
		a.Name = t.text
		if err := p.leafNameUnique(op, t); err != nil {
			return err
		}
	}
	if info.class == ClassLeaf {
		if a.DType, a.To, err = p.valueType(); err != nil {
			return err
		}
	}
	if info.attrs&aData != 0 {
		if a.DType.IsInt() {
			a.Ints, err = p.intData(a.DType)
		} else {
			a.Data, err = p.data()
		}
		if err != nil {
			return err
		}
	}

	var inputs []Value
	var types []ValueType
	for p.peek().kind == tValue {
		v, _, err := p.value()
		if err != nil {
			return err
		}
		n := p.g.Nodes[v]
		inputs = append(inputs, v)
		types = append(types, ValueType{n.Shape, n.DType})
		if !p.isPunct(",") {
			break
		}
		p.next()
		if t := p.peek(); t.kind != tValue {
			return textErrorf(t.textPos, "want a %%value after \",\", got %s", t.describe())
		}
	}
	switch ar := op.Arity(); {
	case ar < 0 && len(inputs) == 0:
		return textErrorf(opTok.textPos, "%s takes at least 1 operand, got none", op)
	case ar >= 0 && op.MaxArity() > ar && (len(inputs) < ar || len(inputs) > op.MaxArity()):
		return textErrorf(opTok.textPos, "%s takes %d or %d operands, got %d", op, ar, op.MaxArity(), len(inputs))
	case ar >= 0 && op.MaxArity() == ar && len(inputs) != ar:
		return textErrorf(opTok.textPos, "%s takes %d operands, got %d", op, ar, len(inputs))
	}

	seen := map[string]bool{}
	for p.peek().kind == tWord {
		k := p.next()
		key, ok := textAttrKeys[k.text]
		if !ok || info.attrs&key.bit == 0 {
			return textErrorf(k.textPos, "%s has no attribute %s", op, k.text)
		}
		if seen[k.text] {
			return textErrorf(k.textPos, "attribute %s given twice", k.text)
		}
		seen[k.text] = true
		if key.read == nil {
			a.Causal = true
			continue
		}
		if err := p.expectPunct("=", "after "+k.text); err != nil {
			return err
		}
		if err := key.read(p, &a); err != nil {
			return err
		}
	}
	for _, k := range textAttrOrder {
		if info.attrs&textAttrKeys[k].bit != 0 && !seen[k] && !optionalTextAttr(op, k) {
			return textErrorf(opTok.textPos, "%s needs attribute %s", op, k)
		}
	}

	shape, dt, err := Infer(op, a, types)
	if err != nil {
		return textErrorf(opTok.textPos, "%v", err)
	}
	if p.isPunct(":") {
		p.next()
		at := p.peek().textPos
		wantDT, wantShape, err := p.valueType()
		if err != nil {
			return err
		}
		if wantDT != dt || !wantShape.Equal(shape) {
			return textErrorf(at, "%s result is %s%v, but it is annotated %s%v", op, dt, shape, wantDT, wantShape)
		}
	}
	if err := p.expectEOL(op.String()); err != nil {
		return err
	}
	p.values[def.text] = textValueDef{Value(len(p.g.Nodes)), def.textPos}
	p.g.Nodes = append(p.g.Nodes, &Node{Op: op, Inputs: inputs, Attrs: a, Shape: shape, DType: dt})
	return nil
}

// leafNameUnique reports a second input, weight or state of the same name
// here, with a position, rather than leaving it to Check.
func (p *textParser) leafNameUnique(op Op, t textToken) error {
	k := leafKey{op, t.text}
	if p.leaves[k] {
		return textErrorf(t.textPos, "two %ss named %s", op, strconv.Quote(t.text))
	}
	p.leaves[k] = true
	return nil
}

// leafKey is a leaf's kind and name; names are unique per kind.
type leafKey struct {
	op   Op
	name string
}

// valueType reads a dtype and a shape: f32[2,3].
func (p *textParser) valueType() (DType, Shape, error) {
	dt, err := p.dtype()
	if err != nil {
		return InvalidDType, nil, err
	}
	s, err := p.shape()
	return dt, s, err
}

func (p *textParser) dtype() (DType, error) {
	t := p.next()
	if t.kind != tWord {
		return InvalidDType, textErrorf(t.textPos, "want a dtype, got %s", t.describe())
	}
	dt, err := ParseDType(t.text)
	if err != nil {
		return InvalidDType, textErrorf(t.textPos, "%v", err)
	}
	return dt, nil
}

func (p *textParser) shape() (Shape, error) {
	if !p.isPunct("[") {
		t := p.peek()
		return nil, textErrorf(t.textPos, "malformed shape: want [dims], got %s", t.describe())
	}
	xs, err := p.ints(64)
	if err != nil {
		return nil, err
	}
	var s Shape
	for _, x := range xs {
		s = append(s, Dim(x))
	}
	return s, nil
}

// ints reads [a,b,...] of integers that fit in bits. An empty list is nil,
// as the Builder's clones make it.
func (p *textParser) ints(bits int) ([]int64, error) {
	if err := p.expectPunct("[", "to open a list"); err != nil {
		return nil, err
	}
	var xs []int64
	if p.isPunct("]") {
		p.next()
		return nil, nil
	}
	for {
		x, err := p.int(bits)
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
		t := p.next()
		if t.kind == tPunct && t.text == "]" {
			return xs, nil
		}
		if t.kind != tPunct || t.text != "," {
			return nil, textErrorf(t.textPos, "malformed list: want \",\" or \"]\", got %s", t.describe())
		}
	}
}

func (p *textParser) int(bits int) (int64, error) {
	t := p.next()
	if t.kind != tWord {
		return 0, textErrorf(t.textPos, "want an integer, got %s", t.describe())
	}
	x, err := strconv.ParseInt(t.text, 10, bits)
	if err != nil {
		return 0, textErrorf(t.textPos, "bad integer %s", t.text)
	}
	return x, nil
}

func (p *textParser) float() (float64, error) {
	t := p.next()
	if t.kind != tWord {
		return 0, textErrorf(t.textPos, "want a number, got %s", t.describe())
	}
	// ParseFloat reads inf, -inf and nan in any case, and reports a
	// literal too large for float64 as an error rather than silently
	// turning it into infinity, which is what we want.
	x, err := strconv.ParseFloat(t.text, 64)
	if err != nil {
		return 0, textErrorf(t.textPos, "bad number %s", t.text)
	}
	return x, nil
}

// intData reads an integer constant's values, {v1, v2, ...}, exactly: each
// a decimal int64, or a number in float syntax that is an integer below
// 2^63 in magnitude (as older files print them). No values is nil.
func (p *textParser) intData(dt DType) ([]int64, error) {
	if err := p.expectPunct("{", "to open the constant's data"); err != nil {
		return nil, err
	}
	if p.isPunct("}") {
		p.next()
		return nil, nil
	}
	var xs []int64
	for {
		t := p.next()
		if t.kind != tWord {
			return nil, textErrorf(t.textPos, "want an integer, got %s", t.describe())
		}
		x, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(t.text, 64)
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) >= 0x1p63 {
				return nil, textErrorf(t.textPos, "const: constant value %s is not a %s", t.text, dt)
			}
			x = int64(f)
		}
		if dt.WrapInt(x) != x {
			return nil, textErrorf(t.textPos, "const: constant value %s is not a %s", t.text, dt)
		}
		xs = append(xs, x)
		t = p.next()
		if t.kind == tPunct && t.text == "}" {
			return xs, nil
		}
		if t.kind != tPunct || t.text != "," {
			return nil, textErrorf(t.textPos, "malformed data: want \",\" or \"}\", got %s", t.describe())
		}
	}
}

// data reads a constant's values: {v1, v2, ...}. No values is nil.
func (p *textParser) data() ([]float64, error) {
	if err := p.expectPunct("{", "to open the constant's data"); err != nil {
		return nil, err
	}
	if p.isPunct("}") {
		p.next()
		return nil, nil
	}
	var xs []float64
	for {
		x, err := p.float()
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
		t := p.next()
		if t.kind == tPunct && t.text == "}" {
			return xs, nil
		}
		if t.kind != tPunct || t.text != "," {
			return nil, textErrorf(t.textPos, "malformed data: want \",\" or \"}\", got %s", t.describe())
		}
	}
}
