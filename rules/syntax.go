package rules

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lumsearch/lumsearch/egraph"
)

// ParseRules parses a .rules file: researchers' rewrite rules, one a line.
//
//	# comments start with # or ; and run to the end of the line
//	rule comm-add: (add ?a ?b) => (add ?b ?a)
//	rule assoc-add: (add ?a (add ?b ?c)) <=> (add (add ?a ?b) ?c)
//	rule mul-one: (mul ?a ?one) => ?a
//	    if const(?one) == 1 and dtype(?a) == f32
//	rule sum-of-expand: (sum[?p] (expand[?q] ?x)) => @sum_of_expand
//	    if axis(?p) == axis(?q) ; a Go applier, registered by name
//	rule merge-matmuls: (matmul ?x ?w1), (matmul ?x ?w2) => @merge_matmuls
//	    if shape(?w1)[-2] == shape(?w2)[-2] and shape(?x)[-1] % 16 == 0
//
// A rule is "rule NAME: LHS ARROW RHS [if COND]" at the start of a line.
// A line that starts with a space or tab continues the rule above, so
// long patterns and conditions can wrap; a blank line ends a rule, and a
// line holding only a comment is skipped. Comments are removed before
// anything else is read, so '#' and ';' cannot appear inside a rule.
//
//   - NAME is letters, digits, '-', '_' and '.', unique in the file.
//   - LHS is one s-expression pattern (egraph.ParsePatternWith, atoms read
//     by atom) or several separated by ',': a multi-pattern, whose parts
//     must all match, a variable shared between parts meaning one class.
//   - ARROW is "=>" or "<=>". A two-way rule is the rule and its reverse:
//     both sides must be patterns, binding the same variables.
//   - RHS is as many patterns as the LHS has, each added to the class of
//     the LHS part in its place, or "@name": a Go applier registered
//     under that name, which takes no arguments ("@name()" is the same).
//     It may use only variables the LHS binds.
//   - COND is a side condition on e-class facts; see Cond for its syntax.
//
// Splitting at ',', the arrow and "if" happens outside parentheses and
// attribute brackets only. Lines and columns in errors start at 1 and
// count characters, a tab being one. ParseRules reports up to 10 errors,
// joined with errors.Join, each a *PosError; on any error it returns no
// rules. A nil atom means egraph.DefaultAtom.
func ParseRules(filename string, src []byte, atom egraph.AtomFunc) (*RuleFile, error) {
	if atom == nil {
		atom = egraph.DefaultAtom
	}
	texts, errs := splitRules(filename, src)
	rf := &RuleFile{Name: filename}
	first := map[string]Pos{}
	for _, rt := range texts {
		name, namePos, body, err := rt.header()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if at, dup := first[name]; dup {
			errs = append(errs, rt.errorf(namePos, "duplicate rule name %s (first defined at %s)", name, at))
		} else {
			first[name] = rt.pos(namePos)
		}
		r, err := rt.rule(body, atom)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.Name = name
		rf.Rules = append(rf.Rules, r)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *PosError) int {
			return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Col, b.Pos.Col))
		})
		errs = errs[:min(len(errs), maxErrors)]
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	return rf, nil
}

// maxErrors is how many errors ParseRules reports at most.
const maxErrors = 10

// Pos is a position in a rules file. Lines and columns start at 1; a column
// counts characters (runes), so a tab is one column.
type Pos struct {
	File      string
	Line, Col int
}

// String returns "file:line:col".
func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// PosError is an error at a position of a rules file.
type PosError struct {
	Pos Pos
	Msg string
}

// Error returns "file:line:col: message".
func (e *PosError) Error() string { return e.Pos.String() + ": " + e.Msg }

// RuleFile is a parsed rules file.
type RuleFile struct {
	Name  string // the file name given to ParseRules
	Rules []*RuleDecl
}

// RuleDecl is one rule of a rules file, checked but not yet compiled into
// an e-graph rewrite.
type RuleDecl struct {
	Name string
	Pos  Pos // where the rule's line starts
	// LHS is the left side: one pattern, or the parts of a multi-pattern.
	LHS []*egraph.Pattern
	// RHS holds one pattern per LHS part, or is nil when Applier is set.
	RHS []*egraph.Pattern
	// Applier is the name of the Go applier ("@name" without the '@'), or "".
	Applier string
	// TwoWay marks a "<=>" rule: it also rewrites RHS to LHS.
	TwoWay bool
	// Cond is the side condition, or nil.
	Cond *Cond
	// LHSText and RHSText are the sides as written, comments removed and
	// each run of white space turned into one space.
	LHSText, RHSText string
}

