package search

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
)

// InputRanges are ranges a user states for a model's inputs, weights or
// states, by leaf name: the leaf's random values are drawn from LO..HI
// instead of the range ir.InputRanges infers from its use. It is a
// flag.Value: each Set takes one NAME=LO..HI (--input-range, repeatable).
type InputRanges map[string]ir.Range

// String is the ranges in name order, "NAME=LO..HI" joined by commas.
func (r InputRanges) String() string {
	parts := make([]string, 0, len(r))
	for _, name := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, name+"="+rangeText(r[name]))
	}
	return strings.Join(parts, ",")
}

// Set adds one range, NAME=LO..HI with finite numbers LO <= HI. Whether
// NAME is a leaf of the model, and whether its dtype holds the range, is
// checked against the model's graph when the feeds are drawn.
func (r InputRanges) Set(s string) error {
	if r == nil {
		return fmt.Errorf("input range %q: set on a nil InputRanges (make the map first)", s)
	}
	name, rg, err := ParseInputRange(s)
	if err != nil {
		return err
	}
	r[name] = rg
	return nil
}

// ParseInputRange reads NAME=LO..HI: LO and HI are finite numbers
// (integers for an integer leaf, which is checked later), LO <= HI. The
// last "=" separates the name, which may itself hold one.
func ParseInputRange(s string) (string, ir.Range, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return "", ir.Range{}, fmt.Errorf("want NAME=LO..HI, got %q", s)
	}
	name, text := s[:i], s[i+1:]
	los, his, ok := strings.Cut(text, "..")
	if !ok {
		return "", ir.Range{}, fmt.Errorf("%s: want NAME=LO..HI, got %q", name, s)
	}
	lo, err1 := strconv.ParseFloat(los, 64)
	hi, err2 := strconv.ParseFloat(his, 64)
	switch {
	case err1 != nil || err2 != nil:
		return "", ir.Range{}, fmt.Errorf("%s=%s: LO and HI must be numbers", name, text)
	case math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0):
		return "", ir.Range{}, fmt.Errorf("%s=%s: LO and HI must be finite", name, text)
	case lo > hi:
		return "", ir.Range{}, fmt.Errorf("%s=%s: LO is above HI", name, text)
	}
	return name, ir.Range{Lo: lo, Hi: hi, Meaning: ir.MeaningStated}, nil
}

func rangeText(r ir.Range) string {
	return strconv.FormatFloat(r.Lo, 'g', -1, 64) + ".." + strconv.FormatFloat(r.Hi, 'g', -1, 64)
}

// Feeds say where a run's inputs come from and what its outputs are
// checked against, for Evaluate, VerifyWith and Bench. The zero value
// draws every input at random from what it means (ir.InputRanges) and
// checks nothing more.
type Feeds struct {
	// Ranges replace the inferred ranges of the leaves they name.
	Ranges InputRanges
	// Inputs, when set, is a safetensors file in the layout bench --save
	// writes (BenchInputsFile): a tensor for every input and state of the
	// model's graph by its name, and optionally weights, which replace
	// the model's. No random input is drawn then (ReadInputs).
	Inputs string
	// Outputs, when set, is a safetensors file the run's outputs are
	// compared with (ReadOutputs; BenchOutputsFile's layout): a tensor
	// for every output by its name, and optionally the value after the
	// run of states the graph updates, by the state's name.
	Outputs string
	// At binds runtime extents (the program's symbols, a decode step's
	// past) to the values to run at; unset, a program is run at several
	// values across each symbol's range.
	At SymbolValues
}

// SymbolValues bind runtime extents by name to values to run at. It is a
// flag.Value: each Set takes one NAME=VALUE with VALUE >= 0.
type SymbolValues map[string]int64

// String is the bindings in name order, NAME=VALUE joined by spaces.
func (s SymbolValues) String() string { return symbolText(s) }

// Set adds one binding.
func (s SymbolValues) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	n, err := strconv.ParseInt(val, 10, 64)
	if !ok || name == "" || err != nil || n < 0 {
		return fmt.Errorf("want NAME=VALUE with an integer VALUE >= 0 (a runtime extent of the program, such as past), got %q", v)
	}
	s[name] = n
	return nil
}

// checkFiles says whether the inputs and outputs files can be read, so
// that a mistyped path is an error before minutes of work, not after.
func (f Feeds) checkFiles() error {
	for _, p := range []struct{ flag, path string }{{"--inputs", f.Inputs}, {"--outputs", f.Outputs}} {
		if p.path == "" {
			continue
		}
		fh, err := os.Open(p.path)
		if err != nil {
			return withKind(KindInput, fmt.Errorf("%s: %w", p.flag, err))
		}
		fh.Close()
	}
	return nil
}

