package search

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
)

// The files BenchOptions.Save (bench --save DIR) writes into its folder.
const (
	// BenchInputsFile holds every input, state (its value before the run)
	// and weight of the model's graph that bench fed both programs, by the
	// graph's names.
	BenchInputsFile = "inputs.safetensors"
	// BenchOutputsFile holds the compiled program's outputs by output name
	// and, for a graph with state buffers, each state's value after the
	// run by the state's name.
	BenchOutputsFile = "outputs.safetensors"
	// BenchGraphFile is the model's graph in the ir text format, which
	// names and shapes every leaf and output.
	BenchGraphFile = "graph.txt"
)

// saveBench writes what a bench ran into dir (created if missing), so that
// another tool (scripts/torch_bench.py) can run the same graph on the same
// tensors and compare its outputs with lumsearch's: BenchInputsFile from
// feeds, BenchOutputsFile from outs (the compiled program's outputs, and
// its states as "state NAME", as bench checked them) and BenchGraphFile.
// The inputs file's metadata records the model, the seed and which names
// are inputs, states and weights (each a JSON list of strings).
func saveBench(dir string, s *benchSetup, seed uint64, feeds, outs map[string]*ir.Tensor) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	inputs := map[string]*ir.Tensor{}
	meta := map[string]string{"model": s.model, "seed": strconv.FormatUint(seed, 10)}
	for _, kind := range []struct {
		key    string
		leaves []ir.Value
	}{{"inputs", s.g.Inputs()}, {"states", s.g.States()}, {"weights", s.g.Weights()}} {
		names := []string{}
		for _, v := range kind.leaves {
			name := s.g.Node(v).Name
			t, ok := feeds[name]
			if !ok {
				return fmt.Errorf("--save: no value was fed for %s %q", s.g.Node(v).Op, name)
			}
			inputs[name] = t
			names = append(names, name)
		}
		list, err := json.Marshal(names)
		if err != nil {
			return fmt.Errorf("--save: %w", err)
		}
		meta[kind.key] = string(list)
	}
	outputs := map[string]*ir.Tensor{}
	for _, o := range s.g.Outputs {
		t, ok := outs[o.Name]
		if !ok {
			return fmt.Errorf("--save: the compiled program gave no output %q", o.Name)
		}
		outputs[o.Name] = t
	}
	for _, v := range s.g.States() {
		name := s.g.Node(v).Name
		t, ok := outs["state "+name]
		if !ok {
			continue // a state the program leaves as it was
		}
		if _, dup := outputs[name]; dup {
			return fmt.Errorf("--save: state %q has the name of an output", name)
		}
		outputs[name] = t
	}
	if err := safetensors.WriteFile(filepath.Join(dir, BenchInputsFile), inputs, meta); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	outMeta := map[string]string{"model": s.model, "seed": meta["seed"], "program": "compiled"}
	if err := safetensors.WriteFile(filepath.Join(dir, BenchOutputsFile), outputs, outMeta); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, BenchGraphFile), []byte(s.g.String()), 0o644); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	return nil
}
