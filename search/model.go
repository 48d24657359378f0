package search

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/corpus/onnx"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
)

// Model is a model graph with the name it was loaded by and how it was
// built. The name is the model's provenance: plan.json records it, and
// Verify and Bench rebuild the graph from it with the same Build, Kind
// and Dims. A graph made in Go needs no loading: fill Name and Graph (and
// Weights when it has its own) and leave the rest zero; such a model is
// verified whole under the emulation, not at a reduced size.
type Model struct {
	// Name is a corpus name (see corpus.Names), an ONNX file, or a
	// Hugging Face config as "DIR/config.json:KIND".
	Name  string
	Graph *ir.Graph
	// Weights are the model's own (an ONNX model's initializers,
	// safetensors beside a config); nil means random weights.
	Weights map[string]*ir.Tensor
	// Options are those it was built with.
	Options ModelOptions

	close func()
}

// ModelOptions say how LoadModel builds a graph.
type ModelOptions struct {
	// Build sizes a corpus or config model: tokens per sequence, the
	// decode position, the dtype of weights and activations.
	Build corpus.Options
	// Kind is what to build from a Hugging Face folder or a config file
	// named without a kind: model, layer, decode, ... ("" means model).
	Kind string
	// Dims bind an ONNX model's symbolic dimensions, or pin a corpus
	// decode step's position (past).
	Dims Dims
	// Ranges make symbols runtime extents over a range: a decode step's
	// position, past (see DimFlag).
	Ranges map[string]ir.Symbol
}

// Close releases what the model maps (an ONNX file's weights). It is safe
// to call on a model built in Go and more than once.
func (m *Model) Close() {
	if m != nil && m.close != nil {
		m.close()
		m.close = nil
	}
}

// LoadModel loads the model called name: a folder holding a Hugging Face
// config.json or the path of a config file ending in .json (either built
// as o.Kind; a config.json with the safetensors weights beside it when
// there are any), an ONNX file (its symbolic dimensions bound by o.Dims;
// its weights memory-mapped until Close), or a corpus name, which may be
// a config file as "PATH.json:KIND". "DIR/config.json:KIND" is the name
// plan.json records for a folder: when DIR holds safetensors weights, the
// model is built with them, as it was compiled. Dims given for anything
// but an ONNX file, and a length beyond the model's positions, are option
// errors.
func LoadModel(name string, o ModelOptions) (*Model, error) {
	m, err := loadModel(name, o)
	var pe *corpus.PositionsError
	if errors.As(err, &pe) {
		return nil, withKind(KindOption, err)
	}
	return m, err
}

func loadModel(name string, o ModelOptions) (*Model, error) {
	if o.Kind == "" {
		o.Kind = "model"
	}
	if !strings.HasSuffix(name, ".onnx") {
		var err error
		if o, err = corpusSymbols(name, o); err != nil {
			return nil, err
		}
	} else if o.Build.MaxSeq > 0 {
		return nil, optionErrorf("--max-seq %d sizes a corpus model's KV cache; an ONNX model's sizes are its dimensions (--dim)", o.Build.MaxSeq)
	} else if len(o.Ranges) > 0 {
		for _, r := range o.Ranges {
			return nil, optionErrorf("--dim %s=%d..%d: an ONNX model's dimensions are pinned (NAME=VALUE) for now; runtime ranges apply to a decode step's %s", r.Name, r.Lo, r.Hi, corpus.PastSymbol)
		}
	}
	if st, err := os.Stat(name); err == nil && st.IsDir() {
		return loadFolder(name, filepath.Join(name, "config.json"), o)
	}
	if strings.HasSuffix(name, ".json") {
		// A config file alone is its folder's model: recorded, and built
		// again, as "PATH.json:KIND".
		if filepath.Base(name) == "config.json" {
			return loadFolder(filepath.Dir(name), name, o)
		}
		name += ":" + o.Kind
	}
	m := &Model{Name: name, Options: o}
	if i := strings.LastIndex(name, ".json:"); i >= 0 {
		// The name a folder's model is recorded by: built again with
		// the folder's weights, as it was compiled.
		cfgPath := name[:i+len(".json")]
		if filepath.Base(cfgPath) == "config.json" && hasSafetensors(filepath.Dir(cfgPath)) {
			o.Kind = name[i+len(".json:"):]
			m, err := loadFolder(filepath.Dir(cfgPath), cfgPath, o)
			if m != nil {
				m.Name = name
			}
			return m, err
		}
	}
	if !strings.HasSuffix(name, ".onnx") {
		g, err := corpus.Build(name, o.Build)
		if err != nil {
			return nil, err
		}
		m.Graph = g
		return m, nil
	}
	f, err := onnx.Load(name)
	if err != nil {
		return nil, err
	}
	im, err := onnx.Import(f, onnx.ImportOptions{Dims: o.Dims})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("import %s: %w", name, err)
	}
	m.Graph, m.Weights, m.close = im.Graph, im.Weights, func() { f.Close() }
	return m, nil
}