// checkRanges checks the stated ranges against g: each must name a leaf
// whose dtype holds the range. A bad one is an option error naming it.
func (f Feeds) checkRanges(g *ir.Graph) error {
	if err := ir.CheckRanges(g, f.Ranges); err != nil {
		return optionErrorf("--input-range %w", err)
	}
	return nil
}

// feed makes the feeds of a run of g: the tensors of the inputs file
// when there is one (its weights replace the model's), the model's own
// weights (nil: none) for the rest, and for every leaf of the given
// kinds that neither gives, random values from seed within the stated or
// inferred ranges.
func (f Feeds) feed(g *ir.Graph, seed uint64, weights map[string]*ir.Tensor, kinds ...ir.Op) (map[string]*ir.Tensor, error) {
	file, err := f.read(g)
	if err != nil {
		return nil, err
	}
	return f.feedWith(g, seed, weights, file, kinds...)
}

// read reads the inputs file for g (nil when f names none).
func (f Feeds) read(g *ir.Graph) (map[string]*ir.Tensor, error) {
	if f.Inputs == "" {
		return nil, nil
	}
	return ReadInputs(f.Inputs, g)
}

// feedWith is feed with the inputs file already read (file; nil for
// none).
func (f Feeds) feedWith(g *ir.Graph, seed uint64, weights, file map[string]*ir.Tensor, kinds ...ir.Op) (map[string]*ir.Tensor, error) {
	if err := f.checkRanges(g); err != nil {
		return nil, err
	}
	given := func(v ir.Value) bool {
		name := g.Node(v).Name
		return file[name] != nil || weights[name] != nil
	}
	// Drawing a kind every leaf of which is given would only cost time
	// (a model's weights are gigabytes).
	var draw []ir.Op
	for _, k := range kinds {
		var leaves []ir.Value
		switch k {
		case ir.OpInput:
			leaves = g.Inputs()
		case ir.OpState:
			leaves = g.States()
		case ir.OpWeight:
			leaves = g.Weights()
		}
		if !slices.ContainsFunc(leaves, func(v ir.Value) bool { return !given(v) }) {
			continue
		}
		draw = append(draw, k)
	}
	feeds := map[string]*ir.Tensor{}
	if len(draw) > 0 {
		var err error
		if feeds, err = ir.RandomLeavesIn(g, seed, ir.Typical, f.Ranges, draw...); err != nil {
			return nil, err
		}
	}
	if slices.Contains(draw, ir.OpWeight) {
		// A quantized weight's codes and scales are packed from float
		// values, as its checkpoint's are (random bytes would make
		// e8m0 and e4m3 NaNs), unless the user states their range.
		packed, err := corpus.RandomPackedWeights(g, seed)
		if err != nil {
			return nil, err
		}
		for name, t := range packed {
			if _, stated := f.Ranges[name]; !stated {
				feeds[name] = t
			}
		}
	}
	maps.Copy(feeds, weights)
	maps.Copy(feeds, file)
	return feeds, nil
}

// reduced is f for the reduced configuration of a model's architecture,
// whose graph has the model's leaf names at smaller sizes: random feeds
// only (the inputs file has the model's shapes), and a stated range of
// an index or position clipped to what the reduced graph's tables and
// lengths hold.
func (f Feeds) reduced(g *ir.Graph) Feeds {
	inferred := ir.InputRanges(g)
	leaves := map[string]bool{}
	for _, n := range g.Nodes {
		leaves[n.Name] = n.Op == ir.OpInput || n.Op == ir.OpState || n.Op == ir.OpWeight
	}
	r := InputRanges{}
	for name, s := range f.Ranges {
		if !leaves[name] {
			continue // checked against the model's own graph
		}
		if in, ok := inferred[name]; ok && (in.Meaning == ir.MeaningIndex || in.Meaning == ir.MeaningPosition) {
			s.Lo, s.Hi = max(s.Lo, in.Lo), min(s.Hi, in.Hi)
			if s.Lo > s.Hi {
				s = in
			}
		}
		r[name] = s
	}
	return Feeds{Ranges: r}
}

// ReadInputs reads a safetensors file of feeds for g, in the layout bench
// --save writes: a tensor for every input and state of g, named as g
// names it, and optionally some of its weights. A name g lacks, a missing
// input or state, a shape other than the leaf's, or a dtype that does not
// convert to the leaf's exactly (ir.Tensor.ConvertExact) is a KindInput
// error naming the file and the tensor.
func ReadInputs(path string, g *ir.Graph) (map[string]*ir.Tensor, error) {
	return readLeaves(path, g, append(g.Inputs(), g.States()...))
}

