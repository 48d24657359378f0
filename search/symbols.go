package search

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/step"
)

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
	// The large buckets first: they cross the most tiles of a kernel.
	for _, b := range slices.Backward(s.Buckets()) {
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

// symbolBindings lists the values of g's symbols a program is run at:
// the values at names (each within its symbol's range) when at is given,
// else the verification points, symbol by symbol in step (a symbol with
// fewer points stays at its last). A graph without symbols runs once,
// with no binding.
func symbolBindings(g *ir.Graph, at map[string]int64, limit int) ([]map[string]int64, error) {
	if len(g.Symbols) == 0 {
		for name := range at {
			return nil, withKind(KindOption, fmt.Errorf("--dim %s=%d: the program has no runtime extent %s", name, at[name], name))
		}
		return []map[string]int64{nil}, nil
	}
	if len(at) > 0 {
		one := map[string]int64{}
		for name, v := range at {
			s, ok := g.Symbol(name)
			if !ok {
				return nil, withKind(KindOption, fmt.Errorf("--dim %s=%d: the program has no runtime extent %s (it has %s)", name, v, name, symbolsText(g.Symbols)))
			}
			if v < s.Lo || v > s.Hi {
				return nil, withKind(KindOption, fmt.Errorf("--dim %s=%d: outside the range the program was compiled for, %d..%d", name, v, s.Lo, s.Hi))
			}
			one[name] = v
		}
		for _, s := range g.Symbols {
			if _, ok := one[s.Name]; !ok {
				one[s.Name] = s.Lo
			}
		}
		return []map[string]int64{one}, nil
	}
	n := 1
	for _, s := range g.Symbols {
		n = max(n, len(verifyPoints(s, limit)))
	}
	out := make([]map[string]int64, n)
	for k := range out {
		out[k] = map[string]int64{}
		for _, s := range g.Symbols {
			pts := verifyPoints(s, limit)
			out[k][s.Name] = pts[min(k, len(pts)-1)]
		}
	}
	return out, nil
}

// symbolsText lists symbols as "NAME in [LO, HI]", "none" for none.
func symbolsText(ss []ir.Symbol) string {
	if len(ss) == 0 {
		return "none"
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return strings.Join(parts, ", ")
}

// bindSymbols sets the inputs of g's symbols in feeds to their values in
// binding.
func bindSymbols(g *ir.Graph, feeds map[string]*ir.Tensor, binding map[string]int64) error {
	for name, v := range binding {
		in, ok := g.SymbolInput(name)
		if !ok {
			return fmt.Errorf("internal error: symbol %s has no input", name)
		}
		t, err := ir.TensorOfInts(g.Node(in).DType, ir.Shape{}, v)
		if err != nil {
			return fmt.Errorf("symbol %s=%d: %w", name, v, err)
		}
		feeds[name] = t
	}
	return nil
}

// symbolText prints bound symbols as NAME=V, sorted by name.
func symbolText(bound map[string]int64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(bound)) {
		parts = append(parts, fmt.Sprintf("%s=%d", name, bound[name]))
	}
	return strings.Join(parts, " ")
}

// runAtSymbols runs check once per binding of symbolBindings, with the
// symbols' inputs in feeds set, and returns the worst of its results and
// the bindings it ran at as text ("" for a graph without symbols).
func runAtSymbols(g *ir.Graph, feeds map[string]*ir.Tensor, at map[string]int64, edges []int, check func() (float64, error)) (float64, string, error) {
	if l, err := step.LayoutOf(g); err != nil {
		return 0, "", err
	} else if l != nil && len(at) == 0 {
		return runAtStepPoints(*l, feeds, edges, check)
	}
	bindings, err := symbolBindings(g, at, maxVerifyPoints)
	if err != nil {
		return 0, "", err
	}
	worst := 0.0
	var texts []string
	for _, b := range bindings {
		if err := bindSymbols(g, feeds, b); err != nil {
			return 0, "", err
		}
		rel, err := check()
		if err != nil {
			if len(b) > 0 {
				return 0, "", fmt.Errorf("%w (at %s)", err, symbolText(b))
			}
			return 0, "", err
		}
		worst = max(worst, rel)
		if len(b) > 0 {
			texts = append(texts, symbolText(b))
		}
	}
	if len(texts) == 0 {
		return worst, "", nil
	}
	return worst, " at " + strings.Join(texts, ", "), nil
}

// runAtStepPoints is runAtSymbols for a serving step: check runs once per
// verification point (step.Layout.Points: one decode, all decodes, one
// long chunk, a mix, the maxima), each a whole batch of metadata in feeds.
func runAtStepPoints(l step.Layout, feeds map[string]*ir.Tensor, edges []int, check func() (float64, error)) (float64, string, error) {
	rng := rand.New(rand.NewPCG(uint64(l.MaxTokens), uint64(l.MaxSeqs)))
	pts, err := l.Points(rng)
	if err != nil {
		return 0, "", err
	}
	// And at the edges of the row buckets' kernels (bucketEdges) the
	// points above leave out, so that each kernel runs at the fewest and
	// the most rows it serves.
	covered := map[int]bool{}
	for _, p := range pts {
		covered[p.Batch.Tokens()] = true
	}
	var more []int
	for _, t := range edges {
		if !covered[t] {
			more = append(more, t)
		}
	}
	edgePts, err := l.PointsAt(rng, more)
	if err != nil {
		return 0, "", err
	}
	worst := 0.0
	var texts, edgeTs []string
	for i, p := range append(pts, edgePts...) {
		meta, err := l.Feeds(p.Batch)
		if err != nil {
			return 0, "", fmt.Errorf("internal error: step point %s: %w", p, err)
		}
		maps.Copy(feeds, meta)
		rel, err := check()
		if err != nil {
			return 0, "", fmt.Errorf("%w (at %s)", err, p)
		}
		worst = max(worst, rel)
		if i < len(pts) {
			texts = append(texts, p.String())
		} else {
			edgeTs = append(edgeTs, fmt.Sprint(p.Batch.Tokens()))
		}
	}
	where := " at " + strings.Join(texts, ", ")
	if len(edgeTs) > 0 {
		where += " and at its row buckets' edges (T=" + strings.Join(edgeTs, ", ") + ")"
	}
	return worst, where, nil
}

// maxVerifyPoints bounds the values of a symbol a program is verified at.
const maxVerifyPoints = 5

// checkExpect checks --expect against g: each range names a runtime
// extent of g and lies within the range it is compiled for.
func checkExpect(g *ir.Graph, expect map[string]ir.Symbol) error {
	for _, name := range slices.Sorted(maps.Keys(expect)) {
		e := expect[name]
		if l, err := step.LayoutOf(g); err == nil && l != nil && name == step.ContextName {
			if e.Lo < 0 || e.Lo > e.Hi || e.Hi > int64(l.MaxLen()-1) {
				return withKind(KindOption, fmt.Errorf("--expect %s=%d..%d: a sequence's context runs 0..%d in %s", name, e.Lo, e.Hi, l.MaxLen()-1, g.Name))
			}
			continue
		}
		s, ok := g.Symbol(name)
		if !ok {
			return withKind(KindOption, fmt.Errorf("--expect %s=%d..%d: %s has no runtime extent %s", name, e.Lo, e.Hi, g.Name, name))
		}
		if e.Lo < s.Lo || e.Hi > s.Hi || e.Lo > e.Hi {
			return withKind(KindOption, fmt.Errorf("--expect %s=%d..%d: outside the range %s is compiled for, %d..%d", name, e.Lo, e.Hi, name, s.Lo, s.Hi))
		}
	}
	return nil
}

// expectedRanges is where the cost model expects g's runtime positions:
// the ranges --expect gives, else each position's compiled range (a
// kernel body only knows the cache's capacity, so without this a decode
// step compiled for past in 512..8191 would be priced over 0..8191).
func expectedRanges(g *ir.Graph, expect map[string]ir.Symbol) map[string]ir.Symbol {
	if len(expect) > 0 {
		return expect
	}
	out := map[string]ir.Symbol{}
	for _, s := range g.Symbols {
		if s.Name == corpus.PastSymbol {
			out[s.Name] = s
		}
	}
	return out
}

// checkPlanExtents checks values given for runtime extents (--dim) against
// a compiled folder's plan before any work: each names a symbol of the
// plan and lies within its range.
func checkPlanExtents(pl *plan.Plan, at map[string]int64) error {
	for _, name := range slices.Sorted(maps.Keys(at)) {
		v := at[name]
		i := slices.IndexFunc(pl.Symbols, func(s plan.Symbol) bool { return s.Name == name })
		if i < 0 {
			return withKind(KindOption, fmt.Errorf("--dim %s=%d: the program has no runtime extent %s", name, v, name))
		}
		if s := pl.Symbols[i]; v < s.Lo || v > s.Hi {
			return withKind(KindOption, fmt.Errorf("--dim %s=%d: outside the range the program was compiled for, %d..%d", name, v, s.Lo, s.Hi))
		}
	}
	return nil
}

// bucketEdges are the numbers of tokens at the edges of the row buckets'
// kernels of a program's token launches: for each run of buckets that
// share a kernel, the fewest rows it serves and the most.
func bucketEdges(lp *lower.Program, ks []*cuda.Kernel) []int {
	var out []int
	seen := map[*cuda.Kernel]bool{}
	for i, l := range lp.Run {
		k := ks[len(lp.Prep)+i]
		if l.Rows == nil || l.Rows.Seqs || seen[k] {
			continue
		}
		seen[k] = true
		lo := int64(1)
		for j, b := range k.Buckets {
			if j+1 < len(k.Buckets) && k.Buckets[j+1].Kernel == b.Kernel {
				continue
			}
			out = append(out, int(lo), int(b.Hi))
			lo = b.Hi + 1
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