// ruleText is one rule's lines with comments removed, joined with '\n',
// and where each line came from. Columns within a line are the file's.
type ruleText struct {
	file   string
	text   string
	starts []int // the offset in text at which each line starts
	lines  []int // each line's number in the file
}

// splitRules cuts src into rules: a line that starts with a space or tab
// continues the rule above it, a blank line ends a rule and a line holding
// only a comment is skipped.
func splitRules(file string, src []byte) ([]*ruleText, []*PosError) {
	var texts []*ruleText
	var errs []*PosError
	var cur *ruleText
	var b strings.Builder
	flush := func() {
		if cur != nil {
			cur.text = b.String()
			texts = append(texts, cur)
			cur = nil
			b.Reset()
		}
	}
	for n, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSuffix(line, "\r")
		code := line
		if i := strings.IndexAny(code, "#;"); i >= 0 {
			code = code[:i]
		}
		switch {
		case strings.Trim(line, spaceChars) == "":
			flush()
			continue
		case strings.Trim(code, spaceChars) == "":
			continue
		case isSpace(code[0]):
			if cur == nil {
				col := len(code) - len(strings.TrimLeft(code, spaceChars)) + 1
				errs = append(errs, &PosError{Pos{file, n + 1, col},
					"continuation line without a rule (a line that starts with a space or tab continues the rule above it; a blank line ends a rule)"})
				continue
			}
			b.WriteByte('\n')
		default:
			flush()
			cur = &ruleText{file: file}
		}
		cur.starts = append(cur.starts, b.Len())
		cur.lines = append(cur.lines, n+1)
		b.WriteString(code)
	}
	flush()
	return texts, errs
}

// spaceChars are the bytes that separate words, as in egraph patterns.
const spaceChars = " \t\n\r\v\f"

func isSpace(c byte) bool { return strings.IndexByte(spaceChars, c) >= 0 }

// pos returns the file position of an offset into the rule's text.
func (rt *ruleText) pos(off int) Pos {
	i, found := slices.BinarySearch(rt.starts, off)
	if !found {
		i--
	}
	col := utf8.RuneCountInString(rt.text[rt.starts[i]:off]) + 1
	return Pos{rt.file, rt.lines[i], col}
}

func (rt *ruleText) errorf(off int, format string, args ...any) *PosError {
	return &PosError{rt.pos(off), fmt.Sprintf(format, args...)}
}

// header reads "rule NAME:" and returns the name, its offset and the offset
// after the colon.
func (rt *ruleText) header() (name string, at, body int, err *PosError) {
	t := rt.text
	if !strings.HasPrefix(t, "rule") || len(t) > 4 && !isSpace(t[4]) {
		return "", 0, 0, rt.errorf(0, "want a rule: rule NAME: LHS => RHS")
	}
	i := skipSpace(t, 4)
	at = i
	for i < len(t) && isNameChar(t[i]) {
		i++
	}
	name = t[at:i]
	if name == "" {
		return "", 0, 0, rt.errorf(at, "missing rule name after 'rule'")
	}
	i = skipSpace(t, i)
	if i >= len(t) || t[i] != ':' {
		return "", 0, 0, rt.errorf(i, "missing ':' after rule name %s", name)
	}
	return name, at, i + 1, nil
}

func isNameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

func skipSpace(t string, i int) int {
	for i < len(t) && isSpace(t[i]) {
		i++
	}
	return i
}

// layout is where a rule's body splits: the commas of each side, the arrow
// and "if", found outside parentheses and brackets.
type layout struct {
	lhsCommas, rhsCommas []int
	arrow, arrowEnd      int // -1 without an arrow
	cond                 int // offset of "if", or len(text)
}