// readLeaves is ReadInputs with the leaves that must be present given.
func readLeaves(path string, g *ir.Graph, required []ir.Value) (map[string]*ir.Tensor, error) {
	file, _, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("--inputs: %w", err))
	}
	leaves := map[string]*ir.Node{}
	for _, n := range g.Nodes {
		if n.Op == ir.OpInput || n.Op == ir.OpState || n.Op == ir.OpWeight {
			leaves[n.Name] = n
		}
	}
	out := map[string]*ir.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(file)) {
		n, ok := leaves[name]
		if !ok {
			return nil, withKind(KindInput, fmt.Errorf("--inputs %s: tensor %q is no input, state or weight of %s", path, name, g.Name))
		}
		t, err := asLeaf(file[name], n.DType, n.Shape)
		if err != nil {
			return nil, withKind(KindInput, fmt.Errorf("--inputs %s: %s %q: %w", path, n.Op, name, err))
		}
		out[name] = t
	}
	for _, v := range required {
		n := g.Node(v)
		if _, ok := out[n.Name]; !ok {
			return nil, withKind(KindInput, fmt.Errorf("--inputs %s: no tensor for %s %q of %s", path, n.Op, n.Name, g.Name))
		}
	}
	return out, nil
}

// ReadOutputs reads a safetensors file of g's expected results, in the
// layout bench --save writes its outputs in: a tensor for every output of
// g by its name, and optionally, by the state's name, the value after the
// run of a state g updates. Names are keyed as the comparison names
// them: "output NAME" and "state NAME". A name that is neither, a missing
// output, a shape other than the value's, or an inexact dtype conversion
// is a KindInput error naming the file and the tensor.
func ReadOutputs(path string, g *ir.Graph) (map[string]*ir.Tensor, error) {
	file, _, err := safetensors.ReadFile(path)
	if err != nil {
		return nil, withKind(KindInput, fmt.Errorf("--outputs: %w", err))
	}
	values := resultValues(g)
	out := map[string]*ir.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(file)) {
		key, v, ok := "output "+name, ir.Value(0), false
		for _, r := range values {
			if r.name == name && (!ok || r.output) {
				key, v, ok = r.key(), r.value, true
			}
		}
		if !ok {
			return nil, withKind(KindInput, fmt.Errorf("--outputs %s: tensor %q is no output or updated state of %s", path, name, g.Name))
		}
		n := g.Node(v)
		t, err := asLeaf(file[name], n.DType, n.Shape)
		if err != nil {
			return nil, withKind(KindInput, fmt.Errorf("--outputs %s: %s: %w", path, key, err))
		}
		out[key] = t
	}
	for _, o := range g.Outputs {
		if _, ok := out["output "+o.Name]; !ok {
			return nil, withKind(KindInput, fmt.Errorf("--outputs %s: no tensor for output %q of %s", path, o.Name, g.Name))
		}
	}
	return out, nil
}

// asLeaf is t as a value of dtype dt and shape s, converted only when
// exact.
func asLeaf(t *ir.Tensor, dt ir.DType, s ir.Shape) (*ir.Tensor, error) {
	if !t.Shape.Equal(s) {
		return nil, fmt.Errorf("shape %v, want %v", t.Shape, s)
	}
	c, err := t.ConvertExact(dt)
	if err != nil {
		return nil, fmt.Errorf("want %s: %w", dt, err)
	}
	return c, nil
}

// resultValue is one value a run gives: an output, or a state's value
// after the run.
type resultValue struct {
	name   string
	value  ir.Value
	output bool
}

// key is how comparisons and the files' maps name the value: "output
// NAME" or "state NAME".
func (r resultValue) key() string {
	if r.output {
		return "output " + r.name
	}
	return "state " + r.name
}

// resultValues lists g's outputs, then its updated states, in g's order.
func resultValues(g *ir.Graph) []resultValue {
	var out []resultValue
	for _, o := range g.Outputs {
		out = append(out, resultValue{name: o.Name, value: o.Value, output: true})
	}
	for _, u := range g.Updates {
		out = append(out, resultValue{name: g.Node(u.State).Name, value: u.Value})
	}
	return out
}

// OutputsCheck is what a comparison with an outputs file found.
type OutputsCheck struct {
	// File is the outputs file.
	File string `json:"file"`
	// Values and Elements count what was compared.
	Values   int   `json:"values"`
	Elements int64 `json:"elements"`
	// Worst is the worst element's error as a fraction of its allowance,
	// or, when RelativeL2, the worst relative L2 error of a value.
	Worst float64 `json:"worst"`
	// RelativeL2 says the values were compared whole, in the relative L2
	// sense within Limit, not element by element: a model too large for
	// the reference interpreter has no magnitudes to scale an element's
	// allowance by.
	RelativeL2 bool    `json:"relative_l2,omitempty"`
	Limit      float64 `json:"limit,omitempty"`
}

