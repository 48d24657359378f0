package egraph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file reads and writes the egraph-serialize JSON format
// (github.com/egraphs-good/egraph-serialize), the interchange format of
// extraction-gym. It is a plain data model, independent of the engine, so
// that the format's quirks (string ids, node-level children, optional fields)
// stay out of the engine and the engine converts in one place.
//
// The reader is hand-written rather than built on encoding/json for three
// reasons: node order is significant (extractors break ties by it, and
// rewriting a file must not shuffle it), every error has to name the JSON
// path of the problem, and the largest benchmark files must load quickly.

// SerializedNode is one e-node of an egraph-serialize file.
type SerializedNode struct {
	// ID is the node's key in the "nodes" object; children refer to nodes by it.
	ID string
	// Op is the operator as the producing tool printed it, payload included
	// (for example "Num(0)"); its meaning is up to the importer.
	Op string
	// Class is the node's "eclass": nodes sharing it are equivalent.
	Class string
	// Cost defaults to 1 when the file omits it, as egraph-serialize does.
	Cost float64
	// Children are node ids, not e-class ids: the file names one
	// representative node per child, and its Class is the child's e-class.
	Children []string
	// Subsumed marks nodes that newer egraph-serialize writers keep for
	// completeness but that an extractor should not choose.
	Subsumed bool
}

// SerializedClassData is the payload the file attaches to one e-class. It is
// kept as raw JSON because its shape depends on the producing tool.
type SerializedClassData struct {
	Class string
	Data  json.RawMessage
}

// Serialized is an egraph-serialize file, with nodes in file order.
type Serialized struct {
	// Nodes keep file order because extractors break ties by it, and so
	// that rewriting a file reproduces it.
	Nodes []SerializedNode
	// Roots are e-class ids ("root_eclasses"); each names a Class of some node.
	Roots []string
	// ClassData is kept in file order, verbatim as read. Write re-indents it
	// to fit the surrounding layout but changes nothing else.
	ClassData []SerializedClassData
	// Comment is the free-form provenance line extraction-gym files carry.
	Comment string
}

// serMaxDepth matches encoding/json's nesting limit, so that anything the
// reader accepts can be re-indented by json.Indent when written.
const serMaxDepth = 10000

