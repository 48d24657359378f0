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

// EdgePoints are batches at the edges of the row buckets a program keeps
// kernels for (the powers of two of T up to the most tokens, and the
// most): T at each bucket's top and one past the bucket below, so that
// every bucket's kernel runs at the fewest and the most rows it serves.
// T tokens are shared evenly by min(T, max seqs) sequences, each after a
// random context.
func (l Layout) EdgePoints(rng *rand.Rand) ([]Point, error) {
	var ts []int
	for hi := 1; ; hi *= 2 {
		top := min(hi, l.MaxTokens)
		ts = append(ts, hi/2+1, top)
		if top == l.MaxTokens {
			break
		}
	}
	return l.PointsAt(rng, ts)
}

// PointsAt are batches of the given numbers of tokens (each once, in
// order; those outside 1..max tokens, or more than the layout's sequences
// can hold, left out), T tokens shared evenly by min(T, max seqs)
// sequences, each after a random context.
func (l Layout) PointsAt(rng *rand.Rand, tokens []int) ([]Point, error) {
	var ts []int
	seen := map[int]bool{}
	for _, t := range tokens {
		if t >= 1 && t <= l.MaxTokens && !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	maxLen := l.MaxLen()
	var out []Point
	for _, T := range ts {
		S := min(T, l.MaxSeqs)
		if (T+S-1)/S > maxLen {
			continue // no batch of the layout has T tokens
		}
		shapes := make([]SeqShape, S)
		for i := range shapes {
			n := T / S
			if i < T%S {
				n++
			}
			shapes[i] = SeqShape{Tokens: n, Context: rng.IntN(max(1, maxLen-n+1))}
		}
		b, err := l.arrangeShrinking(rng, shapes)
		if err != nil {
			return nil, fmt.Errorf("step point at %d tokens: %w", T, err)
		}
		for i := range b.IDs {
			b.IDs[i] = int64(rng.IntN(l.Vocab))
		}
		out = append(out, Point{Name: "bucket edge", Batch: b})
	}
	return out, nil
}
