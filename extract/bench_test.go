package extract

import (
	"context"
	"testing"
)

// BenchmarkExtract times each algorithm on each extraction-gym file, the
// file already loaded.
func BenchmarkExtract(b *testing.B) {
	ctx := context.Background()
	algos := []struct {
		name string
		run  func(*Problem) error
	}{
		{"tree", func(p *Problem) error { _, _, err := Tree(ctx, p); return err }},
		{"greedy-dag", func(p *Problem) error { _, _, err := GreedyDAG(ctx, p); return err }},
	}
	for _, ref := range gymReferences(b) {
		p, _, err := FromFile(ref.path, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range algos {
			b.Run(ref.name+"/"+a.name, func(b *testing.B) {
				for b.Loop() {
					if err := a.run(p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkGreedyAll runs GreedyDAG over every tensat and egg file in one
// operation, the files already loaded.
func BenchmarkGreedyAll(b *testing.B) {
	var ps []*Problem
	for _, ref := range gymReferences(b) {
		p, _, err := FromFile(ref.path, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	ctx := context.Background()
	for b.Loop() {
		for _, p := range ps {
			if _, _, err := GreedyDAG(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	}
}
