package search

import (
	"fmt"
	"slices"

	"github.com/lumsearch/lumsearch/ir"
)

// Buckets are the geometric buckets of a symbol's range, the extents the
// cost model prices a program at and the report shows: powers of two
// between the range's ends, the ends included. A range of one value is
// one bucket.
func Buckets(s ir.Symbol) []int64 {
	out := []int64{s.Lo}
	for b := int64(1); b < s.Hi; b *= 2 {
		if b > s.Lo {
			out = append(out, b)
		}
	}
	if s.Hi > s.Lo {
		out = append(out, s.Hi)
	}
	return out
}

// verifyPoints are the values of a symbol a program is verified at: the
// range's ends, the bucket edges, and an odd value inside the range (one
// that no power of two or tile size divides), at most limit of them,
// the ends always among them.
func verifyPoints(s ir.Symbol, limit int) []int64 {
	pts := []int64{s.Lo, s.Hi}
	if odd := s.Lo + (s.Hi-s.Lo)*5/9; odd > s.Lo && odd < s.Hi {
		if odd%2 == 0 && odd+1 < s.Hi {
			odd++
		}
		pts = append(pts, odd)
	}
	for _, b := range Buckets(s) {
		if len(pts) >= limit {
			break
		}
		if !slices.Contains(pts, b) {
			pts = append(pts, b)
		}
	}
	slices.Sort(pts)
	return slices.Compact(pts)
}

// bindSymbols sets each of g's symbols' inputs in feeds to the point'th
// of its verification points (the last one once a symbol has no more).
func bindSymbols(g *ir.Graph, feeds map[string]*ir.Tensor, point, limit int) (map[string]int64, error) {
	bound := map[string]int64{}
	for _, s := range g.Symbols {
		pts := verifyPoints(s, limit)
		v := pts[min(point, len(pts)-1)]
		in, ok := g.SymbolInput(s.Name)
		if !ok {
			return nil, fmt.Errorf("internal error: symbol %s has no input", s)
		}
		t, err := ir.TensorOfInts(g.Node(in).DType, ir.Shape{}, v)
		if err != nil {
			return nil, fmt.Errorf("symbol %s=%d: %w", s.Name, v, err)
		}
		feeds[s.Name] = t
		bound[s.Name] = v
	}
	return bound, nil
}

// symbolPointCount is how many verification runs cover every symbol's
// points.
func symbolPointCount(g *ir.Graph, limit int) int {
	n := 1
	for _, s := range g.Symbols {
		n = max(n, len(verifyPoints(s, limit)))
	}
	return n
}
