package search

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
)

// EvalOptions say how Evaluate feeds a model and what it does with the
// results.
type EvalOptions struct {
	// Seed seeds the random inputs, and the weights unless the model or
	// the inputs file brings them.
	Seed uint64
	// Feeds say where the inputs come from (stated ranges for random
	// ones, or an inputs file) and what the results are compared with
	// (an outputs file).
	Feeds Feeds
	// SaveOutputs, when set, is a safetensors file the results are
	// written to, in the layout Feeds.Outputs reads: outputs by name, the
	// updated states' values after the run by the state's name.
	SaveOutputs string
}

// Evaluation is one run of a model in the reference interpreter: what
// "lumsearch corpus eval" prints (WriteText).
type Evaluation struct {
	*corpus.Evaluation
	// Inputs is the inputs file the feeds came from ("" for random ones).
	Inputs string
	// Outputs is the comparison with an outputs file, nil without one.
	Outputs *OutputsCheck
	// Saved is the file the results were written to, "" for none.
	Saved string
}

// Evaluate runs m's graph in the float64 reference interpreter: on the
// tensors of o.Feeds.Inputs, or on random inputs and states drawn from
// o.Seed within the ranges they mean (ir.InputRanges) or o.Feeds states,
// with m's own weights or seeded random ones (corpus.RandomWeights)
// unless the inputs file has them. With o.Feeds.Outputs the results are
// compared with that file's, every element within the verifier's
// allowance; with o.SaveOutputs they are written there. build is how
// long the caller took to load m, for the report.
func Evaluate(ctx context.Context, m *Model, o EvalOptions, build time.Duration) (*Evaluation, error) {
	g, name := m.Graph, m.Name
	if err := o.Feeds.checkFiles(); err != nil {
		return nil, err
	}
	if err := o.Feeds.checkRanges(g); err != nil {
		return nil, err
	}
	expect, err := o.Feeds.expect(g)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	file, err := o.Feeds.read(g)
	if err != nil {
		return nil, err
	}
	weights := m.Weights
	if weights == nil && slices.ContainsFunc(g.Weights(), func(v ir.Value) bool { return file[g.Node(v).Name] == nil }) {
		// Random weights as the corpus draws them (scaled as a trained
		// model's are), for those the inputs file does not bring.
		if weights, err = corpus.RandomWeights(g, o.Seed); err != nil {
			return nil, fmt.Errorf("weights for %s: %w", name, err)
		}
	}
	feeds, err := o.Feeds.feedWith(g, o.Seed, weights, file, ir.OpInput, ir.OpState)
	if err != nil {
		return nil, fmt.Errorf("inputs for %s: %w", name, err)
	}
	t2 := time.Now()
	res, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: expect != nil})
	if err != nil {
		return nil, err
	}
	ev := &Evaluation{
		Evaluation: &corpus.Evaluation{Name: name, Graph: g, Seed: o.Seed, Build: build, Random: t2.Sub(t1), Evaluate: time.Since(t2), Result: res},
		Inputs:     o.Feeds.Inputs,
	}
	if expect != nil {
		if err := expect.compare(g, res.Outputs, res.States, res.Magnitudes); err != nil {
			return nil, fmt.Errorf("eval %s: %w", name, err)
		}
		ev.Outputs = expect.found
	}
	if o.SaveOutputs != "" {
		results := map[string]*ir.Tensor{}
		for n, t := range res.Outputs {
			results["output "+n] = t
		}
		for n, t := range res.States {
			results["state "+n] = t
		}
		meta := map[string]string{"model": name, "program": "reference"}
		if o.Feeds.Inputs == "" {
			meta["seed"] = strconv.FormatUint(o.Seed, 10)
		} else {
			meta["inputs"] = o.Feeds.Inputs
		}
		if err := writeOutputs(o.SaveOutputs, g, results, meta); err != nil {
			return nil, withKind(KindOutput, fmt.Errorf("--save-outputs: %w", err))
		}
		ev.Saved = o.SaveOutputs
	}
	return ev, nil
}

// WriteText writes the graph's name and size, the time of each step to
// the millisecond, the dtype and shape of each output in the graph's
// order, then what was compared and saved.
func (e *Evaluation) WriteText(w io.Writer) error {
	g := e.Graph
	fmt.Fprintf(w, "graph:    %s (%d ops, %d parameters)\n", e.Name, len(g.Nodes), corpus.Params(g))
	fmt.Fprintf(w, "build:    %v\n", e.Build.Round(time.Millisecond))
	if e.Inputs != "" {
		fmt.Fprintf(w, "inputs:   %v (read from %s)\n", e.Random.Round(time.Millisecond), e.Inputs)
	} else {
		fmt.Fprintf(w, "random:   %v (inputs, and weights unless the model has them; seed %d)\n", e.Random.Round(time.Millisecond), e.Seed)
	}
	fmt.Fprintf(w, "evaluate: %v (float64 reference interpreter)\n", e.Evaluate.Round(time.Millisecond))
	for _, o := range g.Outputs {
		t := e.Result.Outputs[o.Name]
		fmt.Fprintf(w, "output %s: %s%v\n", o.Name, t.DType, t.Shape)
	}
	if e.Outputs != nil {
		fmt.Fprintf(w, "check:    %v\n", e.Outputs)
	}
	if e.Saved != "" {
		_, err := fmt.Fprintf(w, "saved:    %s (%d outputs, %d states)\n", e.Saved, len(e.Result.Outputs), len(e.Result.States))
		return err
	}
	return nil
}