// loadFolder builds a Hugging Face folder's config (cfgPath, its
// config.json) as o.Kind, with the folder's safetensors weights when it
// has any.
func loadFolder(dir, cfgPath string, o ModelOptions) (*Model, error) {
	cfg, err := corpus.LoadConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	name := cfgPath + ":" + o.Kind
	g, err := corpus.BuildConfig(name, cfg, o.Kind, o.Build)
	if err != nil {
		return nil, err
	}
	m := &Model{Name: name, Graph: g, Options: o}
	if hasSafetensors(dir) {
		w, set, err := corpus.SafetensorsWeights(g, dir)
		if err != nil {
			return nil, err
		}
		m.Weights, m.close = w, func() { set.Close() }
	}
	return m, nil
}

// hasSafetensors says whether dir holds safetensors weights.
func hasSafetensors(dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	return len(matches) > 0
}

// imported says whether the model came from an ONNX file.
func (m *Model) imported() bool { return strings.HasSuffix(m.Name, ".onnx") }

// reducible says whether the model's architecture can be built again at a
// reduced size (a corpus model or a config), which is how a model too
// large to emulate whole has its wiring checked.
func (m *Model) reducible() bool {
	i := strings.LastIndexByte(m.Name, ':')
	if i < 0 || m.imported() {
		return false
	}
	if strings.HasSuffix(m.Name[:i], ".json") {
		return true
	}
	_, err := corpus.EmbeddedConfig(m.Name[:i])
	return err == nil
}

// matchesModel checks that the program's inputs, weights and states are
// the model's, by name, dtype and shape.
func matchesModel(g *ir.Graph, lp *lower.Program) error {
	// A runtime extent's range is part of what a program serves.
	if !slices.Equal(g.Symbols, lp.Symbols) {
		return fmt.Errorf("its runtime extents are %s, the program's %s", symbolsText(g.Symbols), symbolsText(lp.Symbols))
	}
	leaves := map[string]*ir.Node{}
	for _, n := range g.Nodes {
		if n.Op == ir.OpInput || n.Op == ir.OpWeight || n.Op == ir.OpState {
			leaves[n.Name] = n
		}
	}
	for _, b := range lp.Buffers {
		if b.Kind != lower.Input && b.Kind != lower.Weight && b.Kind != lower.State {
			continue
		}
		n, ok := leaves[b.Name]
		if !ok {
			return fmt.Errorf("it has no %s %s", b.Kind, b.Name)
		}
		if n.DType != b.DType || !n.Shape.Equal(b.Shape) {
			return fmt.Errorf("its %s %s is %s%v, the program's %s%v", b.Kind, b.Name, n.DType, n.Shape, b.DType, b.Shape)
		}
	}
	return nil
}

