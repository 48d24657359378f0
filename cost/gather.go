package cost

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/lumsearch/lumsearch/ir"
)

// A gathered epilogue reads a matrix-vector product at other columns than
// the one it writes: rotary embedding's rotate-half pairs column d of a
// head with column d ± size/2 of the same head, and a gate and up
// projection merged into one matmul (rules' merge-matmuls) multiply column
// n by column n + N/2 after the SiLU. The matrix-vector kernel holds a
// block's columns in shared memory once their sums are reduced, so its
// epilogue may read any of them; it needs only a block to own every column
// an output element reads. Columns are dealt out in groups: column n sits
// at position pos(n) = (n / (P I)) I + n % I and part p(n) = (n / I) % P,
// and a block owns BN/P consecutive positions in each of the P parts. A
// rotate-half over heads of 128 is P = 2, I = 64 (columns d and d + 64 of
// a head share a position); a gate and up merge over N = 2 x 14336 is
// P = 2, I = 14336. An epilogue that reads only its own columns (slices of
// a merged QKV projection) has P = 1, the plain layout.
//
// Each output element is written by the block owning its direct source:
// the one product element that reaches it through views, slices, casts and
// elementwise ops alone (DirectPath), not through a concat or a pad.

// ColumnMap deals a matrix-vector kernel's columns to its blocks (see
// above). The zero value is the plain layout: block b owns columns b BN
// to (b+1) BN.
type ColumnMap struct {
	P, I int64
}

// Plain reports whether the map is the plain layout.
func (c ColumnMap) Plain() bool { return c.P <= 1 }

// Pos is column n's position: the columns that share it go to one block.
func (c ColumnMap) Pos(n int64) int64 {
	if c.Plain() {
		return n
	}
	return n/(c.P*c.I)*c.I + n%c.I
}

// Column is the column at position pos in part p (the inverse of Pos and
// the part).
func (c ColumnMap) Column(pos, p int64) int64 {
	if c.Plain() {
		return pos
	}
	return pos/c.I*c.P*c.I + p*c.I + pos%c.I
}

// Fits reports whether a matrix-vector schedule with BN columns a block,
// vec of them per 16-byte load of a row-major weight (1 over a
// K-contiguous one), deals whole groups: BN/P positions in each part, and
// no 16-byte load straddling two parts or two runs of I columns.
func (c ColumnMap) Fits(bn, vec int) bool {
	if c.Plain() {
		return true
	}
	v := int64(vec)
	return int64(bn)%c.P == 0 && (int64(bn)/c.P)%v == 0 && c.I%v == 0
}

// maxGatherElements bounds the product a gathered epilogue is checked over
// element by element: a matrix-vector product of up to GEMVRows rows of a
// large vocabulary.
const maxGatherElements = 1 << 21

// Gathered is a matmul body whose epilogue reads the product at other
// positions than its own (slices, concats, outputs of other sizes than the
// product): the column map that keeps each output element's reads in one
// block, and each output's direct path. An epilogue that keeps every
// element in place (epilogueStructure) but writes through windows is
// gathered with the plain map.
type Gathered struct {
	Map ColumnMap
	// Paths[j] is output j's direct path: the nodes after the matmul up
	// to and including the output's value, each reading the one before.
	Paths [][]ir.Value
}

// GatheredEpilogue checks a matmul body's epilogue as the matrix-vector
// kernel gathers it (see above) and finds its column map. It refuses an
// epilogue other than views, slices, concats, pads, casts and elementwise
// ops; a product of more rows than GEMVRows, or batched; an output without
// a direct path; and reads that no column map keeps in one block with
// the direct source (each element checked: the body's shapes are static).
func GatheredEpilogue(body *ir.Graph, mm ir.Value) (*Gathered, error) {
	// A body is priced many times (each schedule, each bucket of a
	// runtime extent) and checked element by element: the result is kept
	// while the body lives.
	key := weak.Make(body)
	gatherMemo.Lock()
	r, ok := gatherMemo.m[key]
	gatherMemo.Unlock()
	if ok && r.mm == mm {
		return r.g, r.err
	}
	g, err := gatheredEpilogue(body, mm)
	gatherMemo.Lock()
	if gatherMemo.m == nil {
		gatherMemo.m = map[weak.Pointer[ir.Graph]]gatherResult{}
	}
	if _, ok := gatherMemo.m[key]; !ok {
		runtime.AddCleanup(body, func(k weak.Pointer[ir.Graph]) {
			gatherMemo.Lock()
			delete(gatherMemo.m, k)
			gatherMemo.Unlock()
		}, key)
	}
	gatherMemo.m[key] = gatherResult{mm: mm, g: g, err: err}
	gatherMemo.Unlock()
	return g, err
}

