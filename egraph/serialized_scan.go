package egraph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file is the egraph-serialize reader's JSON scanner; serialized.go
// holds the data model and the writer.

// serPath names a location in an egraph-serialize document. It is a value
// rather than a string so that the parser formats paths only when it fails.
type serPath struct {
	top    string // top-level member; "" means the document itself
	key    string // member of top (node id or e-class id), when hasKey
	hasKey bool
	field  string // member of a node; "" for none
	index  int    // array index, or -1
}

func (p serPath) String() string {
	b := []byte{'$'}
	if p.top != "" {
		b = serAppendPathName(b, p.top)
	}
	if p.hasKey {
		b = append(b, '[')
		b = serAppendString(b, p.key)
		b = append(b, ']')
	}
	if p.field != "" {
		b = serAppendPathName(b, p.field)
	}
	if p.index >= 0 {
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(p.index), 10)
		b = append(b, ']')
	}
	return string(b)
}

// serAppendPathName uses the dotted form for identifier-like names, as people
// write paths, and the bracketed form for anything else so the path stays
// unambiguous.
func serAppendPathName(b []byte, name string) []byte {
	ident := name != ""
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			ident = false
			break
		}
	}
	if ident {
		b = append(b, '.')
		return append(b, name...)
	}
	b = append(b, '[')
	b = serAppendString(b, name)
	return append(b, ']')
}

func (p serPath) withField(f string) serPath { p.field = f; return p }
func (p serPath) withIndex(i int) serPath    { p.index = i; return p }

// serParser is a strict JSON reader over a complete document, specialised to
// the egraph-serialize shape. It accepts exactly what encoding/json accepts.
type serParser struct {
	data []byte
	pos  int
	// ids holds the node ids seen so far, to catch duplicates while
	// parsing and dangling children afterwards.
	ids map[string]struct{}
}

func serParse(data []byte) (*Serialized, error) {
	p := &serParser{data: data, ids: make(map[string]struct{})}
	s, err := p.document()
	if err != nil {
		return nil, err
	}
	if err := s.check(p.ids); err != nil {
		return nil, err
	}
	return s, nil
}

// check validates references, which can point forward in the file and so
// can only be checked once everything is read.
func (s *Serialized) check(ids map[string]struct{}) error {
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if math.IsNaN(n.Cost) || math.IsInf(n.Cost, 0) {
			path := serPath{top: "nodes", key: n.ID, hasKey: true, field: "cost", index: -1}
			return fmt.Errorf("%s: want a finite number, got %v", path, n.Cost)
		}
		for j, c := range n.Children {
			if _, ok := ids[c]; !ok {
				path := serPath{top: "nodes", key: n.ID, hasKey: true, field: "children", index: j}
				return fmt.Errorf("%s: unknown node %s", path, serAppendString(nil, c))
			}
		}
	}
	if len(s.Roots) == 0 {
		return nil
	}
	classes := make(map[string]struct{})
	for i := range s.Nodes {
		classes[s.Nodes[i].Class] = struct{}{}
	}
	for i, r := range s.Roots {
		if _, ok := classes[r]; !ok {
			path := serPath{top: "root_eclasses", index: i}
			return fmt.Errorf("%s: unknown e-class %s", path, serAppendString(nil, r))
		}
	}
	return nil
}

func (p *serParser) document() (*Serialized, error) {
	root := serPath{index: -1}
	s := &Serialized{}
	p.ws()
	if !p.at('{') {
		return nil, p.typeErr(root, 0, "an object")
	}
	p.pos++
	var haveNodes, haveRoots, haveClassData, haveComment bool
	for first := true; ; first = false {
		key, done, err := p.nextMember(root, first)
		if err != nil {
			return nil, err
		}
		if done {
			break
		}
		path := serPath{top: key, index: -1}
		dup := false
		switch key {
		case "nodes":
			dup, haveNodes = haveNodes, true
			if !dup {
				err = p.nodes(s, path)
			}
		case "root_eclasses":
			dup, haveRoots = haveRoots, true
			if !dup {
				s.Roots, err = p.stringArray(path, 1)
			}
		case "class_data":
			dup, haveClassData = haveClassData, true
			if !dup {
				err = p.classData(s, path)
			}
		case "comment":
			dup, haveComment = haveComment, true
			if !dup {
				s.Comment, err = p.str(path, 1)
			}
		default:
			// Ignore unknown members so that newer writers' additions
			// do not break reading.
			err = p.skipValue(path, 1)
		}
		if dup {
			return nil, fmt.Errorf("%s: duplicate field", path)
		}
		if err != nil {
			return nil, err
		}
	}
	p.ws()
	if p.pos < len(p.data) {
		return nil, p.unexpected(root, "after top-level value")
	}
	if !haveNodes {
		return nil, fmt.Errorf("%s: missing", serPath{top: "nodes", index: -1})
	}
	return s, nil
}