// corpusSymbols applies --dim to a corpus or config model: past, the
// position of a decode step, pinned (past=P) or over a range
// (past=LO..HI, within the cache's Seq positions). Other names, and past
// for a kind other than decode, are option errors.
func corpusSymbols(name string, o ModelOptions) (ModelOptions, error) {
	kind := o.Kind
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		kind = name[i+1:]
	}
	for n, v := range o.Dims {
		if n != corpus.PastSymbol {
			return o, optionErrorf("--dim %s=%d: %s has no dimension %s (a decode step has %s; an ONNX model's own dimensions are named in the file)", n, v, name, n, corpus.PastSymbol)
		}
	}
	for n, r := range o.Ranges {
		if n != corpus.PastSymbol {
			return o, optionErrorf("--dim %s=%d..%d: %s has no dimension %s (a decode step has %s)", n, r.Lo, r.Hi, name, n, corpus.PastSymbol)
		}
	}
	p, pinned := o.Dims[corpus.PastSymbol]
	r, ranged := o.Ranges[corpus.PastSymbol]
	if ranged && r.Lo == r.Hi {
		// One value is a pin: a static program serves it.
		p, pinned, ranged = r.Lo, true, false
	}
	if !pinned && !ranged {
		return o, nil
	}
	if kind != "decode" {
		return o, optionErrorf("--dim %s: only a decode step has a position; %s is %s", corpus.PastSymbol, name, kind)
	}
	seq := o.Build.Seq
	if o.Build.MaxSeq > 0 {
		seq = o.Build.MaxSeq
	}
	if seq == 0 {
		seq = corpus.DefaultSeq
	}
	if pinned {
		if p >= int64(seq) {
			return o, optionErrorf("--dim %s=%d: the KV cache holds %d positions (--seq/--max-seq), so %s is at most %d", corpus.PastSymbol, p, seq, corpus.PastSymbol, seq-1)
		}
		o.Build.Past = int(p)
	} else {
		if r.Hi >= int64(seq) {
			return o, optionErrorf("--dim %s=%d..%d: the KV cache holds %d positions (--seq/--max-seq), so %s is at most %d", corpus.PastSymbol, r.Lo, r.Hi, seq, corpus.PastSymbol, seq-1)
		}
		o.Build.Past, o.Build.PastMin, o.Build.PastMax = -1, int(r.Lo), int(r.Hi)
	}
	o.Dims, o.Ranges = nil, nil // applied to Build, which plan.json records
	return o, nil
}

// DimFlag is the --dim flag: each Set takes NAME=VALUE, which pins a
// dimension (into Pins), or NAME=LO..HI, which makes it a runtime extent
// over that range (into Ranges).
type DimFlag struct {
	Pins   Dims
	Ranges map[string]ir.Symbol
}

// String is the pins and ranges in name order.
func (d DimFlag) String() string {
	parts := []string{}
	if len(d.Pins) > 0 {
		parts = append(parts, d.Pins.String())
	}
	for _, name := range slices.Sorted(maps.Keys(d.Ranges)) {
		r := d.Ranges[name]
		parts = append(parts, fmt.Sprintf("%s=%d..%d", name, r.Lo, r.Hi))
	}
	return strings.Join(parts, ",")
}

// Set adds one pin or range; a name given twice keeps the last.
func (d DimFlag) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	lo, hi, isRange := strings.Cut(val, "..")
	if !ok || name == "" || !isRange {
		delete(d.Ranges, name)
		return d.Pins.Set(s)
	}
	a, err1 := strconv.ParseInt(lo, 10, 64)
	b, err2 := strconv.ParseInt(hi, 10, 64)
	if err1 != nil || err2 != nil || a < 0 || a > b {
		return fmt.Errorf("want NAME=VALUE or NAME=LO..HI with integers 0 <= LO <= HI, got %q", s)
	}
	delete(d.Pins, name)
	d.Ranges[name] = ir.Symbol{Name: name, Lo: a, Hi: b}
	return nil
}

// RangeFlag is the --expect flag: runtime extents by name, each over a
// range NAME=LO..HI (NAME=VALUE is a range of one value).
type RangeFlag map[string]ir.Symbol

// String is the ranges in name order.
func (r RangeFlag) String() string { return DimFlag{Ranges: r}.String() }

// Set adds one range; a name given twice keeps the last.
func (r RangeFlag) Set(s string) error {
	d := DimFlag{Pins: Dims{}, Ranges: r}
	if err := d.Set(s); err != nil {
		return err
	}
	for name, v := range d.Pins {
		r[name] = ir.Symbol{Name: name, Lo: v, Hi: v}
	}
	return nil
}

// Dims bind an ONNX model's symbolic dimensions by name. It is a
// flag.Value: each Set takes one NAME=VALUE.
type Dims map[string]int64

// String is the bindings in name order, "NAME=VALUE" joined by commas.
func (d Dims) String() string {
	parts := make([]string, 0, len(d))
	for k, v := range d {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Set adds one binding, NAME=VALUE with a positive VALUE.
func (d Dims) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	n, err := strconv.ParseInt(val, 10, 64)
	if !ok || name == "" || err != nil || n < 0 || n == 0 && name != corpus.PastSymbol {
		return fmt.Errorf("want NAME=VALUE with a positive integer VALUE, got %q", s)
	}
	d[name] = n
	return nil
}
