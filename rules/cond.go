package rules

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/ir"
)

// Cond is a rule's side condition: comparisons that must all hold. Its
// syntax:
//
//	COND := CMP ("and" CMP)*
//	CMP  := EXPR OP EXPR | weightonly(VAR) | not weightonly(VAR)
//	OP   := == | != | < | <= | > | >=
//	EXPR := TERM ["%" TERM]
//	TERM := NUMBER | DTYPE | FUNC "(" VAR ")" | shape "(" VAR ")" "[" INT "]"
//
// NUMBER is an integer or a decimal (-2, 16, 0.5, 1e-5); DTYPE is f32,
// f16, bf16, i32, i64 or bool. The functions are shape (the class's shape),
// rank, size (its number of elements), dtype, const (its known scalar
// value), weightonly (whether it depends only on weights: true or false by
// itself, never compared) and axis (the axis attribute of a payload
// variable, "sum[?p]"); all but axis take a class variable. shape(?x)[i] is
// one dimension, a negative i counting from the end. Integers and numbers
// compare with every OP; dtypes and whole shapes only with == and !=; '%'
// takes integers. Variables must be bound by the rule's left side.
type Cond struct {
	Pos  Pos    // the first comparison's
	Text string // as written, each run of white space one space
	Cmps []*Cmp
}

// Cmp is one comparison of a condition.
type Cmp struct {
	Pos         Pos // the left operand's, or "not"'s
	Op          CmpOp
	Left, Right *Expr // Right is nil for CmpTrue and CmpNot
}

// CmpOp is a comparison operator.
type CmpOp int

// The comparison operators. CmpTrue and CmpNot test a boolean Left.
const (
	CmpEq CmpOp = iota + 1
	CmpNe
	CmpLt
	CmpLe
	CmpGt
	CmpGe
	CmpTrue
	CmpNot
)

var cmpOps = map[string]CmpOp{"==": CmpEq, "!=": CmpNe, "<": CmpLt, "<=": CmpLe, ">": CmpGt, ">=": CmpGe}

// Expr is an operand of a comparison.
type Expr struct {
	Kind  ExprKind
	Pos   Pos
	Int   int64   // ExprInt's value
	Float float64 // ExprFloat's value
	DType string  // ExprDType's dtype name
	Var   string  // the function's variable
	Index int64   // ExprDim's index into the shape
	X, Y  *Expr   // ExprMod's operands: X % Y
}

// ExprKind says what an Expr is.
type ExprKind int

// The kinds of Expr.
const (
	ExprInt        ExprKind = iota + 1 // an integer literal
	ExprFloat                          // a decimal literal
	ExprDType                          // a dtype name
	ExprShape                          // shape(Var)
	ExprDim                            // shape(Var)[Index]
	ExprRank                           // rank(Var)
	ExprSize                           // size(Var): the number of elements
	ExprDTypeOf                        // dtype(Var)
	ExprConst                          // const(Var)
	ExprAxis                           // axis(Var), Var a payload variable
	ExprWeightOnly                     // weightonly(Var)
	ExprMod                            // X % Y
)

// funcs maps the condition functions to their kinds.
var funcs = map[string]ExprKind{
	"shape": ExprShape, "rank": ExprRank, "size": ExprSize, "dtype": ExprDTypeOf,
	"const": ExprConst, "axis": ExprAxis, "weightonly": ExprWeightOnly,
}

// ExprType is the type of an Expr's value.
type ExprType int

// The types of Expr values. Integers and numbers compare with each other.
const (
	TypeInt ExprType = iota + 1
	TypeFloat
	TypeDType
	TypeShape
	TypeBool
)

// Type returns the type of e's value.
func (e *Expr) Type() ExprType {
	switch e.Kind {
	case ExprInt, ExprDim, ExprRank, ExprSize, ExprAxis, ExprMod:
		return TypeInt
	case ExprFloat, ExprConst:
		return TypeFloat
	case ExprDType, ExprDTypeOf:
		return TypeDType
	case ExprShape:
		return TypeShape
	case ExprWeightOnly:
		return TypeBool
	}
	return 0
}

