package rules

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
)

// The e-graph language: every ir op is the symbol of its name, and its
// attributes (normalized by ir.Op.Normalize) are interned into the e-node's
// payload, so that nodes compare in constant time and patterns can bind
// them with payload variables (op[?p]). Payload 0 means "no attributes".

var opSymbols = func() map[egraph.Symbol]ir.Op {
	m := map[egraph.Symbol]ir.Op{}
	for _, op := range ir.Ops() {
		m[egraph.Intern(op.String())] = op
	}
	return m
}()

// Symbol is the e-graph operator of an ir op.
func Symbol(op ir.Op) egraph.Symbol { return egraph.Intern(op.String()) }

// OpOf returns the ir op of an e-graph operator, if it is one.
func OpOf(s egraph.Symbol) (ir.Op, bool) {
	op, ok := opSymbols[s]
	return op, ok
}

// attrTable interns attributes process-wide, like egraph symbols, so that
// patterns compiled once work on every e-graph.
var attrTable = struct {
	sync.RWMutex
	ids   map[string]egraph.Payload
	attrs []ir.Attrs // index = payload; entry 0 is the empty attributes
}{ids: map[string]egraph.Payload{fmt.Sprintf("%#v", ir.Attrs{}): 0}, attrs: []ir.Attrs{{}}}

// AttrPayload interns op's attributes (normalized) and returns their payload.
func AttrPayload(op ir.Op, a ir.Attrs) egraph.Payload {
	n := op.Normalize(a)
	key := fmt.Sprintf("%#v", n)
	attrTable.RLock()
	p, ok := attrTable.ids[key]
	attrTable.RUnlock()
	if ok {
		return p
	}
	attrTable.Lock()
	defer attrTable.Unlock()
	if p, ok := attrTable.ids[key]; ok {
		return p
	}
	p = egraph.Payload(len(attrTable.attrs))
	attrTable.attrs = append(attrTable.attrs, n)
	attrTable.ids[key] = p
	return p
}

// Attrs returns the attributes a payload stands for.
func Attrs(p egraph.Payload) (ir.Attrs, bool) {
	attrTable.RLock()
	defer attrTable.RUnlock()
	if uint64(p) >= uint64(len(attrTable.attrs)) {
		return ir.Attrs{}, false
	}
	return attrTable.attrs[p], true
}

// NodeOf is the e-node head of an ir node: its operator and payload.
func NodeOf(n *ir.Node) (egraph.Symbol, egraph.Payload) {
	return Symbol(n.Op), AttrPayload(n.Op, n.Attrs)
}

// Atom reads the atoms of patterns in rule files: an op name alone
// ("add"), or with attributes in brackets ("sum[axis=-1]",
// "reshape[to=[2,3]]", "cast[dtype=f16]", "softmax[axis=1]"). A bracket
// holding a payload variable ("sum[?p]") is handled by the pattern parser
// before the atom reaches here.
func Atom(tok string) (egraph.Symbol, egraph.Payload, error) {
	name, attrText, hasAttrs := strings.Cut(tok, "[")
	op, err := ir.ParseOp(name)
	if err != nil {
		return 0, 0, err
	}
	if !hasAttrs {
		return Symbol(op), 0, nil
	}
	if !strings.HasSuffix(attrText, "]") {
		return 0, 0, fmt.Errorf("unclosed attribute list in %q", tok)
	}
	a, err := parseAttrs(op, attrText[:len(attrText)-1])
	if err != nil {
		return 0, 0, err // the pattern parser names the token
	}
	return Symbol(op), AttrPayload(op, a), nil
}

// parseAttrs reads "k=v,k=v" where v is an integer, a float, a dtype name
// or a bracketed integer list.
func parseAttrs(op ir.Op, s string) (ir.Attrs, error) {
	var a ir.Attrs
	for s != "" {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			return a, fmt.Errorf("attribute %q without a value", s)
		}
		var v string
		if strings.HasPrefix(rest, "[") {
			end := strings.Index(rest, "]")
			if end < 0 {
				return a, fmt.Errorf("unclosed list for %s", k)
			}
			v, rest = rest[:end+1], rest[end+1:]
		} else if i := strings.Index(rest, ","); i >= 0 {
			v, rest = rest[:i], rest[i:]
		} else {
			v, rest = rest, ""
		}
		s = strings.TrimPrefix(rest, ",")
		if err := setAttr(&a, k, v); err != nil {
			return a, err
		}
	}
	if n := op.Normalize(a); fmt.Sprintf("%#v", n) != fmt.Sprintf("%#v", a) {
		return a, fmt.Errorf("%s does not take all of these attributes", op)
	}
	return a, nil
}

func ints(v string) ([]int64, error) {
	if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
		return nil, fmt.Errorf("want a [list], got %q", v)
	}
	body := strings.TrimSpace(v[1 : len(v)-1])
	if body == "" {
		return []int64{}, nil
	}
	var out []int64
	for _, f := range strings.Split(body, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad integer %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func setAttr(a *ir.Attrs, k, v string) error {
	var err error
	num := func() (float64, error) { return strconv.ParseFloat(v, 64) }
	switch k {
	case "axis":
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		a.Axis = int(n)
	case "to":
		var l []int64
		l, err = ints(v)
		for _, d := range l {
			a.To = append(a.To, ir.Dim(d))
		}
	case "perm":
		var l []int64
		l, err = ints(v)
		for _, d := range l {
			a.Perm = append(a.Perm, int(d))
		}
	case "starts":
		a.Starts, err = ints(v)
	case "ends":
		a.Ends, err = ints(v)
	case "steps":
		a.Steps, err = ints(v)
	case "before":
		a.Before, err = ints(v)
	case "after":
		a.After, err = ints(v)
	case "value":
		a.Value, err = num()
	case "dtype":
		a.DType, err = ir.ParseDType(v)
	case "eps":
		a.Eps, err = num()
	case "scale":
		a.Scale, err = num()
	case "offset":
		a.Offset, err = strconv.ParseInt(v, 10, 64)
	case "causal":
		a.Causal, err = strconv.ParseBool(v)
	case "block":
		a.Block, err = strconv.ParseInt(v, 10, 64)
	case "window":
		a.Window, err = strconv.ParseInt(v, 10, 64)
	default:
		return fmt.Errorf("unknown attribute %q", k)
	}
	if err != nil {
		return fmt.Errorf("attribute %s: %w", k, err)
	}
	return nil
}
