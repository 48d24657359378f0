package ir

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Canonical puts a kernel body in canonical form, so that bodies computing
// the same thing up to the order of commutative operands, the numbering of
// arguments and repeated subterms print, hash and intern alike:
//   - operands of commutative ops are sorted by a structure key (a hash
//     of the operand's tree) that ignores which argument is which;
//   - arguments are renamed $0, $1, ... in order of first use, walking the
//     outputs in order and operands in sorted order;
//   - equal subterms are merged.
//
// The body's inputs are its arguments. Canonical returns the new body and
// order, where order[i] is the index (among body.Inputs()) of the argument
// that became $i; unused arguments are dropped. Two operands whose
// structure keys tie (equal trees, or a hash collision) keep their relative
// order, so bodies that differ only there may stay distinct: a missed
// merge, never a wrong one.
func Canonical(body *Graph) (*Graph, []int, error) {
	if err := body.Check(); err != nil {
		return nil, nil, fmt.Errorf("canonical: %w", err)
	}
	argIndex := map[Value]int{}
	for i, v := range body.Inputs() {
		argIndex[v] = i
	}
	// Structure keys, arguments anonymous: a hash of each node's op,
	// attributes, type and operands' keys (sorted for a commutative op).
	// Printing the structure instead costs the printed tree of every
	// operand, which repeated subterms make grow with each level.
	keys := make([]uint64, len(body.Nodes))
	attrs := make([]string, len(body.Nodes)) // each node's normalized attributes, printed
	var kids []uint64
	for i, n := range body.Nodes {
		h := newStructHash()
		if n.Op == OpInput {
			h.str("$")
		} else {
			attrs[i] = attrsKey(n)
			h.str(n.Op.String())
			h.str(attrs[i])
		}
		h.str(n.DType.String())
		h.u64(uint64(len(n.Shape)))
		for _, d := range n.Shape {
			h.u64(uint64(d))
		}
		if n.Op != OpInput {
			kids = kids[:0]
			for _, in := range n.Inputs {
				kids = append(kids, keys[in])
			}
			if commutative(n.Op) {
				slices.Sort(kids)
			}
			h.u64(uint64(len(kids)))
			for _, k := range kids {
				h.u64(k)
			}
		}
		keys[i] = uint64(h)
	}
	operands := func(n *Node) []Value {
		ins := slices.Clone(n.Inputs)
		if commutative(n.Op) {
			slices.SortStableFunc(ins, func(a, b Value) int { return cmp.Compare(keys[a], keys[b]) })
		}
		return ins
	}
	// Number arguments by first use.
	var order []int
	seen := map[Value]bool{}
	var number func(v Value)
	number = func(v Value) {
		if seen[v] {
			return
		}
		seen[v] = true
		n := body.Nodes[v]
		if n.Op == OpInput {
			order = append(order, argIndex[v])
			return
		}
		for _, in := range operands(n) {
			number(in)
		}
	}
	for _, o := range body.Outputs {
		number(o.Value)
	}
	// Rebuild with the new names, merging equal subterms.
	b := NewBuilder("kernel")
	newArg := map[int]Value{}
	for i, a := range order {
		n := body.Nodes[body.Inputs()[a]]
		newArg[a] = b.Input(fmt.Sprintf("$%d", i), n.DType, n.Shape...)
	}
	exact := map[string]Value{}
	built := map[Value]Value{}
	var build func(v Value) Value
	build = func(v Value) Value {
		if nv, ok := built[v]; ok {
			return nv
		}
		n := body.Nodes[v]
		var nv Value
		if n.Op == OpInput {
			nv = newArg[argIndex[v]]
		} else {
			ins := operands(n)
			args := make([]Value, len(ins))
			for k, in := range ins {
				args[k] = build(in)
			}
			key := subtermKey(n.Op, attrs[v], args)
			if prev, ok := exact[key]; ok {
				nv = prev
			} else {
				nv = b.Apply(n.Op, n.Attrs, args...)
				exact[key] = nv
			}
		}
		built[v] = nv
		return nv
	}
	for i, o := range body.Outputs {
		b.Output(fmt.Sprintf("out%d", i), build(o.Value))
	}
	g, err := b.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("canonical: %w", err)
	}
	return g, order, nil
}

// zeroAttrs is how Canonical's keys print the attributes of an op that
// uses none, which is most of a kernel body's ops: printing them with
// reflection each time was most of Canonical's time.
var zeroAttrs = fmt.Sprintf("%#v", Attrs{})

