package egraph

import (
	"fmt"
	"strings"
)

// PatternTerm is the syntax tree of a pattern, for languages that build
// patterns in Go rather than parse them. A term with a non-empty Var is a
// variable ("?x") and has no operator or children. A term with a non-empty
// PayloadVar matches its operator with any payload and binds the payload to
// that variable ("op[?p]" in the text form); the same payload variable
// twice means the same payload, and a right side copies it.
type PatternTerm struct {
	Var        string
	Op         Symbol
	Payload    Payload
	PayloadVar string
	Children   []PatternTerm
}

// Pattern is a term with variables, compiled once into a matching program.
// The same variable twice means the same class.
type Pattern struct {
	src   string
	nodes []patNode // postorder: children before parents, root last
	vars  []string  // in order of first occurrence
	pvars []string  // payload variables, in order of first occurrence
	prog  program
}

type patNode struct {
	v       int // variable index, or -1 for an operator node
	op      Symbol
	payload Payload
	pv      int   // payload variable index, or -1 for the exact payload
	kids    []int // indexes into nodes
}

// AtomFunc turns an atom of the s-expression syntax (an operator name or a
// leaf) into an operator and payload. It lets a language give literals a
// payload: "2.5" as a constant node whose payload holds the value.
type AtomFunc func(atom string) (Symbol, Payload, error)

// DefaultAtom interns the atom as an operator with no payload.
func DefaultAtom(atom string) (Symbol, Payload, error) { return Intern(atom), 0, nil }

// ParsePattern parses an s-expression pattern with the default atom syntax:
// "(+ ?a (* ?b 2))". Variables start with '?'; ';' starts a comment.
func ParsePattern(src string) (*Pattern, error) { return ParsePatternWith(src, DefaultAtom) }

// MustParsePattern is ParsePattern for patterns written in the program
// itself, where an error is a bug.
func MustParsePattern(src string) *Pattern {
	p, err := ParsePattern(src)
	if err != nil {
		panic(err)
	}
	return p
}

// ParsePatternWith parses a pattern, turning atoms into operators with atom.
// Errors give the line and column of the problem.
func ParsePatternWith(src string, atom AtomFunc) (*Pattern, error) {
	ps := &sexpParser{src: src, atom: atom}
	t, err := ps.term()
	if err != nil {
		return nil, err
	}
	ps.skipSpace()
	if ps.pos < len(ps.src) {
		return nil, ps.errorf("unexpected %q after the pattern", ps.src[ps.pos])
	}
	p, err := NewPattern(t)
	if err != nil {
		return nil, err
	}
	p.src = strings.Trim(src, spaceBytes)
	return p, nil
}

// NewPattern compiles a pattern from its syntax tree.
func NewPattern(t PatternTerm) (*Pattern, error) {
	p := &Pattern{}
	vars := map[string]int{}
	pvars := map[string]int{}
	var walk func(t PatternTerm, depth int) (int, error)
	walk = func(t PatternTerm, depth int) (int, error) {
		if depth > 10000 {
			return 0, fmt.Errorf("pattern is nested more than 10000 deep")
		}
		if t.Var != "" {
			if !strings.HasPrefix(t.Var, "?") || len(t.Var) == 1 {
				return 0, fmt.Errorf("bad variable name %q: want ?name", t.Var)
			}
			if len(t.Children) > 0 || t.Op != 0 || t.PayloadVar != "" {
				return 0, fmt.Errorf("variable %s has an operator, payload or children", t.Var)
			}
			i, ok := vars[t.Var]
			if !ok {
				i = len(p.vars)
				vars[t.Var] = i
				p.vars = append(p.vars, t.Var)
			}
			p.nodes = append(p.nodes, patNode{v: i, pv: -1})
			return len(p.nodes) - 1, nil
		}
		pv := -1
		if t.PayloadVar != "" {
			if !strings.HasPrefix(t.PayloadVar, "?") || len(t.PayloadVar) == 1 {
				return 0, fmt.Errorf("bad payload variable name %q: want ?name", t.PayloadVar)
			}
			if _, clash := vars[t.PayloadVar]; clash {
				return 0, fmt.Errorf("%s is both a class variable and a payload variable", t.PayloadVar)
			}
			i, ok := pvars[t.PayloadVar]
			if !ok {
				i = len(p.pvars)
				pvars[t.PayloadVar] = i
				p.pvars = append(p.pvars, t.PayloadVar)
			}
			pv = i
		}
		if len(t.Children) > maxArity {
			return 0, fmt.Errorf("operator %s has %d children; at most %d are supported", t.Op, len(t.Children), maxArity)
		}
		kids := make([]int, len(t.Children))
		for i, c := range t.Children {
			k, err := walk(c, depth+1)
			if err != nil {
				return 0, err
			}
			kids[i] = k
		}
		p.nodes = append(p.nodes, patNode{v: -1, op: t.Op, payload: t.Payload, pv: pv, kids: kids})
		return len(p.nodes) - 1, nil
	}
	if _, err := walk(t, 0); err != nil {
		return nil, err
	}
	for _, v := range p.vars {
		if _, clash := pvars[v]; clash {
			return nil, fmt.Errorf("%s is both a class variable and a payload variable", v)
		}
	}
	p.prog = compile([]*Pattern{p}, p.vars, p.pvars)
	p.src = p.termString(len(p.nodes) - 1)
	return p, nil
}

// Vars returns the pattern's variables in order of first occurrence.
func (p *Pattern) Vars() []string { return p.vars }

