package search

import (
	"context"
	"fmt"
	"maps"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/step"
)

// RunOptions say what RunFolder feeds a compiled folder and where the results go.
type RunOptions struct {
	// Inputs is a safetensors file with a tensor for every input of the
	// model's graph by its name, and optionally states (a KV cache's
	// content before the run; a state it lacks starts zeroed, as
	// lum_create leaves it) and weights (which replace the model's).
	Inputs string
	// At binds runtime extents (a decode step's past) to values; they
	// replace the inputs file's tensors of the same names. Each must be
	// within the range the folder was compiled for.
	At SymbolValues
	// Output is the safetensors file written (atomically) with every
	// output by name and every state the run updated, by the state's name.
	Output string
}

// RunFolder runs the program of a compiled output folder on the given inputs
// under the CPU emulation, the code kernels.cu holds, and writes its
// outputs: the folder is checked first (its files' digests, and that
// each kernel is what its body prints), the model is rebuilt from the
// plan's provenance for its weights (a corpus model's are the seeded
// random weights verify uses). It reports on events as it goes. A folder,
// model or file that cannot be read is a KindInput error, an extent
// outside its range a KindOption one.
func RunFolder(ctx context.Context, dir string, o RunOptions, events func(Event)) error {
	stdout := newLogWriter(newEmitter(events))
	if o.Inputs == "" || o.Output == "" {
		return withKind(KindOption, fmt.Errorf("run %s: needs an inputs file and an output file", dir))
	}
	var pl *plan.Plan
	fp, md, err := openFolder(dir, func(p *plan.Plan) error {
		pl = p
		return checkPlanExtents(p, o.At)
	})
	if err != nil {
		return fmt.Errorf("run %s: %w", dir, err)
	}
	lp, ks, consts := fp.lp, fp.ks, fp.consts
	defer md.Close()
	g := md.Graph
	// The symbols may come from --dim and the states start zeroed.
	var required []ir.Value
	for _, v := range g.Inputs() {
		if _, isSymbol := g.Symbol(g.Node(v).Name); !isSymbol {
			required = append(required, v)
		}
	}
	file, err := readLeaves(o.Inputs, g, required)
	if err != nil {
		return err
	}
	feeds := maps.Clone(file)
	for name, v := range o.At {
		s, ok := g.Symbol(name)
		if !ok {
			return withKind(KindOption, fmt.Errorf("run %s: --dim %s=%d: the program has no runtime extent %s", dir, name, v, name))
		}
		if err := bindSymbols(g, feeds, map[string]int64{s.Name: v}); err != nil {
			return err
		}
	}
	for _, s := range g.Symbols {
		t := feeds[s.Name]
		if t == nil {
			return withKind(KindOption, fmt.Errorf("run %s: the runtime extent %s (in %d..%d) has no value: give --dim %s=VALUE or put it in %s", dir, s.Name, s.Lo, s.Hi, s.Name, o.Inputs))
		}
		if err := pl.CheckSymbol(s.Name, t.Int(0)); err != nil {
			return withKind(KindOption, fmt.Errorf("run %s: %w", dir, err))
		}
	}
	var batch *step.Batch
	if pl.Step != nil {
		// A serving step's metadata is checked as a batch before
		// anything runs: bad metadata changes no cache slot.
		if batch, err = pl.Step.Unpad(feeds); err != nil {
			return withKind(KindInput, fmt.Errorf("run %s: %s: %w", dir, o.Inputs, err))
		}
	}
	for _, v := range g.States() {
		if n := g.Node(v); feeds[n.Name] == nil {
			feeds[n.Name] = ir.NewTensor(n.DType, n.Shape) // zeroed, as lum_create starts it
		}
	}
	weights, err := modelWeights(md)
	if err != nil {
		return err
	}
	for _, v := range g.Weights() {
		if n := g.Node(v); feeds[n.Name] == nil {
			feeds[n.Name] = weights[n.Name]
		}
	}
	maps.Copy(feeds, consts)
	outs, states, err := cuda.EmulateProgram(ctx, lp, ks, feeds, emu.Options{})
	if err != nil {
		return fmt.Errorf("run %s: %w", dir, err)
	}
	if batch != nil {
		// The logits of the sequences present: the rows past them
		// belong to none.
		if outs, err = pl.Step.Present(outs, batch); err != nil {
			return fmt.Errorf("run %s: %w", dir, err)
		}
	}
	result := map[string]*ir.Tensor{}
	maps.Copy(result, outs)
	for name, t := range states {
		if _, dup := result[name]; dup {
			return fmt.Errorf("run %s: state %q has the name of an output", dir, name)
		}
		result[name] = t
	}
	meta := map[string]string{"model": pl.Model, "folder": dir}
	if err := safetensors.WriteFile(o.Output, result, meta); err != nil {
		return withKind(KindOutput, fmt.Errorf("run %s: %w", dir, err))
	}
	at := ""
	if len(g.Symbols) > 0 {
		bound := map[string]int64{}
		for _, s := range g.Symbols {
			bound[s.Name] = feeds[s.Name].Int(0)
		}
		at = " at " + symbolText(bound)
	}
	fmt.Fprintf(stdout, "ran %s%s under the CPU emulation: wrote %d outputs and %d states to %s\n", dir, at, len(outs), len(states), o.Output)
	return nil
}