func (p *serParser) nodes(s *Serialized, path serPath) error {
	p.ws()
	if !p.at('{') {
		return p.typeErr(path, 1, "an object")
	}
	p.pos++
	for first := true; ; first = false {
		id, done, err := p.nextMember(path, first)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		np := path
		np.key, np.hasKey = id, true
		if _, dup := p.ids[id]; dup {
			return fmt.Errorf("%s: duplicate node id", np)
		}
		p.ids[id] = struct{}{}
		n, err := p.node(id, np)
		if err != nil {
			return err
		}
		s.Nodes = append(s.Nodes, n)
	}
}

func (p *serParser) node(id string, path serPath) (SerializedNode, error) {
	n := SerializedNode{ID: id, Cost: 1}
	p.ws()
	if !p.at('{') {
		return n, p.typeErr(path, 2, "an object")
	}
	p.pos++
	var haveOp, haveClass, haveCost, haveChildren, haveSubsumed bool
	for first := true; ; first = false {
		key, done, err := p.nextMember(path, first)
		if err != nil {
			return n, err
		}
		if done {
			break
		}
		fp := path.withField(key)
		dup := false
		switch key {
		case "op":
			dup, haveOp = haveOp, true
			if !dup {
				n.Op, err = p.str(fp, 3)
			}
		case "eclass":
			dup, haveClass = haveClass, true
			if !dup {
				n.Class, err = p.str(fp, 3)
			}
		case "cost":
			dup, haveCost = haveCost, true
			if !dup {
				n.Cost, err = p.number(fp, 3)
			}
		case "children":
			dup, haveChildren = haveChildren, true
			if !dup {
				n.Children, err = p.stringArray(fp, 3)
			}
		case "subsumed":
			dup, haveSubsumed = haveSubsumed, true
			if !dup {
				n.Subsumed, err = p.boolean(fp, 3)
			}
		default:
			err = p.skipValue(fp, 3)
		}
		if dup {
			return n, fmt.Errorf("%s: duplicate field", fp)
		}
		if err != nil {
			return n, err
		}
	}
	if !haveOp {
		return n, fmt.Errorf("%s: missing", path.withField("op"))
	}
	if !haveClass {
		return n, fmt.Errorf("%s: missing", path.withField("eclass"))
	}
	return n, nil
}

func (p *serParser) classData(s *Serialized, path serPath) error {
	p.ws()
	if !p.at('{') {
		return p.typeErr(path, 1, "an object")
	}
	p.pos++
	seen := make(map[string]struct{})
	for first := true; ; first = false {
		class, done, err := p.nextMember(path, first)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		cp := path
		cp.key, cp.hasKey = class, true
		if _, dup := seen[class]; dup {
			return fmt.Errorf("%s: duplicate e-class", cp)
		}
		seen[class] = struct{}{}
		p.ws()
		start := p.pos
		if err := p.skipValue(cp, 2); err != nil {
			return err
		}
		// Copy so that the value does not pin the whole input in memory.
		raw := bytes.Clone(p.data[start:p.pos])
		s.ClassData = append(s.ClassData, SerializedClassData{Class: class, Data: raw})
	}
}

