package egraph

import (
	"testing"
)

func BenchmarkMicroLookup(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	var nodes []Node
	for _, c := range g.Classes() {
		for _, n := range g.ClassNodes(c) {
			nd := g.Node(n)
			nd.Children = append([]ClassID(nil), nd.Children...)
			nodes = append(nodes, nd)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, n := range nodes {
			g.Lookup(n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(nodes)), "ns/lookup")
}
func BenchmarkMicroApplyAssoc(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	rules := acRules(b)
	rw := rules[2]
	ms := searchSet(&g.Graph, rw.search, 0)
	desc := g.prov.describe(rw.name, rw.search.Vars())
	b.ResetTimer()
	for range b.N {
		for j := range ms.len() {
			roots, subst := ms.at(j)
			rw.apply(g, Match{Roots: roots, Subst: subst, vars: rw.search.Vars()}, desc)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ms.len()), "ns/match")
}
func BenchmarkMicroSearchAssoc(b *testing.B) {
	g, _ := saturateAC(b, 7, SimpleScheduler{})
	rules := acRules(b)
	rw := rules[2]
	ms := &matchSet{nroots: 1, nvars: 3}
	b.ResetTimer()
	for range b.N {
		ms.data = ms.data[:0]
		rw.search.program().search(&g.Graph, ms)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ms.len()), "ns/match")
}