// scan finds the layout of the body that starts at from.
func (rt *ruleText) scan(from int) (layout, *PosError) {
	t := rt.text
	l := layout{arrow: -1, cond: len(t)}
	var open []int // offsets of unclosed '('
	brackets := 0  // '[' depth inside one word: brackets never hold spaces
	for i := from; i < len(t); {
		switch c := t[i]; {
		case c == '(':
			open = append(open, i)
			brackets = 0
		case c == ')':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			brackets = 0
		case isSpace(c):
			brackets = 0
			if len(open) == 0 && strings.HasPrefix(t[i+1:], "if") && (i+3 == len(t) || isSpace(t[i+3])) {
				l.cond = i + 1
				i = len(t)
				continue
			}
		case c == '[':
			brackets++
		case c == ']':
			brackets = max(brackets-1, 0)
		case brackets > 0:
		case len(open) > 0:
			if c == ',' {
				return l, rt.errorf(i, "',' inside a pattern: operands are separated by spaces, and ',' separates the patterns of a multi-pattern")
			}
		case c == ',':
			if l.arrow < 0 {
				l.lhsCommas = append(l.lhsCommas, i)
			} else {
				l.rhsCommas = append(l.rhsCommas, i)
			}
		case strings.IndexByte("<=>-~", c) >= 0:
			j := i
			for j < len(t) && strings.IndexByte("<=>-~", t[j]) >= 0 {
				j++
			}
			run := t[i:j]
			switch {
			case !strings.ContainsAny(run, "<=>"):
			case l.arrow >= 0:
				return l, rt.errorf(i, "a second arrow %s: a rule has one", run)
			case run != "=>" && run != "<=>":
				return l, rt.errorf(i, "unknown arrow %s (want => or <=>)", run)
			default:
				l.arrow, l.arrowEnd = i, j
			}
			i = j
			continue
		}
		i++
	}
	if l.arrow < 0 {
		if len(open) > 0 {
			return l, rt.errorf(open[len(open)-1], "unclosed '('")
		}
		return l, rt.errorf(l.cond, "missing => or <=> after the left side")
	}
	return l, nil
}

// rule parses a rule's body: the text after "rule NAME:".
func (rt *ruleText) rule(body int, atom egraph.AtomFunc) (*RuleDecl, *PosError) {
	r := &RuleDecl{Pos: rt.pos(0)}
	l, err := rt.scan(body)
	if err != nil {
		return nil, err
	}
	arrow := rt.text[l.arrow:l.arrowEnd]
	r.TwoWay = arrow == "<=>"
	lhsParts, err := rt.parts(body, l.arrow, l.lhsCommas, "left side", arrow)
	if err != nil {
		return nil, err
	}
	rhsParts, err := rt.parts(l.arrowEnd, l.cond, l.rhsCommas, "right side", arrow)
	if err != nil {
		return nil, err
	}
	r.LHSText, r.RHSText = rt.sideText(lhsParts), rt.sideText(rhsParts)
	for _, p := range lhsParts {
		pat, err := rt.pattern(p, atom)
		if err != nil {
			return nil, err
		}
		r.LHS = append(r.LHS, pat)
	}
	if slices.ContainsFunc(rhsParts, func(p [2]int) bool { return rt.text[p[0]] == '@' }) {
		if len(rhsParts) > 1 {
			return nil, rt.errorf(rhsParts[0][0], "a Go applier must be the whole right side")
		}
		if r.TwoWay {
			return nil, rt.errorf(l.arrow, "<=> needs patterns on both sides; a Go applier runs one way only (use =>)")
		}
		if r.Applier, err = rt.applier(rhsParts[0]); err != nil {
			return nil, err
		}
	} else {
		for _, p := range rhsParts {
			pat, err := rt.pattern(p, atom)
			if err != nil {
				return nil, err
			}
			r.RHS = append(r.RHS, pat)
		}
		if len(r.RHS) != len(r.LHS) {
			return nil, rt.errorf(rhsParts[0][0], "%s on the left but %d on the right (each right pattern goes to the class of the left pattern in its place)",
				plural(len(r.LHS), "pattern"), len(r.RHS))
		}
	}
	if _, err := egraph.NewMultiPattern(r.LHS...); err != nil {
		return nil, rt.errorf(lhsParts[0][0], "left side: %v", err)
	}
	classVars, payloadVars := boundVars(r.LHS)
	if err := rt.bound(r.RHS, rhsParts, classVars, payloadVars, "right", "left"); err != nil {
		return nil, err
	}
	if r.TwoWay {
		if _, err := egraph.NewMultiPattern(r.RHS...); err != nil {
			return nil, rt.errorf(rhsParts[0][0], "right side, read right to left by <=>: %v", err)
		}
		rc, rp := boundVars(r.RHS)
		if err := rt.bound(r.LHS, lhsParts, rc, rp, "left", "right"); err != nil {
			err.Msg = "<=>: " + err.Msg + ", so the rule cannot run right to left"
			return nil, err
		}
	}
	if l.cond < len(rt.text) {
		if r.Cond, err = rt.cond(l.cond+len("if"), classVars, payloadVars); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// parts splits text[from:to] at the commas and trims each part, returning
// [start, end) offsets.
func (rt *ruleText) parts(from, to int, commas []int, side, arrow string) ([][2]int, *PosError) {
	var out [][2]int
	seps := append(slices.Clone(commas), to)
	start := from
	for i, end := range seps {
		s, e := trimSpan(rt.text, start, end)
		if s == e {
			switch {
			case len(seps) > 1 && i < len(commas):
				return nil, rt.errorf(end, "empty pattern before ',' in the %s", side)
			case len(seps) > 1:
				return nil, rt.errorf(commas[i-1], "empty pattern after ',' in the %s", side)
			case side == "left side":
				return nil, rt.errorf(to, "missing left side before %s", arrow)
			default:
				return nil, rt.errorf(from, "missing right side after %s", arrow)
			}
		}
		out = append(out, [2]int{s, e})
		start = end + 1
	}
	return out, nil
}

func trimSpan(t string, s, e int) (int, int) {
	for s < e && isSpace(t[s]) {
		s++
	}
	for e > s && isSpace(t[e-1]) {
		e--
	}
	return s, e
}

// sideText joins parts with ", ", each run of white space one space.
func (rt *ruleText) sideText(parts [][2]int) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = strings.Join(strings.Fields(rt.text[p[0]:p[1]]), " ")
	}
	return strings.Join(s, ", ")
}

