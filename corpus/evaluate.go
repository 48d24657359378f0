package corpus

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/lumsearch/lumsearch/ir"
)

// Evaluation is one run of a graph in the reference interpreter on seeded
// random inputs, with how long each step took: what "lumsearch corpus
// eval" prints (WriteText).
type Evaluation struct {
	// Name is the graph's name as the caller gave it.
	Name  string
	Graph *ir.Graph
	// Seed seeded the random inputs, and the weights unless the model
	// brought its own.
	Seed uint64
	// Build is how long building or loading the graph took (the caller
	// measures it); Random how long drawing the random feeds took;
	// Evaluate how long the interpreter ran.
	Build, Random, Evaluate time.Duration
	// Result holds the outputs.
	Result *ir.Result
}

// Evaluate runs g in the float64 reference interpreter. The feeds are
// weights, with random ones drawn from seed when it is nil, and random
// inputs and states drawn from seed; weights, when not nil, receives the
// inputs too. name labels errors and the report; build is how long the
// caller took to build g, recorded as Evaluation.Build.
func Evaluate(ctx context.Context, name string, g *ir.Graph, weights map[string]*ir.Tensor, seed uint64, build time.Duration) (*Evaluation, error) {
	t1 := time.Now()
	feeds := weights
	if feeds == nil {
		var err error
		if feeds, err = RandomWeights(g, seed); err != nil {
			return nil, fmt.Errorf("weights for %s: %w", name, err)
		}
	}
	inputs, err := ir.RandomLeaves(g, seed, ir.Typical, ir.OpInput, ir.OpState)
	if err != nil {
		return nil, fmt.Errorf("inputs for %s: %w", name, err)
	}
	maps.Copy(feeds, inputs)
	t2 := time.Now()
	res, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{})
	if err != nil {
		return nil, err
	}
	return &Evaluation{Name: name, Graph: g, Seed: seed, Build: build, Random: t2.Sub(t1), Evaluate: time.Since(t2), Result: res}, nil
}

// WriteText writes the graph's name and size, the time of each step to
// the millisecond, and the dtype and shape of each output in the graph's
// order.
func (e *Evaluation) WriteText(w io.Writer) error {
	g := e.Graph
	fmt.Fprintf(w, "graph:    %s (%d ops, %d parameters)\n", e.Name, len(g.Nodes), Params(g))
	fmt.Fprintf(w, "build:    %v\n", e.Build.Round(time.Millisecond))
	fmt.Fprintf(w, "random:   %v (inputs, and weights unless the model has them; seed %d)\n", e.Random.Round(time.Millisecond), e.Seed)
	fmt.Fprintf(w, "evaluate: %v (float64 reference interpreter)\n", e.Evaluate.Round(time.Millisecond))
	for _, o := range g.Outputs {
		t := e.Result.Outputs[o.Name]
		if _, err := fmt.Fprintf(w, "output %s: %s%v\n", o.Name, t.DType, t.Shape); err != nil {
			return err
		}
	}
	return nil
}
