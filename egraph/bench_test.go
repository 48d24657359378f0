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
		r := Runner[NoData]{IterLimit: 100, NodeLimit: 100_000_000, TimeLimit: time.Hour, Scheduler: sched()}
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

// BenchmarkMath1M grows the same workload past a million e-nodes, for the
// bytes-per-e-node figure of a large e-graph.
func BenchmarkMath1M(b *testing.B) { benchMath(b, 1_000_000) }
