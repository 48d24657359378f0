package step

import (
	"fmt"
	"math/rand/v2"
)

// Point is a batch a step program is verified at, with its name.
type Point struct {
	Name  string
	Batch *Batch
}

// String names the point and its extents: "all decodes (T=8, S=8)".
func (p Point) String() string {
	return fmt.Sprintf("%s (T=%d, S=%d)", p.Name, p.Batch.Tokens(), p.Batch.Seqs())
}

// Points are the batches a step program is verified at, arranged over the
// pool with random contexts: one decode token (T = S = 1); a decode token
// for each of the most sequences; one long prompt chunk; a random mix;
// and the maxima (T and S both at their tops: decodes and one chunk).
// Contexts are shrunk where the pool cannot hold them. Token ids are
// drawn within the vocabulary.
func (l Layout) Points(rng *rand.Rand) ([]Point, error) {
	maxLen := l.MaxLen()
	ctx := func(tokens int) int { return rng.IntN(max(1, maxLen-tokens+1)) }
	decodes := func(n int) []SeqShape {
		out := make([]SeqShape, n)
		for i := range out {
			out[i] = SeqShape{Context: ctx(1), Tokens: 1}
		}
		return out
	}
	chunk := min(l.MaxTokens, maxLen)
	maxima := decodes(l.MaxSeqs - 1)
	left := l.MaxTokens - (l.MaxSeqs - 1)
	for left > 0 && len(maxima) < l.MaxSeqs {
		n := min(left, maxLen)
		maxima = append(maxima, SeqShape{Context: ctx(n), Tokens: n})
		left -= n
	}
	if left > 0 {
		// The last sequence cannot hold the rest: spread it over the
		// decodes, each a chunk now.
		for i := range maxima {
			add := min(left, maxLen-maxima[i].Tokens)
			maxima[i].Tokens += add
			maxima[i].Context = min(maxima[i].Context, maxLen-maxima[i].Tokens)
			left -= add
		}
	}
	shapes := []struct {
		name   string
		shapes []SeqShape
	}{
		{"one decode", decodes(1)},
		{"all decodes", decodes(min(l.MaxSeqs, l.MaxTokens))},
		{"one long chunk", []SeqShape{{Context: ctx(chunk), Tokens: chunk}}},
		{"mixed", l.DrawShapes(rng, l.MaxSeqs, maxLen)},
		{"maxima", maxima},
	}
	var out []Point
	for _, s := range shapes {
		b, err := l.arrangeShrinking(rng, s.shapes)
		if err != nil {
			return nil, fmt.Errorf("step point %s: %w", s.name, err)
		}
		for i := range b.IDs {
			b.IDs[i] = int64(rng.IntN(l.Vocab))
		}
		out = append(out, Point{Name: s.name, Batch: b})
	}
	return out, nil
}

// arrangeShrinking arranges shapes, halving the contexts while the pool
// cannot hold them.
func (l Layout) arrangeShrinking(rng *rand.Rand, shapes []SeqShape) (*Batch, error) {
	for {
		b, err := l.Arrange(rng, shapes)
		if err == nil {
			return b, nil
		}
		shrunk := false
		for i := range shapes {
			if shapes[i].Context > 0 {
				shapes[i].Context /= 2
				shrunk = true
			}
		}
		if !shrunk {
			return nil, err
		}
	}
}
