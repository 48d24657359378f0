package search

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/step"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/report"
)

// bucketTimes prices the program's run at each bucket of each of its
// symbols (the others as the search priced them) and gives g's hardware
// floor there: the work of attention over a KV cache follows the
// position, the rest does not.
func bucketTimes(g *ir.Graph, c *compiled, m *cost.Model) ([]report.BucketTime, error) {
	lp := c.lowered
	if lp.Step != nil {
		return stepBucketTimes(g, c, m, stepContext(lp.Step, m))
	}
	var out []report.BucketTime
	for _, s := range lp.Symbols {
		for _, b := range s.Buckets() {
			mb := m.AtPosition(b)
			total := 0.0
			for i, l := range lp.Run {
				k := c.kernels[len(lp.Prep)+i]
				r, err := mb.Ranked(l.Body)
				if err != nil {
					return nil, fmt.Errorf("price %s at %s=%d: %w", l.Name, s.Name, b, err)
				}
				est := r[0]
				for _, e := range r {
					if e.Schedule.String() == k.Schedule.String() {
						est = e
						break
					}
				}
				total += est.Seconds
			}
			floor := programFloor(g, m.Device, map[string]int64{s.Name: b}).Hardware
			out = append(out, report.BucketTime{Symbol: s.Name, Value: b, Predicted: total, Floor: floor})
		}
	}
	return out, nil
}

// bucketText prints bucket times as "past=0: 41.2 µs (1.9x the floor),
// past=1: ...".
func bucketText(bs []report.BucketTime) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%s=%d: %s", b.Symbol, b.Value, Seconds(b.Predicted))
		if b.Floor > 0 {
			parts[i] += fmt.Sprintf(" (%.2fx the floor)", b.Predicted/b.Floor)
		}
	}
	return strings.Join(parts, ", ")
}

// stepBucketTimes prices a serving step's program at each bucket of its
// tokens (cuda.RowBuckets): T tokens of min(T, max seqs) sequences, the
// tokens shared evenly, each sequence after a context of ctx positions;
// each row-wise launch runs the kernel of its bucket (Kernel.ForRows)
// priced over the rows present, the others as printed, every launch a
// node of the bucket's CUDA graph (cost.Model.InGraph). The floor is the
// step's at that workload (StepFloor).
func stepBucketTimes(g *ir.Graph, c *compiled, m *cost.Model, ctx int) ([]report.BucketTime, error) {
	lp := c.lowered
	l := *lp.Step
	// The GPU runner replays a step as a CUDA graph per bucket.
	mb := m.AtPosition(int64(ctx)).InGraph()
	var out []report.BucketTime
	// Launches of one kernel (a model's layers) have equal bodies: each
	// is written for the rows present and priced once a workload.
	type priced struct {
		k    *cuda.Kernel
		T, S int
	}
	memo := map[priced]float64{}
	price := func(what string, w step.Workload) error {
		total := 0.0
		for i, ln := range lp.Run {
			k := c.kernels[len(lp.Prep)+i]
			est, ok := memo[priced{k, w.Tokens, w.Seqs}]
			if !ok {
				var err error
				if est, err = launchAt(mb, ln, k, int64(w.Tokens), int64(w.Seqs)); err != nil {
					return fmt.Errorf("price %s at %d tokens of %d sequences: %w", ln.Name, w.Tokens, w.Seqs, err)
				}
				memo[priced{k, w.Tokens, w.Seqs}] = est
			}
			total += est
		}
		out = append(out, report.BucketTime{Symbol: what, Value: int64(w.Tokens), Predicted: total, Floor: StepFloor(g, m.Device, w).Hardware})
		return nil
	}
	for _, T := range cuda.RowBuckets(int64(l.MaxTokens)) {
		w, err := workloadAt(l, int(T), ctx)
		if err != nil {
			return nil, err
		}
		if err := price("tokens", w); err != nil {
			return nil, err
		}
	}
	if w, ok := mixedWorkload(l, ctx); ok {
		if err := price("mixed", w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// mixedWorkload is a step of chunked prefill beside decodes: one prompt
// chunk of half the most tokens, then a decode for each other sequence
// the step takes, each after ctx positions; ok is false for a step too
// small to mix (one sequence, or one token).
func mixedWorkload(l step.Layout, ctx int) (step.Workload, bool) {
	chunk := l.MaxTokens / 2
	if l.MaxSeqs < 2 || chunk < 2 {
		return step.Workload{}, false
	}
	seqs := []step.SeqWork{{Tokens: chunk, Context: max(0, min(ctx, l.MaxLen()-chunk))}}
	for len(seqs) < l.MaxSeqs && chunk+len(seqs) <= l.MaxTokens {
		seqs = append(seqs, step.SeqWork{Tokens: 1, Context: max(0, min(ctx, l.MaxLen()-1))})
	}
	w, err := l.WorkloadOf(seqs)
	return w, err == nil
}

// workloadAt is a step of T tokens: one token a sequence up to the most
// sequences, the tokens shared evenly beyond, each after ctx positions
// (held to what fits).
func workloadAt(l step.Layout, T, ctx int) (step.Workload, error) {
	S := min(T, l.MaxSeqs)
	seqs := make([]step.SeqWork, S)
	for i := range seqs {
		seqs[i].Tokens = T / S
		if i < T%S {
			seqs[i].Tokens++
		}
		seqs[i].Context = max(0, min(ctx, l.MaxLen()-seqs[i].Tokens))
	}
	return l.WorkloadOf(seqs)
}

// launchAt is a launch's predicted seconds with T tokens of S sequences
// present: the kernel its bucket runs, priced over the rows present where
// the cost model lists that kernel's schedule for them, else at the rows
// it was printed for (which bound its time over fewer).
func launchAt(m *cost.Model, l *lower.Launch, k *cuda.Kernel, T, S int64) (float64, error) {
	body, n := l.Body, T
	if l.Rows != nil {
		if l.Rows.Seqs {
			n = S
		}
		n = min(n, l.Rows.Max)
		k = k.ForRows(n)
		if b, err := l.BodyAtRows(n); err == nil {
			if r, err := m.Ranked(b); err == nil {
				for _, e := range r {
					if e.Schedule.String() == k.Schedule.String() {
						return e.Seconds, nil
					}
				}
			}
		}
		if k.Body != nil {
			body = k.Body
		}
	}
	r, err := m.Ranked(body)
	if err != nil {
		return 0, err
	}
	for _, e := range r {
		if e.Schedule.String() == k.Schedule.String() {
			return e.Seconds, nil
		}
	}
	return r[0].Seconds, nil
}

// stepContext is the context a step is priced at: the middle of the
// expected range (--expect context=LO..HI), else half the longest
// sequence.
func stepContext(l *step.Layout, m *cost.Model) int {
	if lo, hi, ok := m.Expected(); ok {
		return int((lo + hi) / 2)
	}
	return l.MaxLen() / 2
}
