package egraph

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// reportSize adds e-nodes per second and bytes per e-node (heap in use after
// a GC, divided by e-nodes) to a benchmark's output.
func reportSize[D any](b *testing.B, g *EGraph[D], elapsed time.Duration, heapBefore uint64) {
	b.Helper()
	b.ReportMetric(float64(g.NumNodes())*float64(b.N)/elapsed.Seconds(), "e-nodes/s")
	b.ReportMetric(float64(g.NumNodes()), "e-nodes")
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc-min(heapBefore, ms.HeapAlloc))/float64(g.NumNodes()), "bytes/e-node")
	runtime.KeepAlive(g)
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func benchAC(b *testing.B, terms int, sched func() Scheduler) {
	benchACRules(b, terms, sched, acRules(b))
}

func benchACRules(b *testing.B, terms int, sched func() Scheduler, rules []*Rewrite[NoData]) {
	benchACWorkers(b, terms, sched, rules, 1)
}

func benchACWorkers(b *testing.B, terms int, sched func() Scheduler, rules []*Rewrite[NoData], workers int) {
	src := acTerm(terms)
	var g *EGraph[NoData]
	heap := heapInUse()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		g = NewPlain()
		if _, err := g.AddExpr(src); err != nil {
			b.Fatal(err)
		}
		r := Runner[NoData]{IterLimit: 100, NodeLimit: 100_000_000, TimeLimit: time.Hour, Scheduler: sched(), Workers: workers}
		rep, err := r.Run(context.Background(), g, rules)
		if err != nil || rep.Stop != Saturated {
			b.Fatalf("stop %v err %v", rep.Stop, err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportSize(b, g, elapsed, heap)
}

// BenchmarkAC7 is the associativity-commutativity check: the two two-way
// rules (four rewrites) saturating (+ 1 (+ 2 ... 7)) into 127 classes.
func BenchmarkAC7(b *testing.B) { benchAC(b, 7, func() Scheduler { return SimpleScheduler{} }) }

// BenchmarkAC7Parallel is BenchmarkAC7 with rules searched on two
// goroutines.
func BenchmarkAC7Parallel(b *testing.B) {
	benchACWorkers(b, 7, func() Scheduler { return SimpleScheduler{} }, acRules(b), 2)
}

// BenchmarkAC7EggRules is the same saturation with the rules of egg's own
// math_associate_adds test, which egg's timing refers to: one-way
// commutativity and associativity.
func BenchmarkAC7EggRules(b *testing.B) {
	rules := []*Rewrite[NoData]{
		MustParseRewrite[NoData]("comm-add", "(+ ?a ?b)", "(+ ?b ?a)"),
		MustParseRewrite[NoData]("assoc-add", "(+ ?a (+ ?b ?c))", "(+ (+ ?a ?b) ?c)"),
	}
	benchACRules(b, 7, func() Scheduler { return SimpleScheduler{} }, rules)
}
func BenchmarkAC7Backoff(b *testing.B) {
	benchAC(b, 7, func() Scheduler { return NewBackoffScheduler() })
}
func BenchmarkAC8(b *testing.B) { benchAC(b, 8, func() Scheduler { return SimpleScheduler{} }) }
func BenchmarkAC9(b *testing.B) { benchAC(b, 9, func() Scheduler { return SimpleScheduler{} }) }

func benchMath(b *testing.B, nodeLimit int) {
	var g *EGraph[constant]
	heap := heapInUse()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		g, _, _ = runMath(b, nodeLimit, nil)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportSize(b, g, elapsed, heap)
}

// BenchmarkMath100k is the math-simplification workload: commutativity,
// associativity, distributivity, identities and constant folding over a few
// start terms, until the e-graph passes 100k e-nodes.
func BenchmarkMath100k(b *testing.B) { benchMath(b, 100_000) }

// BenchmarkWide1M saturates 20,000 seeded random arithmetic terms with the
// math rules until the e-graph passes a million e-nodes: the figure for
// the bytes per e-node of a large e-graph. (The deep workload of
// BenchmarkMath100k is no good for this: past a few hundred thousand
// e-nodes its growth comes only from the backoff scheduler doubling the
// match limits of exploding rules, and it spends its time matching.)
func BenchmarkWide1M(b *testing.B) {
	starts := randomTerms(20_000, 1)
	var g *EGraph[constant]
	heap := heapInUse()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		g = New[constant](constFold{})
		for _, s := range starts {
			if _, err := AddInstance(g, mathPattern(b, s), nil); err != nil {
				b.Fatal(err)
			}
		}
		r := Runner[constant]{IterLimit: 1000, NodeLimit: 1_000_000, TimeLimit: time.Hour}
		if _, err := r.Run(context.Background(), g, mathRules(b)); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportSize(b, g, elapsed, heap)
}

// The micro-benchmarks below isolate the three hot paths of saturation on
// the saturated seven-term AC e-graph: hash-cons lookups, matching
// associativity, and re-applying its (all no-op) matches.

func BenchmarkLookup(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	var nodes []Node
	for _, c := range g.Classes() {
		for _, nid := range g.ClassNodes(c) {
			n := g.Node(nid)
			n.Children = append([]ClassID(nil), n.Children...)
			nodes = append(nodes, n)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, n := range nodes {
			if _, ok := g.Lookup(n); !ok {
				b.Fatal("lookup missed")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(nodes)), "ns/lookup")
}

func BenchmarkSearchAssoc(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	p := acRules(b)[2].search.program()
	ms := &matchSet{nroots: 1, nvars: 3}
	b.ResetTimer()
	for range b.N {
		ms.data = ms.data[:0]
		p.search(&g.Graph, ms)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ms.len()), "ns/match")
}

func BenchmarkApplyAssoc(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	rw := acRules(b)[2]
	ms := &matchSet{nroots: 1, nvars: 3}
	rw.search.program().search(&g.Graph, ms)
	desc := g.prov.describe(rw.name, rw.search.Vars())
	b.ResetTimer()
	for range b.N {
		if _, _, err := rw.applyAll(g, ms, desc, 1<<30); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ms.len()), "ns/match")
}