// PayloadVars returns the pattern's payload variables in order of first
// occurrence.
func (p *Pattern) PayloadVars() []string { return p.pvars }

// String returns the pattern's source text.
func (p *Pattern) String() string { return p.src }

// root is the index of the root node.
func (p *Pattern) root() int { return len(p.nodes) - 1 }

func (p *Pattern) termString(i int) string {
	n := p.nodes[i]
	if n.v >= 0 {
		return p.vars[n.v]
	}
	head := n.op.String()
	switch {
	case n.pv >= 0:
		head = fmt.Sprintf("%s[%s]", head, p.pvars[n.pv])
	case n.payload != 0:
		head = fmt.Sprintf("%s[%d]", head, uint64(n.payload))
	}
	if len(n.kids) == 0 {
		return head
	}
	parts := []string{head}
	for _, k := range n.kids {
		parts = append(parts, p.termString(k))
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// sexpParser reads one s-expression term and remembers where it is, so that
// errors can name a line and column.
type sexpParser struct {
	src   string
	pos   int
	atom  AtomFunc
	depth int
}

func (ps *sexpParser) errorf(format string, args ...any) error {
	line, col := 1, 1
	for _, r := range ps.src[:min(ps.pos, len(ps.src))] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("pattern %d:%d: %s", line, col, fmt.Sprintf(format, args...))
}

// spaceBytes are the bytes that separate atoms. Only ASCII: an atom may
// hold any other byte, so that printing and re-parsing agree.
const spaceBytes = " \t\n\r\v\f"

func isSpace(c byte) bool { return strings.IndexByte(spaceBytes, c) >= 0 }

func (ps *sexpParser) skipSpace() {
	for ps.pos < len(ps.src) {
		switch c := ps.src[ps.pos]; {
		case isSpace(c):
			ps.pos++
		case c == ';':
			for ps.pos < len(ps.src) && ps.src[ps.pos] != '\n' {
				ps.pos++
			}
		default:
			return
		}
	}
}

func (ps *sexpParser) word() string {
	start := ps.pos
	for ps.pos < len(ps.src) {
		c := ps.src[ps.pos]
		if c == '(' || c == ')' || c == ';' || isSpace(c) {
			break
		}
		ps.pos++
	}
	return ps.src[start:ps.pos]
}

func (ps *sexpParser) term() (PatternTerm, error) {
	ps.skipSpace()
	if ps.pos >= len(ps.src) {
		return PatternTerm{}, ps.errorf("unexpected end of pattern")
	}
	switch ps.src[ps.pos] {
	case ')':
		return PatternTerm{}, ps.errorf("unexpected ')'")
	case '(':
		ps.depth++
		if ps.depth > 1000 {
			return PatternTerm{}, ps.errorf("pattern nested more than 1000 deep")
		}
		open := ps.pos
		ps.pos++
		ps.skipSpace()
		at := ps.pos
		head := ps.word()
		if head == "" {
			if ps.pos >= len(ps.src) {
				ps.pos = open
				return PatternTerm{}, ps.errorf("unclosed '('")
			}
			return PatternTerm{}, ps.errorf("want an operator after '('")
		}
		if strings.HasPrefix(head, "?") {
			ps.pos = at
			return PatternTerm{}, ps.errorf("operator position holds variable %s", head)
		}
		t, err := ps.leaf(head, at)
		if err != nil {
			return PatternTerm{}, err
		}
		for {
			ps.skipSpace()
			if ps.pos >= len(ps.src) {
				ps.pos = open
				return PatternTerm{}, ps.errorf("unclosed '('")
			}
			if ps.src[ps.pos] == ')' {
				ps.pos++
				ps.depth--
				return t, nil
			}
			c, err := ps.term()
			if err != nil {
				return PatternTerm{}, err
			}
			t.Children = append(t.Children, c)
		}
	default:
		at := ps.pos
		w := ps.word()
		if strings.HasPrefix(w, "?") {
			if len(w) == 1 {
				ps.pos = at
				return PatternTerm{}, ps.errorf("variable without a name")
			}
			return PatternTerm{Var: w}, nil
		}
		return ps.leaf(w, at)
	}
}

func (ps *sexpParser) leaf(w string, at int) (PatternTerm, error) {
	// name[?p]: the operator with any payload, bound to ?p.
	var pvar string
	if i := strings.Index(w, "[?"); i > 0 && strings.HasSuffix(w, "]") {
		w, pvar = w[:i], w[i+1:len(w)-1]
	}
	op, payload, err := ps.atom(w)
	if err != nil {
		ps.pos = at
		return PatternTerm{}, ps.errorf("%s: %v", w, err)
	}
	if pvar != "" {
		return PatternTerm{Op: op, PayloadVar: pvar}, nil
	}
	return PatternTerm{Op: op, Payload: payload}, nil
}

// Term returns the pattern's syntax tree, for tools that interpret patterns
// themselves (the rule verifier builds both sides of a rule as programs).
func (p *Pattern) Term() PatternTerm { return p.term(p.root()) }

func (p *Pattern) term(i int) PatternTerm {
	n := p.nodes[i]
	if n.v >= 0 {
		return PatternTerm{Var: p.vars[n.v]}
	}
	t := PatternTerm{Op: n.op, Payload: n.payload}
	if n.pv >= 0 {
		t.Payload, t.PayloadVar = 0, p.pvars[n.pv]
	}
	for _, k := range n.kids {
		t.Children = append(t.Children, p.term(k))
	}
	return t
}