// String is the line a report prints.
func (c *OutputsCheck) String() string {
	if c.RelativeL2 {
		return fmt.Sprintf("the outputs match %s (%d values, %d elements; relative L2 error %.2g, at most %.2g)", c.File, c.Values, c.Elements, c.Worst, c.Limit)
	}
	return fmt.Sprintf("the outputs match %s (%d values, %d elements; worst error %.2g of the allowance)", c.File, c.Values, c.Elements, c.Worst)
}

// compareOutputs checks a run's results (got, keyed "output NAME" and
// "state NAME") against the expected ones of an outputs file (want, as
// ReadOutputs keys them), every element, within the verifier's allowance
// (ir.PathEps and Graph.Allowance: the precisions on each value's path in
// g). mags, when not nil, are the reference interpreter's magnitudes of
// the same values (ir.Result.Magnitudes, keyed by output or state name);
// without them each element's magnitude is its expected value's. A value
// of the file beyond its dtype's finite range compares as the dtype's
// infinity (ir.CompareWithin).
func compareOutputs(g *ir.Graph, file string, got, want map[string]*ir.Tensor, mags map[string]*ir.Tensor) (*OutputsCheck, error) {
	eps := ir.PathEps(g)
	c := &OutputsCheck{File: file}
	for _, r := range resultValues(g) {
		w, ok := want[r.key()]
		if !ok {
			continue
		}
		gt := got[r.key()]
		if gt == nil {
			return nil, fmt.Errorf("%s: the run gave no %s to compare with %s", file, r.key(), file)
		}
		var mag *ir.Tensor
		if mags != nil {
			mag = mags[r.name]
		}
		tol := g.Allowance(r.value, eps, 1024)
		mm, err := ir.CompareWithin(gt, w, mag, tol)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, r.key(), err)
		}
		if mm != nil {
			return nil, fmt.Errorf("%s differs from %s: %v", r.key(), file, mm)
		}
		c.Values++
		c.Elements += w.Len()
		c.Worst = max(c.Worst, worstRatio(gt, w, mag, tol))
	}
	return c, nil
}

// worstRatio is the largest error of got against want as a fraction of
// what CompareWithin allows, over the elements it checks by size (exact
// dtypes, NaNs and infinities match exactly or fail there).
func worstRatio(got, want, mag *ir.Tensor, tol float64) float64 {
	worst := 0.0
	for i := range want.Len() {
		g, w := ir.OverflowTo(got.DType, got.At(i)), ir.OverflowTo(got.DType, want.At(i))
		if math.IsNaN(g) || math.IsNaN(w) || math.IsInf(g, 0) || math.IsInf(w, 0) {
			continue
		}
		m := math.Abs(w)
		if mag != nil {
			m = math.Max(m, mag.At(i))
		}
		allowed := tol * m
		if tol > 0 {
			allowed = math.Max(allowed, ir.AbsoluteFloor(got.DType, tol))
		}
		if d := math.Abs(g - w); d > 0 {
			if allowed == 0 {
				return math.Inf(1)
			}
			worst = max(worst, d/allowed)
		}
	}
	return worst
}

// writeOutputs writes a run's results (keyed "output NAME" and "state
// NAME") as a safetensors file in the layout ReadOutputs reads: outputs
// by name, updated states by the state's name. meta is the file's
// metadata.
func writeOutputs(path string, g *ir.Graph, results map[string]*ir.Tensor, meta map[string]string) error {
	file := map[string]*ir.Tensor{}
	for _, r := range resultValues(g) {
		t, ok := results[r.key()]
		if !ok {
			continue
		}
		if _, dup := file[r.name]; dup {
			return fmt.Errorf("write %s: %s has the name of an output", path, r.key())
		}
		file[r.name] = t
	}
	return safetensors.WriteFile(path, file, meta)
}

// expectation is an outputs file a run's results are compared with, and
// what the comparison found.
type expectation struct {
	file  string
	want  map[string]*ir.Tensor // as ReadOutputs keys them
	found *OutputsCheck
}

// expect reads f's outputs file for g (nil when f names none).
func (f Feeds) expect(g *ir.Graph) (*expectation, error) {
	if f.Outputs == "" {
		return nil, nil
	}
	want, err := ReadOutputs(f.Outputs, g)
	if err != nil {
		return nil, err
	}
	return &expectation{file: f.Outputs, want: want}, nil
}

// compare checks a run's outputs and states (by name) against the file,
// with the reference's magnitudes when mags is not nil.
func (e *expectation) compare(g *ir.Graph, outs, states, mags map[string]*ir.Tensor) error {
	got := map[string]*ir.Tensor{}
	for name, t := range outs {
		got["output "+name] = t
	}
	for name, t := range states {
		got["state "+name] = t
	}
	c, err := compareOutputs(g, e.file, got, e.want, mags)
	e.found = c
	return err
}