type gatherResult struct {
	mm  ir.Value
	g   *Gathered
	err error
}

// gatherMemo holds GatheredEpilogue's results by body, each dropped when
// its body is collected.
var gatherMemo struct {
	sync.Mutex
	m map[weak.Pointer[ir.Graph]]gatherResult
}

func gatheredEpilogue(body *ir.Graph, mm ir.Value) (*Gathered, error) {
	mn := body.Node(mm)
	r := len(mn.Shape)
	if r < 2 {
		return nil, fmt.Errorf("a gathered epilogue of a matmul of rank %d", r)
	}
	M, N := int64(mn.Shape[r-2]), int64(mn.Shape[r-1])
	if M > GEMVRows || mn.Shape.NumElements() != M*N {
		return nil, fmt.Errorf("a gathered epilogue (slices, concats or outputs of other sizes after the matmul) of a %v product: only a matrix-vector kernel of at most %d rows, unbatched, gathers its epilogue", mn.Shape, GEMVRows)
	}
	if M*N > maxGatherElements {
		return nil, fmt.Errorf("a gathered epilogue of a %v product, past the %d elements it is checked over", mn.Shape, maxGatherElements)
	}
	after := make([]bool, len(body.Nodes))
	after[mm] = true
	for i, n := range body.Nodes {
		for _, in := range n.Inputs {
			after[i] = after[i] || after[in]
		}
		if !after[i] || ir.Value(i) == mm {
			continue
		}
		switch n.Op.Class() {
		case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		default:
			switch n.Op {
			case ir.OpReshape, ir.OpPermute, ir.OpCast, ir.OpSlice, ir.OpConcat, ir.OpPad, ir.OpExpand:
			default:
				return nil, fmt.Errorf("a matmul kernel with a %s after its matmul (a gathered epilogue holds views, slices, concats, pads and elementwise ops)", n.Op)
			}
		}
	}
	g := &Gathered{}
	for j, o := range body.Outputs {
		if !after[o.Value] {
			return nil, fmt.Errorf("a matmul kernel whose output %d does not read its matmul", j)
		}
		p, err := DirectPath(body, mm, o.Value)
		if err != nil {
			return nil, fmt.Errorf("a matmul kernel output %d: %w", j, err)
		}
		g.Paths = append(g.Paths, p)
	}
	// Every product element forwarded along each direct path: the
	// columns its output element reads, beside its own.
	type pair struct{ own, read int64 }
	var pairs []pair
	src := make([]int64, 0, 8)
	at := func(e int64) []int64 {
		// The product's element e (its batch axes, all of extent 1, at 0).
		ix := make([]int64, r)
		ix[r-2], ix[r-1] = e/N, e%N
		return ix
	}
	for j, path := range g.Paths {
		for e := range M * N {
			ix, ok := forwardConcrete(body, mm, path, at(e))
			if !ok {
				continue
			}
			src = src[:0]
			if err := productReads(body, mm, after, body.Outputs[j].Value, ix, func(f int64) { src = append(src, f) }); err != nil {
				return nil, fmt.Errorf("a matmul kernel output %d: %w", j, err)
			}
			for _, f := range src {
				if f/N != e/N {
					return nil, fmt.Errorf("a matmul kernel output %d reads row %d of the product into an element of row %d", j, f/N, e/N)
				}
				if f%N != e%N {
					pairs = append(pairs, pair{e % N, f % N})
				}
			}
		}
	}
	if len(pairs) == 0 {
		return g, nil
	}
	// The column map: runs of I columns, P of them a group, where every
	// distance is a multiple of I and shorter than a group; the widest
	// runs that keep every pair at one position.
	d, far := int64(0), int64(0)
	for _, p := range pairs {
		dist := p.read - p.own
		if dist < 0 {
			dist = -dist
		}
		d, far = gcd(d, dist), max(far, dist)
	}
	for I := d; I >= 1; I-- {
		if d%I != 0 {
			continue
		}
		for P := far/I + 1; P*I <= N; P++ {
			if N%(P*I) != 0 {
				continue
			}
			m := ColumnMap{P: P, I: I}
			if !slices.ContainsFunc(pairs, func(p pair) bool { return m.Pos(p.own) != m.Pos(p.read) }) {
				g.Map = m
				return g, nil
			}
		}
	}
	return nil, fmt.Errorf("a gathered epilogue reading columns up to %d apart over %d columns: no grouping of columns into blocks holds each element's reads together", far, N)
}

