package cuda

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/require"
)

// Saturating a corpus graph with every rule set is the costliest step of
// several tests, and several times slower under the race detector; tests
// that need the same graph saturated the same way share one saturation
// through these caches, once per test binary. What they hand out is read
// only (payload lists, lowered and printed programs), never the e-graph,
// whose Find compresses paths as it reads and so may not be shared by
// tests running in parallel.

// onceCache computes each key's value once, however many tests ask for it
// at the same time.
type onceCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*onceEntry[V]
}

type onceEntry[V any] struct {
	once sync.Once
	v    V
	err  error
}

// get returns key's value, computing it with f on the first call.
func (c *onceCache[K, V]) get(key K, f func() (V, error)) (V, error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[K]*onceEntry[V]{}
	}
	e := c.m[key]
	if e == nil {
		e = &onceEntry[V]{}
		c.m[key] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.v, e.err = f() })
	return e.v, e.err
}

// everyRuleSet is the rewrites of every rule set.
func everyRuleSet() ([]*egraph.Rewrite[rules.Data], error) {
	var rws []*egraph.Rewrite[rules.Data]
	for _, s := range rules.Sets() {
		r, err := rules.SetRewrites(s)
		if err != nil {
			return nil, fmt.Errorf("rule set %s: %w", s, err)
		}
		rws = append(rws, r...)
	}
	return rws, nil
}

type kernelsKey struct {
	name string
	dt   ir.DType
}

var kernelsCache onceCache[kernelsKey, []egraph.Payload]

// corpusKernels returns the distinct kernel payloads of the e-graph of
// corpus graph name in dtype dt (seq 4, 2 past tokens) saturated with every
// rule set for 6 iterations or 30,000 e-nodes, ordered by their bodies'
// text: an order that does not depend on which test interned a body first.
func corpusKernels(t *testing.T, name string, dt ir.DType) []egraph.Payload {
	t.Helper()
	pays, err := kernelsCache.get(kernelsKey{name, dt}, func() ([]egraph.Payload, error) {
		g, err := corpus.Build(name, corpus.Options{Seq: 4, Past: 2, DType: dt})
		if err != nil {
			return nil, err
		}
		rws, err := everyRuleSet()
		if err != nil {
			return nil, err
		}
		prog, err := rules.Saturate(context.Background(), g, rws, rules.SaturateOptions{IterLimit: 6, NodeLimit: 30_000})
		if err != nil {
			return nil, fmt.Errorf("saturate %s %s: %w", name, dt, err)
		}
		eg := prog.EGraph
		seen := map[egraph.Payload]bool{}
		var pays []egraph.Payload
		text := map[egraph.Payload]string{}
		for _, c := range eg.Classes() {
			for _, id := range eg.ClassNodes(c) {
				n := eg.Node(id)
				if n.Op != rules.KernelSymbol || seen[n.Payload] {
					continue
				}
				seen[n.Payload] = true
				body, ok := rules.Spec(n.Payload)
				if !ok {
					return nil, fmt.Errorf("%s %s: kernel payload %v has no body", name, dt, n.Payload)
				}
				pays = append(pays, n.Payload)
				text[n.Payload] = body.String()
			}
		}
		slices.SortFunc(pays, func(a, b egraph.Payload) int { return strings.Compare(text[a], text[b]) })
		return pays, nil
	})
	require.NoError(t, err)
	return slices.Clone(pays)
}

// fusedProgram is a corpus graph's program: the graph, its lowering and
// its printed launches.
type fusedProgram struct {
	g  *ir.Graph
	lp *lower.Program
	ks []*Kernel
}

var fusedCache onceCache[string, fusedProgram]

// corpusFused returns the program of corpus graph name (seq 5 and 3 past
// tokens, sizes no tile divides) that SaturateModel extracts with every
// rule set after 8 iterations or 40,000 e-nodes, lowered and printed.
// Under -short it stops after 3 iterations: the programs of the graphs the
// short tests take (tiny-llama:decode and :step, tiny-gpt2:block and
// :model) are byte for byte the same, and the iterations after the third
// cost most of the saturation (tens of seconds for GPT-2's whole model
// under the race detector). Callers must not modify it.
func corpusFused(t *testing.T, name string) fusedProgram {
	t.Helper()
	p, err := fusedCache.get(name, func() (fusedProgram, error) {
		g, err := corpus.Build(name, corpus.Options{Seq: 5, Past: 3})
		if err != nil {
			return fusedProgram{}, err
		}
		rws, err := everyRuleSet()
		if err != nil {
			return fusedProgram{}, err
		}
		iters := 8
		if testing.Short() {
			iters = 3
		}
		prog, err := rules.SaturateModel(context.Background(), g, rws, rules.SaturateOptions{IterLimit: iters, NodeLimit: 40_000})
		if err != nil {
			return fusedProgram{}, fmt.Errorf("saturate %s: %w", name, err)
		}
		lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
		if err != nil {
			return fusedProgram{}, fmt.Errorf("lower %s: %w", name, err)
		}
		ks, err := PrintProgram(lp)
		if err != nil {
			return fusedProgram{}, fmt.Errorf("print %s: %w", name, err)
		}
		return fusedProgram{g, lp, ks}, nil
	})
	require.NoError(t, err)
	return p
}