// ReadSerialized reads a whole egraph-serialize document from r and checks
// that it is self-consistent: children name existing nodes and roots name
// e-classes that some node belongs to. Errors name the JSON path of the
// problem, for example `$.nodes["3"].cost: want a number, got string`.
func ReadSerialized(r io.Reader) (*Serialized, error) {
	var buf bytes.Buffer
	// Sizing the buffer up front, when the reader knows its length, saves
	// re-copying multi-megabyte inputs as the buffer grows. Only trusted
	// types are asked, as a bogus Len would make Grow panic.
	switch r := r.(type) {
	case *bytes.Reader:
		buf.Grow(r.Len() + bytes.MinRead)
	case *strings.Reader:
		buf.Grow(r.Len() + bytes.MinRead)
	case *bytes.Buffer:
		buf.Grow(r.Len() + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return serParse(buf.Bytes())
}

// ReadSerializedFile is ReadSerialized on a file; parse errors are prefixed
// with the path because a JSON path alone does not say which file was bad.
func ReadSerializedFile(path string) (*Serialized, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // already names the path
	}
	s, err := serParse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// NodeIndex maps node ids to indexes into s.Nodes, for following children.
// Should an id occur twice (only possible in a hand-built value), the first
// occurrence wins.
func (s *Serialized) NodeIndex() map[string]int {
	idx := make(map[string]int, len(s.Nodes))
	for i := range s.Nodes {
		if _, dup := idx[s.Nodes[i].ID]; !dup {
			idx[s.Nodes[i].ID] = i
		}
	}
	return idx
}

// Write writes s in the layout extraction-gym's files use (two-space indent,
// Python-style float formatting, no trailing newline), so that a file read
// from that corpus is written back byte for byte and diffs stay small. The
// output depends only on s: nodes and class data go in slice order. Cost is
// always written; "subsumed" only when true, "comment" only when non-empty
// and "class_data" only when non-empty, as egraph-serialize omits them.
// Write does not check references (a partial graph may be worth dumping), but
// refuses values that would not be valid JSON or that no reader could
// disambiguate: non-finite costs, duplicate node ids or class data entries,
// and class data that is not a single JSON value.
func (s *Serialized) Write(w io.Writer) error {
	size := 64 + len(s.Comment)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		size += 120 + 2*len(n.ID) + len(n.Op) + len(n.Class)
		for _, c := range n.Children {
			size += 12 + len(c)
		}
	}
	for _, r := range s.Roots {
		size += 8 + len(r)
	}
	for _, cd := range s.ClassData {
		size += 16 + len(cd.Class) + 2*len(cd.Data)
	}
	b := make([]byte, 0, size)

	seen := make(map[string]struct{}, len(s.Nodes))
	b = append(b, "{\n  \"nodes\": {"...)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		path := serPath{top: "nodes", key: n.ID, hasKey: true, index: -1}
		if _, dup := seen[n.ID]; dup {
			return fmt.Errorf("%s: duplicate node id", path)
		}
		seen[n.ID] = struct{}{}
		if math.IsNaN(n.Cost) || math.IsInf(n.Cost, 0) {
			path.field = "cost"
			return fmt.Errorf("%s: want a finite number, got %v", path, n.Cost)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = serAppendString(b, n.ID)
		b = append(b, ": {\n      \"op\": "...)
		b = serAppendString(b, n.Op)
		b = append(b, ",\n      \"cost\": "...)
		b = serAppendFloat(b, n.Cost)
		b = append(b, ",\n      \"eclass\": "...)
		b = serAppendString(b, n.Class)
		b = append(b, ",\n      \"children\": ["...)
		for j, c := range n.Children {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n        "...)
			b = serAppendString(b, c)
		}
		if len(n.Children) > 0 {
			b = append(b, "\n      "...)
		}
		b = append(b, ']')
		if n.Subsumed {
			b = append(b, ",\n      \"subsumed\": true"...)
		}
		b = append(b, "\n    }"...)
	}
	if len(s.Nodes) > 0 {
		b = append(b, "\n  "...)
	}
	b = append(b, '}')

	if s.Comment != "" {
		b = append(b, ",\n  \"comment\": "...)
		b = serAppendString(b, s.Comment)
	}

	b = append(b, ",\n  \"root_eclasses\": ["...)
	for i, r := range s.Roots {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = serAppendString(b, r)
	}
	if len(s.Roots) > 0 {
		b = append(b, "\n  "...)
	}
	b = append(b, ']')

	if len(s.ClassData) > 0 {
		seenClass := make(map[string]struct{}, len(s.ClassData))
		b = append(b, ",\n  \"class_data\": {"...)
		for i, cd := range s.ClassData {
			path := serPath{top: "class_data", key: cd.Class, hasKey: true, index: -1}
			if _, dup := seenClass[cd.Class]; dup {
				return fmt.Errorf("%s: duplicate e-class", path)
			}
			seenClass[cd.Class] = struct{}{}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n    "...)
			b = serAppendString(b, cd.Class)
			b = append(b, ": "...)
			// json.Indent keeps trailing space, which the reader would not
			// give back; trimming keeps Write∘Read∘Write stable.
			raw := bytes.TrimSpace(cd.Data)
			if len(raw) == 0 {
				return fmt.Errorf("%s: empty value", path)
			}
			buf := bytes.NewBuffer(b)
			if err := json.Indent(buf, raw, "    ", "  "); err != nil {
				return fmt.Errorf("%s: invalid JSON: %w", path, err)
			}
			b = buf.Bytes()
		}
		b = append(b, "\n  }"...)
	}
	b = append(b, "\n}"...)
	_, err := w.Write(b)
	return err
}

// serAppendFloat formats like Python's repr (which wrote the extraction-gym
// files): the shortest digits that round-trip, fixed notation with at least
// one fractional digit for decimal exponents -4..15, scientific otherwise.
func serAppendFloat(b []byte, f float64) []byte {
	var scratch [32]byte
	e := strconv.AppendFloat(scratch[:0], f, 'e', -1, 64)
	exp := 0
	if i := bytes.IndexByte(e, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(string(e[i+1:]))
	}
	if f != 0 && (exp < -4 || exp >= 16) {
		return append(b, e...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	if bytes.IndexByte(b[start:], '.') < 0 {
		b = append(b, ".0"...)
	}
	return b
}

// serAppendString quotes s as a JSON string. Unlike encoding/json it leaves
// '<', '>' and '&' alone (the files do), and it writes invalid UTF-8 as
// U+FFFD, which is what a JSON reader would turn it into anyway.
func serAppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, `\ufffd`...)
				i += size
				start = i
				continue
			}
			i += size
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