// DirectPath is the way from a product mm to an output value out that the
// gathered epilogue writes by: the first (in body order) chain of nodes,
// each reading the one before, through permutes, reshapes, slices, casts
// and elementwise ops of the same shape, without a concat, pad or
// broadcast. It lists the nodes after mm up to and including out.
func DirectPath(body *ir.Graph, mm, out ir.Value) ([]ir.Value, error) {
	reaches := make([]bool, len(body.Nodes))
	reaches[out] = true
	for i := len(body.Nodes) - 1; i >= 0; i-- {
		if reaches[i] {
			for _, in := range body.Nodes[i].Inputs {
				reaches[in] = true
			}
		}
	}
	var walk func(cur ir.Value, path []ir.Value) []ir.Value
	walk = func(cur ir.Value, path []ir.Value) []ir.Value {
		if cur == out {
			return path
		}
		for i := int(cur) + 1; i < len(body.Nodes); i++ {
			n := body.Nodes[i]
			if !reaches[i] || !slices.Contains(n.Inputs, cur) {
				continue
			}
			switch {
			case n.Op == ir.OpPermute, n.Op == ir.OpReshape, n.Op == ir.OpSlice:
			case n.Op == ir.OpCast, n.Op.Class() == ir.ClassUnary, n.Op.Class() == ir.ClassBinary, n.Op.Class() == ir.ClassCompare, n.Op.Class() == ir.ClassSelect:
				if !n.Shape.Equal(body.Node(cur).Shape) {
					continue
				}
			default:
				continue
			}
			if p := walk(ir.Value(i), append(path, ir.Value(i))); p != nil {
				return p
			}
		}
		return nil
	}
	p := walk(mm, nil)
	if p == nil && mm != out {
		return nil, fmt.Errorf("no way from the product to the output through views, slices and elementwise ops alone (every output element needs one product element that it is written with)")
	}
	return p, nil
}

// forwardConcrete carries the product's element ix along path: the
// output element it becomes, or false where a slice leaves it out.
func forwardConcrete(body *ir.Graph, mm ir.Value, path []ir.Value, ix []int64) ([]int64, bool) {
	cur := mm
	ix = slices.Clone(ix)
	for _, v := range path {
		n := body.Node(v)
		switch n.Op {
		case ir.OpPermute:
			out := make([]int64, len(ix))
			for d, p := range n.Attrs.Perm {
				out[d] = ix[p]
			}
			ix = out
		case ir.OpReshape:
			ix = unflatten(n.Shape, flatten(body.Node(cur).Shape, ix))
		case ir.OpSlice:
			for d := range ix {
				start, step := n.Attrs.Starts[d], n.Attrs.Steps[d]
				if ix[d] < start || (ix[d]-start)%step != 0 {
					return nil, false
				}
				ix[d] = (ix[d] - start) / step
				if ix[d] >= int64(n.Shape[d]) {
					return nil, false
				}
			}
		}
		cur = v
	}
	return ix, true
}