func (t ExprType) String() string {
	switch t {
	case TypeInt:
		return "an integer"
	case TypeFloat:
		return "a number"
	case TypeDType:
		return "a dtype"
	case TypeShape:
		return "a shape"
	case TypeBool:
		return "a boolean"
	}
	return fmt.Sprintf("type(%d)", int(t))
}

// String prints e in the condition syntax.
func (e *Expr) String() string {
	switch e.Kind {
	case ExprInt:
		return strconv.FormatInt(e.Int, 10)
	case ExprFloat:
		return strconv.FormatFloat(e.Float, 'g', -1, 64)
	case ExprDType:
		return e.DType
	case ExprDim:
		return fmt.Sprintf("shape(%s)[%d]", e.Var, e.Index)
	case ExprMod:
		return e.X.String() + " % " + e.Y.String()
	}
	for name, k := range funcs {
		if k == e.Kind {
			return name + "(" + e.Var + ")"
		}
	}
	return fmt.Sprintf("expr(%d)", int(e.Kind))
}

// String prints c in the condition syntax.
func (c *Cmp) String() string {
	switch c.Op {
	case CmpTrue:
		return c.Left.String()
	case CmpNot:
		return "not " + c.Left.String()
	}
	for s, op := range cmpOps {
		if op == c.Op {
			return c.Left.String() + " " + s + " " + c.Right.String()
		}
	}
	return fmt.Sprintf("%s cmp(%d) %s", c.Left, int(c.Op), c.Right)
}

// String prints c in the condition syntax.
func (c *Cond) String() string {
	s := make([]string, len(c.Cmps))
	for i, cmp := range c.Cmps {
		s[i] = cmp.String()
	}
	return strings.Join(s, " and ")
}

// Facts are what a condition can ask about the classes and payloads of a
// match, by variable name. The bool results say whether the fact is known.
type Facts interface {
	Shape(v string) ([]int64, bool) // a class variable's shape
	DType(v string) (string, bool)  // its dtype name: f32, f16, ...
	Const(v string) (float64, bool) // its value when it is a known scalar constant
	WeightOnly(v string) bool       // whether it depends only on weights
	Axis(pv string) (int64, bool)   // a payload variable's axis attribute
}

// Eval reports whether the condition holds. A fact that is unknown, a
// shape index out of range and '%' by zero make it false, not an error;
// an error means a malformed Cond, which the parser never builds. A nil
// Cond holds.
func (c *Cond) Eval(f Facts) (bool, error) {
	if c == nil {
		return true, nil
	}
	for _, cmp := range c.Cmps {
		if ok, err := cmp.Eval(f); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// Eval reports whether the comparison holds, as Cond.Eval does.
func (c *Cmp) Eval(f Facts) (bool, error) {
	l, known, err := c.Left.eval(f)
	if err != nil || !known {
		return false, err
	}
	switch c.Op {
	case CmpTrue, CmpNot:
		if l.typ != TypeBool {
			return false, fmt.Errorf("%s: %s is not a boolean", c, c.Left)
		}
		return l.b == (c.Op == CmpTrue), nil
	}
	if c.Right == nil {
		return false, fmt.Errorf("comparison without a right operand: %s", c.Left)
	}
	r, known, err := c.Right.eval(f)
	if err != nil || !known {
		return false, err
	}
	var order int // -1, 0, 1; 2 for unordered (NaN)
	switch {
	case l.typ == TypeInt && r.typ == TypeInt:
		order = compareInt(l.i, r.i)
	case isNumeric(l.typ) && isNumeric(r.typ):
		order = compareFloat(l.float(), r.float())
	case l.typ == r.typ && (l.typ == TypeDType || l.typ == TypeShape) && (c.Op == CmpEq || c.Op == CmpNe):
		order = 1
		if l.s == r.s && slices.Equal(l.shape, r.shape) {
			order = 0
		}
	default:
		return false, fmt.Errorf("%s: cannot compare %s with %s", c, l.typ, r.typ)
	}
	switch c.Op {
	case CmpEq:
		return order == 0, nil
	case CmpNe:
		return order != 0, nil
	case CmpLt:
		return order == -1, nil
	case CmpLe:
		return order == -1 || order == 0, nil
	case CmpGt:
		return order == 1, nil
	case CmpGe:
		return order == 1 || order == 0, nil
	}
	return false, fmt.Errorf("unknown comparison operator %d", int(c.Op))
}

func isNumeric(t ExprType) bool { return t == TypeInt || t == TypeFloat }

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	}
	return 2
}