// stringArray reads an array of strings; depth is the nesting depth of the
// array itself.
func (p *serParser) stringArray(path serPath, depth int) ([]string, error) {
	p.ws()
	if !p.at('[') {
		return nil, p.typeErr(path, depth, "an array")
	}
	p.pos++
	var out []string
	for i := 0; ; i++ {
		done, err := p.nextElement(path, i == 0)
		if err != nil {
			return nil, err
		}
		if done {
			return out, nil
		}
		s, err := p.str(path.withIndex(i), depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}

// nextMember moves past the separator before an object member and returns its
// key, or done at the closing brace.
func (p *serParser) nextMember(path serPath, first bool) (key string, done bool, err error) {
	p.ws()
	if p.pos >= len(p.data) {
		return "", false, p.eof(path)
	}
	switch c := p.data[p.pos]; {
	case c == '}':
		p.pos++
		return "", true, nil
	case !first && c == ',':
		p.pos++
		p.ws()
	case !first:
		return "", false, p.unexpected(path, "after object key:value pair")
	}
	if !p.at('"') {
		return "", false, p.unexpected(path, "looking for beginning of object key string")
	}
	if key, err = p.scanString(path); err != nil {
		return "", false, err
	}
	p.ws()
	if !p.at(':') {
		return "", false, p.unexpected(path, "after object key")
	}
	p.pos++
	return key, false, nil
}

// nextElement moves past the separator before an array element, or reports
// done at the closing bracket.
func (p *serParser) nextElement(path serPath, first bool) (done bool, err error) {
	p.ws()
	if p.pos >= len(p.data) {
		return false, p.eof(path)
	}
	switch c := p.data[p.pos]; {
	case c == ']':
		p.pos++
		return true, nil
	case !first && c == ',':
		p.pos++
	case !first:
		return false, p.unexpected(path, "after array element")
	}
	return false, nil
}

func (p *serParser) str(path serPath, depth int) (string, error) {
	p.ws()
	if !p.at('"') {
		return "", p.typeErr(path, depth, "a string")
	}
	return p.scanString(path)
}

func (p *serParser) number(path serPath, depth int) (float64, error) {
	p.ws()
	if !p.at('-') && !(p.pos < len(p.data) && '0' <= p.data[p.pos] && p.data[p.pos] <= '9') {
		return 0, p.typeErr(path, depth, "a number")
	}
	start := p.pos
	if err := p.scanNumber(path); err != nil {
		return 0, err
	}
	text := p.data[start:p.pos]
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s: number %s out of range", path, text)
		}
		return 0, fmt.Errorf("%s: bad number %s: %w", path, text, err)
	}
	return f, nil
}

func (p *serParser) boolean(path serPath, depth int) (bool, error) {
	p.ws()
	switch {
	case p.at('t'):
		return true, p.literal(path, "true")
	case p.at('f'):
		return false, p.literal(path, "false")
	}
	return false, p.typeErr(path, depth, "a boolean")
}

// typeErr reports a value of the wrong kind at p.pos. It first scans the
// value, so that a malformed document is reported as a syntax error rather
// than as a type mismatch.
func (p *serParser) typeErr(path serPath, depth int, want string) error {
	if p.pos >= len(p.data) {
		return p.eof(path)
	}
	got := ""
	switch c := p.data[p.pos]; {
	case c == '{':
		got = "object"
	case c == '[':
		got = "array"
	case c == '"':
		got = "string"
	case c == 't' || c == 'f':
		got = "boolean"
	case c == 'n':
		got = "null"
	case c == '-' || '0' <= c && c <= '9':
		got = "number"
	default:
		return p.unexpected(path, "looking for beginning of value")
	}
	if err := p.skipValue(path, depth); err != nil {
		return err
	}
	return fmt.Errorf("%s: want %s, got %s", path, want, got)
}

// skipValue scans one JSON value of any shape. It keeps its own stack
// instead of recursing so that hostile nesting cannot exhaust the goroutine
// stack; depth is the number of containers already open around the value.
func (p *serParser) skipValue(path serPath, depth int) error {
	var stack []byte
	for {
		// Here a value is expected.
		p.ws()
		if p.pos >= len(p.data) {
			return p.eof(path)
		}
		switch c := p.data[p.pos]; c {
		case '{', '[':
			if depth+len(stack)+1 > serMaxDepth {
				return p.syntaxErr(path, "exceeded max depth")
			}
			p.pos++
			p.ws()
			if c == '[' && p.at(']') || c == '{' && p.at('}') {
				p.pos++
				break
			}
			stack = append(stack, c)
			if c == '{' {
				if err := p.memberKey(path); err != nil {
					return err
				}
			}
			continue
		case '"':
			if _, err := p.skipString(path); err != nil {
				return err
			}
		case 't':
			if err := p.literal(path, "true"); err != nil {
				return err
			}
		case 'f':
			if err := p.literal(path, "false"); err != nil {
				return err
			}
		case 'n':
			if err := p.literal(path, "null"); err != nil {
				return err
			}
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if err := p.scanNumber(path); err != nil {
				return err
			}
		default:
			return p.unexpected(path, "looking for beginning of value")
		}
		// Here a value has ended: close containers until another value is due.
	closing:
		for {
			if len(stack) == 0 {
				return nil
			}
			p.ws()
			if p.pos >= len(p.data) {
				return p.eof(path)
			}
			top := stack[len(stack)-1]
			switch c := p.data[p.pos]; {
			case c == ',':
				p.pos++
				if top == '{' {
					if err := p.memberKey(path); err != nil {
						return err
					}
				}
				break closing
			case top == '{' && c == '}', top == '[' && c == ']':
				p.pos++
				stack = stack[:len(stack)-1]
			case top == '{':
				return p.unexpected(path, "after object key:value pair")
			default:
				return p.unexpected(path, "after array element")
			}
		}
	}
}