// productReads calls read with the flat index of every element of the
// product mm that value v's element ix is computed from.
func productReads(body *ir.Graph, mm ir.Value, after []bool, v ir.Value, ix []int64, read func(int64)) error {
	if v == mm {
		read(flatten(body.Node(mm).Shape, ix))
		return nil
	}
	if !after[v] {
		return nil // not computed from the product
	}
	n := body.Node(v)
	in := func(k int) ir.Shape { return body.Node(n.Inputs[k]).Shape }
	switch n.Op.Class() {
	case ir.ClassLeaf:
		return nil
	case ir.ClassUnary, ir.ClassBinary, ir.ClassCompare, ir.ClassSelect:
		for _, k := range n.Inputs {
			if err := productReads(body, mm, after, k, ix, read); err != nil {
				return err
			}
		}
		return nil
	}
	switch n.Op {
	case ir.OpCast:
		return productReads(body, mm, after, n.Inputs[0], ix, read)
	case ir.OpReshape:
		return productReads(body, mm, after, n.Inputs[0], unflatten(in(0), flatten(n.Shape, ix)), read)
	case ir.OpPermute:
		kix := make([]int64, len(ix))
		for d, p := range n.Attrs.Perm {
			kix[p] = ix[d]
		}
		return productReads(body, mm, after, n.Inputs[0], kix, read)
	case ir.OpExpand:
		src := in(0)
		kix := make([]int64, len(src))
		for d := range src {
			if src[d] != 1 {
				kix[d] = ix[d]
			}
		}
		return productReads(body, mm, after, n.Inputs[0], kix, read)
	case ir.OpSlice:
		kix := make([]int64, len(ix))
		for d := range ix {
			kix[d] = n.Attrs.Starts[d] + ix[d]*n.Attrs.Steps[d]
		}
		return productReads(body, mm, after, n.Inputs[0], kix, read)
	case ir.OpPad:
		kix := make([]int64, len(ix))
		for d := range ix {
			kix[d] = ix[d] - n.Attrs.Before[d]
			if kix[d] < 0 || kix[d] >= int64(in(0)[d]) {
				return nil
			}
		}
		return productReads(body, mm, after, n.Inputs[0], kix, read)
	case ir.OpConcat:
		ax := n.Attrs.Axis
		if ax < 0 {
			ax += len(n.Shape)
		}
		off := int64(0)
		for k := range n.Inputs {
			size := int64(in(k)[ax])
			if ix[ax] < off+size {
				kix := slices.Clone(ix)
				kix[ax] -= off
				return productReads(body, mm, after, n.Inputs[k], kix, read)
			}
			off += size
		}
		return nil
	}
	return fmt.Errorf("a %s in a gathered epilogue", n.Op)
}

func flatten(shape ir.Shape, ix []int64) int64 {
	f := int64(0)
	for d := range shape {
		f = f*int64(shape[d]) + ix[d]
	}
	return f
}

func unflatten(shape ir.Shape, f int64) []int64 {
	ix := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		ix[d] = f % int64(shape[d])
		f /= int64(shape[d])
	}
	return ix
}

// WritesWindows reports whether some output of body is written through a
// window into a larger buffer (lower.Window's output name, "out0 into
// ..."): of the matmul forms, only the matrix-vector kernel's gathered
// epilogue stores those.
func WritesWindows(body *ir.Graph) bool {
	for _, o := range body.Outputs {
		if strings.Contains(o.Name, " into ") {
			return true
		}
	}
	return false
}

// GatheredSchedule is the first matrix-vector schedule, in the order the
// model lists them, that prints body's gathered epilogue (the schedule
// such a body prints in when none is given); false when body's matmul mm
// has no gathered epilogue the matrix-vector kernel runs.
func GatheredSchedule(body *ir.Graph, mm ir.Value) (Schedule, bool) {
	g, err := GatheredEpilogue(body, mm)
	if err != nil {
		return Schedule{}, false
	}
	k := &kernelForm{body: body, form: FormMatMul, matmuls: []ir.Value{mm}}
	if s := k.gatheredSchedules(g); len(s) > 0 {
		return s[0], true
	}
	return Schedule{}, false
}

// gatheredSchedules lists the matrix-vector schedules that print a
// gathered epilogue g: blocks that hold its column groups (ColumnMap.Fits)
// and whose chunk of A and partials fit the shared memory the printer
// declares for them.
func (k *kernelForm) gatheredSchedules(g *Gathered) []Schedule {
	var out []Schedule
	if q, ok := GEMVQuantWeight(k.body, k.matmuls[0]); ok {
		// A quantized weight's (a merged gate and up projection's
		// packed parts): a thread's columns in one group.
		for _, s := range k.gemvQuantSchedules(q) {
			if p, ok := k.gemvQuantPlan(q, s); ok && g.Map.Fits(s.BN, q.LaneColumns()) && p.shared <= GEMVSharedLimit {
				out = append(out, s)
			}
		}
		return out
	}
	M, _, K, _, _, kContiguous, ok := k.gemvShape()
	if !ok {
		return nil
	}
	for _, s := range k.gemvSchedules() {
		partials := s.Threads / 32
		if kContiguous {
			_, split, _ := GEMVLayout(s)
			partials = split
		}
		if g.Map.Fits(s.BN, k.gemvVec()) && GEMVShared(int64(M), int64(K), s.BN, partials) <= GEMVSharedLimit {
			out = append(out, s)
		}
	}
	return out
}