// value is an evaluated Expr.
type value struct {
	typ   ExprType
	i     int64
	f     float64
	s     string // a dtype
	shape []int64
	b     bool
}

func (v value) float() float64 {
	if v.typ == TypeInt {
		return float64(v.i)
	}
	return v.f
}

// eval evaluates e; known is false where a fact is missing.
func (e *Expr) eval(f Facts) (v value, known bool, err error) {
	v.typ = e.Type()
	switch e.Kind {
	case ExprInt:
		v.i = e.Int
		return v, true, nil
	case ExprFloat:
		v.f = e.Float
		return v, true, nil
	case ExprDType:
		v.s = e.DType
		return v, true, nil
	case ExprShape, ExprDim, ExprRank, ExprSize:
		s, ok := f.Shape(e.Var)
		if !ok {
			return v, false, nil
		}
		switch e.Kind {
		case ExprShape:
			v.shape = s
		case ExprRank:
			v.i = int64(len(s))
		case ExprDim:
			i := e.Index
			if i < 0 {
				i += int64(len(s))
			}
			if i < 0 || i >= int64(len(s)) {
				return v, false, nil
			}
			v.i = s[i]
		case ExprSize:
			v.i = 1
			for _, d := range s {
				if d < 0 || d > 0 && v.i > math.MaxInt64/d {
					return v, false, nil
				}
				v.i *= d
			}
		}
		return v, true, nil
	case ExprDTypeOf:
		v.s, known = f.DType(e.Var)
		return v, known, nil
	case ExprConst:
		v.f, known = f.Const(e.Var)
		return v, known, nil
	case ExprAxis:
		v.i, known = f.Axis(e.Var)
		return v, known, nil
	case ExprWeightOnly:
		v.b = f.WeightOnly(e.Var)
		return v, true, nil
	case ExprMod:
		if e.X == nil || e.Y == nil {
			return v, false, fmt.Errorf("%% without two operands")
		}
		x, kx, err := e.X.eval(f)
		if err != nil || !kx {
			return v, false, err
		}
		y, ky, err := e.Y.eval(f)
		if err != nil || !ky {
			return v, false, err
		}
		if x.typ != TypeInt || y.typ != TypeInt {
			return v, false, fmt.Errorf("%s: %% takes integers", e)
		}
		if y.i == 0 {
			return v, false, nil
		}
		v.i = x.i % y.i
		return v, true, nil
	}
	return v, false, fmt.Errorf("unknown expression kind %d", int(e.Kind))
}

// cond parses the condition that starts at offset from of the rule's text
// and runs to its end. class and payload are the variables the left side
// binds.
func (rt *ruleText) cond(from int, class, payload map[string]bool) (*Cond, *PosError) {
	p := &condParser{rt: rt, off: from, class: class, payload: payload}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return nil, rt.errorf(from-len("if"), "empty condition after 'if'")
	}
	c := &Cond{Pos: rt.pos(p.tok.off), Text: strings.Join(strings.Fields(rt.text[from:]), " ")}
	for {
		cmp, err := p.cmp()
		if err != nil {
			return nil, err
		}
		c.Cmps = append(c.Cmps, cmp)
		switch {
		case p.tok.kind == tokEOF:
			return c, nil
		case p.tok.is("and"):
			if err := p.next(); err != nil {
				return nil, err
			}
		case p.tok.is("or"):
			return nil, p.errorf("'or' is not supported: write two rules")
		default:
			return nil, p.errorf("want 'and' or the end of the condition, got %s", p.tok)
		}
	}
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokVar
	tokNum
	tokOp    // a comparison operator or '%'
	tokPunct // ( ) [ ]
)

type token struct {
	kind tokKind
	text string
	off  int
}

func (t token) is(word string) bool { return t.kind == tokIdent && t.text == word }