// patternErr is the position prefix of egraph's pattern parse errors.
var patternErr = regexp.MustCompile(`(?s)^pattern (\d+):(\d+): (.*)$`)

// pattern parses one part, moving the pattern parser's positions into the
// file.
func (rt *ruleText) pattern(p [2]int, atom egraph.AtomFunc) (*egraph.Pattern, *PosError) {
	src := rt.text[p[0]:p[1]]
	pat, err := egraph.ParsePatternWith(src, atom)
	if err == nil {
		return pat, nil
	}
	m := patternErr.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, rt.errorf(p[0], "%v", err)
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	off := 0
	for ; line > 1; line-- {
		i := strings.IndexByte(src[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
	}
	for ; col > 1 && off < len(src) && src[off] != '\n'; col-- {
		_, n := utf8.DecodeRuneInString(src[off:])
		off += n
	}
	return nil, rt.errorf(p[0]+off, "%s", m[3])
}

// applier reads "@name" or "@name()".
func (rt *ruleText) applier(p [2]int) (string, *PosError) {
	t := rt.text[:p[1]]
	i := p[0] + 1
	for i < len(t) && isNameChar(t[i]) {
		i++
	}
	name := t[p[0]+1 : i]
	if name == "" {
		return "", rt.errorf(p[0], "missing applier name after '@'")
	}
	rest := strings.TrimLeft(t[i:], spaceChars)
	at := len(t) - len(rest)
	switch {
	case rest == "" || strings.Join(strings.Fields(rest), "") == "()":
		return name, nil
	case rest[0] == '(':
		return "", rt.errorf(at, "a Go applier takes no arguments: write @%s", name)
	default:
		return "", rt.errorf(at, "unexpected %q after applier @%s", rest, name)
	}
}

// boundVars returns the class and payload variables the patterns bind.
func boundVars(pats []*egraph.Pattern) (class, payload map[string]bool) {
	class, payload = map[string]bool{}, map[string]bool{}
	for _, p := range pats {
		for _, v := range p.Vars() {
			class[v] = true
		}
		for _, v := range p.PayloadVars() {
			payload[v] = true
		}
	}
	return class, payload
}

// bound checks that the patterns of one side use only variables that the
// other binds.
func (rt *ruleText) bound(pats []*egraph.Pattern, parts [][2]int, class, payload map[string]bool, side, other string) *PosError {
	for i, p := range pats {
		for _, v := range p.Vars() {
			switch {
			case class[v]:
			case payload[v]:
				return rt.errorf(rt.findVar(parts[i], v), "%s is a payload variable on the %s side but a class variable on the %s side", v, other, side)
			default:
				return rt.errorf(rt.findVar(parts[i], v), "%s on the %s side is not bound by the %s side", v, side, other)
			}
		}
		for _, v := range p.PayloadVars() {
			switch {
			case payload[v]:
			case class[v]:
				return rt.errorf(rt.findVar(parts[i], v), "%s is a class variable on the %s side but a payload variable on the %s side", v, other, side)
			default:
				return rt.errorf(rt.findVar(parts[i], v), "payload variable %s on the %s side is not bound by the %s side", v, side, other)
			}
		}
	}
	return nil
}

// findVar returns the offset of the first use of variable v in a part, or
// the part's start.
func (rt *ruleText) findVar(p [2]int, v string) int {
	t := rt.text[:p[1]]
	for i := p[0]; ; {
		j := strings.Index(t[i:], v)
		if j < 0 {
			return p[0]
		}
		s, e := i+j, i+j+len(v)
		before := s == p[0] || isSpace(t[s-1]) || t[s-1] == '(' || t[s-1] == '['
		after := e == len(t) || isSpace(t[e]) || t[e] == ')' || t[e] == ']'
		if before && after {
			return s
		}
		i = s + 1
	}
}