// memberKey scans `"key":` inside a skipped object.
func (p *serParser) memberKey(path serPath) error {
	p.ws()
	if !p.at('"') {
		return p.unexpected(path, "looking for beginning of object key string")
	}
	if _, err := p.skipString(path); err != nil {
		return err
	}
	p.ws()
	if !p.at(':') {
		return p.unexpected(path, "after object key")
	}
	p.pos++
	return nil
}

func (p *serParser) scanString(path serPath) (string, error) {
	start := p.pos
	plain, err := p.skipString(path)
	if err != nil {
		return "", err
	}
	if plain {
		body := p.data[start+1 : p.pos-1]
		return string(body), nil
	}
	// Escapes and invalid UTF-8 are rare; encoding/json decodes them exactly
	// as any other JSON reader would (surrogate pairs, U+FFFD replacement).
	var s string
	if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
		return "", p.syntaxErrAt(path, start, err.Error())
	}
	return s, nil
}

// skipString scans a string literal at p.pos. plain reports that its body
// can be used as is: no escapes and valid UTF-8.
func (p *serParser) skipString(path serPath) (plain bool, err error) {
	d := p.data
	i := p.pos + 1
	plain = true
	ascii := true
	start := i
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			if !ascii && plain {
				plain = utf8.Valid(d[start:i])
			}
			p.pos = i + 1
			return plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(d) {
				p.pos = len(d)
				return false, p.eof(path)
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(d) {
						p.pos = len(d)
						return false, p.eof(path)
					}
					if !serIsHex(d[k]) {
						p.pos = k
						return false, p.unexpected(path, "in \\u hexadecimal character escape")
					}
				}
				i += 6
			default:
				p.pos = i + 1
				return false, p.unexpected(path, "in string escape code")
			}
		case c < 0x20:
			p.pos = i
			return false, p.unexpected(path, "in string literal")
		case c >= utf8.RuneSelf:
			ascii = false
			i++
		default:
			i++
		}
	}
	p.pos = len(d)
	return false, p.eof(path)
}

func serIsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber scans a number literal with JSON's grammar, which is stricter
// than strconv's (no leading zeros, '+', hex, "Inf" or "NaN").
func (p *serParser) scanNumber(path serPath) error {
	d := p.data
	i := p.pos
	digits := func(what string) error {
		if i >= len(d) {
			p.pos = i
			return p.eof(path)
		}
		if d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.unexpected(path, what)
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return nil
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	if i < len(d) && d[i] == '0' {
		i++
	} else if err := digits("in numeric literal"); err != nil {
		return err
	}
	if i < len(d) && d[i] == '.' {
		i++
		if err := digits("after decimal point in numeric literal"); err != nil {
			return err
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if err := digits("in exponent of numeric literal"); err != nil {
			return err
		}
	}
	p.pos = i
	return nil
}

func (p *serParser) literal(path serPath, word string) error {
	for k := 0; k < len(word); k++ {
		if p.pos >= len(p.data) {
			return p.eof(path)
		}
		if p.data[p.pos] != word[k] {
			return p.unexpected(path, "in literal "+word)
		}
		p.pos++
	}
	return nil
}

func (p *serParser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *serParser) at(c byte) bool { return p.pos < len(p.data) && p.data[p.pos] == c }

func (p *serParser) eof(path serPath) error {
	return p.syntaxErrAt(path, len(p.data), "unexpected end of input")
}

func (p *serParser) unexpected(path serPath, context string) error {
	if p.pos >= len(p.data) {
		return p.eof(path)
	}
	return p.syntaxErr(path, fmt.Sprintf("invalid character %q %s", rune(p.data[p.pos]), context))
}

func (p *serParser) syntaxErr(path serPath, msg string) error {
	return p.syntaxErrAt(path, p.pos, msg)
}

func (p *serParser) syntaxErrAt(path serPath, offset int, msg string) error {
	return &serSyntaxError{path: path, offset: offset, msg: msg}
}

// serSyntaxError is a distinct type so that tests can tell malformed JSON
// from a well-formed document of the wrong shape.
type serSyntaxError struct {
	path   serPath
	offset int
	msg    string
}

func (e *serSyntaxError) Error() string {
	return fmt.Sprintf("%s: syntax error at byte offset %d: %s", e.path, e.offset, e.msg)
}