// attrsKey prints a node's normalized attributes for Canonical's keys.
// The print is remembered by an exact binary encoding of the attributes,
// since a search canonicalizes the same few attribute sets many times.
func attrsKey(n *Node) string {
	if n.Op.Valid() && ops[n.Op].attrs == 0 && n.Op.Class() != ClassLeaf {
		return zeroAttrs
	}
	a := n.Op.Normalize(n.Attrs)
	key := string(encodeAttrs(nil, &a))
	if s, ok := attrsPrinted.Load(key); ok {
		return s.(string)
	}
	s := fmt.Sprintf("%#v", a)
	if attrsRemembered.Add(1) <= maxAttrsRemembered {
		attrsPrinted.Store(key, s)
	}
	return s
}

// attrsPrinted maps encodeAttrs's bytes to the attributes' %#v print, for
// up to maxAttrsRemembered attribute sets in a process.
var (
	attrsPrinted       sync.Map
	attrsRemembered    atomic.Int64
	maxAttrsRemembered = int64(1 << 16)
)

// encodeAttrs appends an exact encoding of a: two attribute sets encode
// alike only when every field is equal (floats by their bits, slices by
// length, nil apart from empty, and elements).
func encodeAttrs(b []byte, a *Attrs) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	length := func(n int, isNil bool) {
		if isNil {
			u(0)
		} else {
			u(uint64(n) + 1)
		}
	}
	length(len(a.Name), false)
	b = append(b, a.Name...)
	length(len(a.Data), a.Data == nil)
	for _, v := range a.Data {
		u(math.Float64bits(v))
	}
	length(len(a.Ints), a.Ints == nil)
	for _, v := range a.Ints {
		u(uint64(v))
	}
	u(uint64(a.Axis))
	length(len(a.To), a.To == nil)
	for _, d := range a.To {
		u(uint64(d))
	}
	length(len(a.Perm), a.Perm == nil)
	for _, v := range a.Perm {
		u(uint64(v))
	}
	for _, s := range [][]int64{a.Starts, a.Ends, a.Steps, a.Before, a.After} {
		length(len(s), s == nil)
		for _, v := range s {
			u(uint64(v))
		}
	}
	u(math.Float64bits(a.Value))
	u(uint64(a.DType))
	u(math.Float64bits(a.Eps))
	u(math.Float64bits(a.Scale))
	if a.Causal {
		u(1)
	} else {
		u(0)
	}
	u(uint64(a.Offset))
	if a.Block != 0 || a.Window != 0 {
		// Only paged attention has them: every other body's encoding
		// (and digest) is what it was before they existed.
		u(uint64(a.Block))
		u(uint64(a.Window))
	}
	if a.TopK != 0 || a.Gating != 0 || a.Limit != 0 {
		// Likewise only the mixture-of-experts ops.
		u(uint64(a.TopK))
		u(uint64(a.Gating))
		u(math.Float64bits(a.Limit))
	}
	if a.Format != 0 || a.Group != 0 || a.GroupN != 0 {
		// Likewise only dequant.
		u(uint64(a.Format))
		u(uint64(a.Group))
		u(uint64(a.GroupN))
	}
	return b
}

// subtermKey identifies a rebuilt node for merging equal subterms: its op,
// its printed attributes and its rebuilt operands.
func subtermKey(op Op, attrs string, args []Value) string {
	b := make([]byte, 0, len(attrs)+16+8*len(args))
	b = append(b, op.String()...)
	b = append(b, attrs...)
	for _, a := range args {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(a), 10)
	}
	return string(b)
}

// structHash is Canonical's structure key under construction: 64-bit
// FNV-1a over what it is fed, each string ended so that two strings cannot
// run into each other.
type structHash uint64

func newStructHash() structHash { return 14695981039346656037 }

func (h *structHash) byte(b byte) { *h = (*h ^ structHash(b)) * 1099511628211 }

func (h *structHash) str(s string) {
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
	h.byte(0)
}

func (h *structHash) u64(v uint64) {
	for range 8 {
		h.byte(byte(v))
		v >>= 8
	}
}

// commutative ops take their operands in any order.
func commutative(op Op) bool {
	switch op {
	case OpAdd, OpMul, OpMax, OpMin, OpAnd, OpOr, OpEq, OpNe:
		return true
	}
	return false
}