func (t token) String() string {
	if t.kind == tokEOF {
		return "the end of the condition"
	}
	return "'" + t.text + "'"
}

// condParser reads a condition one token ahead.
type condParser struct {
	rt             *ruleText
	off            int // where the next token starts looking
	tok            token
	class, payload map[string]bool
}

var numberRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?`)

func isIdentChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// next reads the next token into p.tok.
func (p *condParser) next() *PosError {
	t := p.rt.text
	i := skipSpace(t, p.off)
	p.tok = token{off: i}
	if i >= len(t) {
		p.off = i
		return nil
	}
	j := i + 1
	switch c := t[i]; {
	case c == '?':
		for j < len(t) && !isSpace(t[j]) && strings.IndexByte("()[],=!<>%", t[j]) < 0 {
			j++
		}
		if j == i+1 {
			return p.rt.errorf(i, "variable without a name")
		}
		p.tok.kind = tokVar
	case c == '-' || '0' <= c && c <= '9':
		m := numberRE.FindString(t[i:])
		j = i + len(m)
		if m == "" || j < len(t) && (isIdentChar(t[j]) || t[j] == '.') {
			for j < len(t) && (isIdentChar(t[j]) || strings.IndexByte(".-+", t[j]) >= 0) {
				j++
			}
			return p.rt.errorf(i, "bad number %q", t[i:j])
		}
		p.tok.kind = tokNum
	case isIdentChar(c):
		for j < len(t) && isIdentChar(t[j]) {
			j++
		}
		p.tok.kind = tokIdent
	case strings.IndexByte("()[]", c) >= 0:
		p.tok.kind = tokPunct
	case c == '%':
		p.tok.kind = tokOp
	case strings.IndexByte("=!<>", c) >= 0:
		if j < len(t) && t[j] == '=' {
			j++
		}
		if _, ok := cmpOps[t[i:j]]; !ok {
			return p.rt.errorf(i, "unknown operator %s (want ==, !=, <, <=, > or >=)", t[i:j])
		}
		p.tok.kind = tokOp
	default:
		r := []rune(t[i:min(len(t), i+4)])[0]
		return p.rt.errorf(i, "unexpected %q in condition", r)
	}
	p.tok.text = t[i:j]
	p.off = j
	return nil
}

func (p *condParser) errorf(format string, args ...any) *PosError {
	return p.rt.errorf(p.tok.off, format, args...)
}

// cmp reads one comparison.
func (p *condParser) cmp() (*Cmp, *PosError) {
	at := p.tok.off
	if p.tok.is("not") {
		if err := p.next(); err != nil {
			return nil, err
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		if e.Kind != ExprWeightOnly {
			return nil, p.rt.errorf(at, "'not' applies only to weightonly(...); for %s, use != or the opposite comparison", e)
		}
		return &Cmp{Pos: p.rt.pos(at), Op: CmpNot, Left: e}, nil
	}
	l, err := p.expr()
	if err != nil {
		return nil, err
	}
	op, isCmp := cmpOps[p.tok.text]
	if !isCmp || p.tok.kind != tokOp {
		if l.Type() == TypeBool {
			return &Cmp{Pos: p.rt.pos(at), Op: CmpTrue, Left: l}, nil
		}
		return nil, p.errorf("want a comparison (==, !=, <, <=, > or >=) after %s, got %s", l, p.tok)
	}
	opAt := p.tok.off
	if err := p.next(); err != nil {
		return nil, err
	}
	r, err := p.expr()
	if err != nil {
		return nil, err
	}
	lt, rtyp := l.Type(), r.Type()
	switch {
	case lt == TypeBool || rtyp == TypeBool:
		b := l
		if rtyp == TypeBool {
			b = r
		}
		return nil, p.rt.errorf(opAt, "%s is a condition by itself and cannot be compared: write %s or not %s", b, b, b)
	case isNumeric(lt) && isNumeric(rtyp):
	case lt == rtyp:
		if op != CmpEq && op != CmpNe {
			return nil, p.rt.errorf(opAt, "%ss compare only with == and !=", strings.TrimPrefix(lt.String(), "a "))
		}
	default:
		return nil, p.rt.errorf(opAt, "cannot compare %s (%s) with %s (%s)", l, lt, r, rtyp)
	}
	return &Cmp{Pos: p.rt.pos(at), Op: op, Left: l, Right: r}, nil
}

// expr reads TERM ["%" TERM].
func (p *condParser) expr() (*Expr, *PosError) {
	x, err := p.term()
	if err != nil {
		return nil, err
	}
	if p.tok.text != "%" {
		return x, nil
	}
	opAt := p.tok.off
	if err := p.next(); err != nil {
		return nil, err
	}
	y, err := p.term()
	if err != nil {
		return nil, err
	}
	for _, e := range []*Expr{x, y} {
		if e.Type() != TypeInt {
			return nil, p.rt.errorf(opAt, "%% takes integers, but %s is %s", e, e.Type())
		}
	}
	if y.Kind == ExprInt && y.Int == 0 {
		return nil, p.rt.errorf(opAt, "%% by zero")
	}
	return &Expr{Kind: ExprMod, Pos: x.Pos, X: x, Y: y}, nil
}

// term reads a number, a dtype name or a function call.
func (p *condParser) term() (*Expr, *PosError) {
	tok := p.tok
	e := &Expr{Pos: p.rt.pos(tok.off)}
	switch tok.kind {
	case tokNum:
		if strings.ContainsAny(tok.text, ".eE") {
			f, err := strconv.ParseFloat(tok.text, 64)
			if err != nil {
				return nil, p.errorf("number %s out of range", tok.text)
			}
			e.Kind, e.Float = ExprFloat, f
		} else {
			n, err := strconv.ParseInt(tok.text, 10, 64)
			if err != nil {
				return nil, p.errorf("integer %s out of range", tok.text)
			}
			e.Kind, e.Int = ExprInt, n
		}
		return e, p.next()
	case tokIdent:
	default:
		return nil, p.errorf("want a number, a dtype or a function such as shape(?x), got %s", tok)
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.text != "(" {
		if _, err := ir.ParseDType(tok.text); err != nil {
			if _, isFunc := funcs[tok.text]; isFunc {
				return nil, p.rt.errorf(tok.off, "%s needs a variable: %s(?x)", tok.text, tok.text)
			}
			return nil, p.rt.errorf(tok.off, "%v", err)
		}
		e.Kind, e.DType = ExprDType, tok.text
		return e, nil
	}
	kind, ok := funcs[tok.text]
	if !ok {
		return nil, p.rt.errorf(tok.off, "unknown function %s (want shape, rank, size, dtype, const, weightonly or axis)", tok.text)
	}
	e.Kind = kind
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokVar {
		return nil, p.errorf("%s takes one variable, as in %s(?x); got %s", tok.text, tok.text, p.tok)
	}
	e.Var = p.tok.text
	switch wantPayload := kind == ExprAxis; {
	case p.class[e.Var] && wantPayload:
		return nil, p.errorf("%s needs a payload variable (sum[?p]), but %s is a class variable", tok.text, e.Var)
	case p.payload[e.Var] && !wantPayload:
		return nil, p.errorf("%s needs a class variable, but %s is a payload variable", tok.text, e.Var)
	case !p.class[e.Var] && !p.payload[e.Var]:
		return nil, p.errorf("%s is not bound by the left side", e.Var)
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.text != ")" {
		return nil, p.errorf("want ')' after %s(%s, got %s", tok.text, e.Var, p.tok)
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.text != "[" {
		return e, nil
	}
	if kind != ExprShape {
		return nil, p.errorf("only shape(...) can be indexed")
	}
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.kind != tokNum || strings.ContainsAny(p.tok.text, ".eE") {
		return nil, p.errorf("want an integer index, got %s", p.tok)
	}
	i, err := strconv.ParseInt(p.tok.text, 10, 64)
	if err != nil {
		return nil, p.errorf("index %s out of range", p.tok.text)
	}
	e.Kind, e.Index = ExprDim, i
	if err := p.next(); err != nil {
		return nil, err
	}
	if p.tok.text != "]" {
		return nil, p.errorf("want ']' after the index, got %s", p.tok)
	}
	return e, p.next()
}
