// Package plan owns plan.json, the description of a compiled program that
// runs without the compiler: where it came from (the model, the options,
// the target and the lumsearch version), its buffers and the arena of
// intermediates, and its launches in order, each with its kernel, grid,
// block and buffers, and the cost model's figures for it.
//
// "lumsearch compile" writes it; the runtime (package gpu), "lumsearch
// bench" and the generated Go package read it back, so a compiled model
// runs from its output folder alone. Parse checks a plan whole before
// anything trusts its buffer ids, sizes or offsets, and refuses a plan of
// another format (FormatVersion). An output folder's plan.json also holds
// the SHA-256 of every other file of the folder, the NVRTC that compiled
// its kernels and the model's source file, and is sealed with a digest of
// its own bytes (Seal, CheckSeal), so that "lumsearch verify" sees any
// byte that changed after it was written.
package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/step"
)

// FileName is the plan's name in a compiled output folder.
const FileName = "plan.json"

// FormatVersion is the version of plan.json's format that this lumsearch
// writes and reads. Format 2 added the format itself, the digests of the
// output folder's files, the NVRTC that compiled the kernels, the model's
// source file and the plan's own digest. Format 3 added the runtime
// symbols (Symbols) and a decode step's position range in Options. Format
// 4 added a serving step's layout (Step), which an older reader would
// ignore and so run a step without checking its metadata. A plan
// of another format is refused with the advice to compile the model
// again.
const FormatVersion = 4

// Plan is plan.json.
type Plan struct {
	// Format is plan.json's format version (FormatVersion).
	Format int `json:"format"`
	// Version is the lumsearch build that wrote the plan.
	Version string `json:"lumsearch_version,omitempty"`
	// Model is what was compiled: a corpus name or an ONNX file's path.
	Model string `json:"model"`
	// Options are the model's build options, so that the same program can
	// be compiled again.
	Options Options `json:"options"`
	// Target is the device the cost model priced for, Arch the
	// architecture the kernels were compiled for.
	Target string `json:"target"`
	Arch   string `json:"arch"`
	// Seed, Command, RulesHash and TuneDBHash are an optimize run's
	// provenance: its seed, its options as text, the SHA-256 of the rule
	// sets it ran and of the tuning database it read ("" when there was
	// none).
	Seed       uint64 `json:"seed,omitempty"`
	Command    string `json:"command_options,omitempty"`
	RulesHash  string `json:"rules_hash,omitempty"`
	TuneDBHash string `json:"tunedb_hash,omitempty"`
	// RuleSets are the rule sets the search ran when they differ from
	// the built-in ones (--disable, --enable), RuleFiles the users' rule
	// files it ran (--rules), and RulesUsed the rules the program's
	// choices rest on, from the e-graph's union provenance (empty for a
	// program that came from elsewhere, such as the previous run's plan).
	RuleSets  []string   `json:"rule_sets,omitempty"`
	RuleFiles []RuleFile `json:"rule_files,omitempty"`
	RulesUsed []RuleUse  `json:"rules_used,omitempty"`
	// ArenaBytes is the arena of intermediates, TempBytes the bytes of
	// intermediates packed into it.
	ArenaBytes int64    `json:"arena_bytes"`
	TempBytes  int64    `json:"temp_bytes"`
	Buffers    []Buffer `json:"buffers"`
	// Prep are the launches run once at load, Run those of every run.
	Prep []Launch `json:"prep"`
	Run  []Launch `json:"run"`
	// Symbols are the program's runtime extents: each is fed as the
	// integer scalar input of its name, which must lie in [Lo, Hi]
	// (lum_run and the Go package refuse other values); Buckets are the
	// values the cost model priced the program at.
	Symbols []Symbol `json:"symbols,omitempty"`
	// Step is a serving step's layout (docs/serving.md): its maxima and
	// KV pool; nil for any other program.
	Step *step.Layout `json:"step,omitempty"`
	// Outputs maps each output's name to its buffer, Updates each state
	// to the buffer holding its new value after a run.
	Outputs map[string]int `json:"outputs"`
	Updates map[string]int `json:"updates,omitempty"`
	// WeightsDigest identifies the prepared weights the program takes
	// (lower.WeightsDigest): a prepared weights file carries it in its
	// metadata under lower.DigestMetadataKey.
	WeightsDigest string `json:"weights_digest,omitempty"`
	// Source is the file the model was read from (an ONNX file or a
	// config.json), nil for a corpus model: where to find it again and
	// what it held.
	Source *Source `json:"source,omitempty"`
	// NVRTC is the compiler of the folder's PTX and CUBIN (nil when
	// NVRTC was missing): the same version with the same options
	// compiles kernels.cu to the same bytes again.
	NVRTC *Compiler `json:"nvrtc,omitempty"`
	// Files are the SHA-256 digests ("sha256:" and hex) of every file of
	// the output folder besides plan.json and the report (report.md and
	// report/), by slash-separated path: a file that differs, is missing
	// or is not listed fails "lumsearch verify". A copy of the plan (the
	// generated Go package's) has none.
	Files map[string]string `json:"files,omitempty"`
	// Digest is the SHA-256 of the plan.json file itself with this
	// value's hex digits written as zeros (Seal): a plan.json edited
	// after it was written fails "lumsearch verify". Last, so that it is
	// the file's last field.
	Digest string `json:"digest,omitempty"`
}

// RuleFile is a user's rule file a search ran: its path as given, the
// SHA-256 of its text ("sha256:" and hex) and its rules' names.
type RuleFile struct {
	Path   string   `json:"path"`
	Digest string   `json:"digest"`
	Rules  []string `json:"rules"`
}

// RuleUse is a rule a program's choices rest on: its name, the rule set
// or file it came from, and the unions of it they need.
type RuleUse struct {
	Rule   string `json:"rule"`
	From   string `json:"from,omitempty"`
	Unions int    `json:"unions"`
}

// Source is a model's file: where it was and what it held.
type Source struct {
	// Path is the file as an absolute path, Rel the same file relative
	// to the output folder, which still finds it when the folder and the
	// model move together.
	Path string `json:"path"`
	Rel  string `json:"rel,omitempty"`
	// Files are the digests of the file and of the files beside it that
	// the model was built with (a config's safetensors weights), by base
	// name.
	Files map[string]string `json:"files"`
}

// Symbol is a runtime extent of a compiled program (ir.Symbol) with the
// buckets it was priced at.
type Symbol struct {
	Name    string  `json:"name"`
	Lo      int64   `json:"lo"`
	Hi      int64   `json:"hi"`
	Buckets []int64 `json:"buckets,omitempty"`
}

// Compiler is the NVRTC that compiled a folder's kernels.
type Compiler struct {
	// Version is NVRTC's "major.minor", Options every option it got.
	Version string   `json:"version"`
	Options []string `json:"options"`
}

// Options are the build options of a model, as "lumsearch compile" takes
// them.
type Options struct {
	Seq  int `json:"seq,omitempty"`
	Past int `json:"past,omitempty"`
	// PastMin and PastMax bound a runtime position (Past -1).
	PastMin int `json:"past_min,omitempty"`
	PastMax int `json:"past_max,omitempty"`
	// Cache is a prefill's KV cache capacity when it is not Seq; MaxSeq
	// the --max-seq it was compiled with (0: none).
	Cache  int              `json:"cache,omitempty"`
	MaxSeq int              `json:"max_seq,omitempty"`
	DType  string           `json:"dtype,omitempty"`
	Dims   map[string]int64 `json:"dims,omitempty"`
	// Step are a serving step's sizes as given (0: the default), nil for
	// any other kind.
	Step *StepOptions `json:"step_options,omitempty"`
}

// StepOptions are corpus.StepOptions as plan.json records them.
type StepOptions struct {
	MaxTokens int  `json:"max_tokens,omitempty"`
	MaxSeqs   int  `json:"max_seqs,omitempty"`
	BlockSize int  `json:"block_size,omitempty"`
	KVBlocks  int  `json:"kv_blocks,omitempty"`
	AllLogits bool `json:"all_logits,omitempty"`
}

// Buffer is one tensor in device memory; see lower.Buffer.
type Buffer struct {
	ID    int     `json:"id"`
	Kind  string  `json:"kind"` // lower.BufferKind's name: input, weight, state, constant, prepared, temp, output
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
	// Offset is a temp buffer's place in the arena.
	Offset int64 `json:"offset,omitempty"`
	// Leaf is a constant buffer's graph leaf (a const or iota node), as a
	// one-node graph in the ir text format, so that the program rebuilt
	// from the plan computes its constants as the compiled one did.
	Leaf string `json:"leaf,omitempty"`
}

// Launch is one kernel launch: the kernel reads buffers Args and writes
// buffers Outs, its parameters in that order.
type Launch struct {
	// Name is the launch's name in the lowered program, Kernel the
	// printed kernel's (launches with equal bodies share a kernel).
	Name   string `json:"name,omitempty"`
	Kernel string `json:"kernel"`
	Form   string `json:"form"`
	// Body is the kernel's body in the ir text format: what it computes,
	// the reference "lumsearch verify" checks the kernel against.
	Body  string `json:"body,omitempty"`
	Grid  [3]int `json:"grid"`
	Block [3]int `json:"block"`
	Args  []int  `json:"args"`
	Outs  []int  `json:"outs"`
	// Rows, for a serving step's row-wise launch (lower.Rows), says how
	// its kernel learns the tokens present and how its grid follows them.
	Rows *Rows `json:"rows,omitempty"`
	// Buckets, for such a launch, are the kernels it runs by the rows
	// present, ascending; the last one's Hi is Rows.Max.
	Buckets []Bucket `json:"buckets,omitempty"`
	// Predicted is the cost model's time for the launch, in seconds.
	Predicted float64 `json:"predicted_s"`
	// Registers, Shared, Spills and Stack are NVRTC's (ptxas's) report for
	// the kernel: registers per thread, static shared memory per block,
	// bytes of register spill stores and the stack frame per thread (the
	// cumulative stack where ptxas gives one). A frame without spills is
	// local memory all the same: an array indexed at run time (an
	// accumulator tile) that ptxas could not keep in registers.
	Registers int `json:"registers,omitempty"`
	Shared    int `json:"shared_bytes,omitempty"`
	Spills    int `json:"spill_bytes,omitempty"`
	Stack     int `json:"stack_bytes,omitempty"`
	// Schedule is the schedule printed; Alternatives the next best by
	// the cost model, the candidates a measuring run tries.
	Schedule     string        `json:"schedule"`
	Alternatives []Alternative `json:"alternatives,omitempty"`
	// Bytes and Work are the cost model's DRAM traffic and arithmetic
	// (by instruction class and dtype) for the printed schedule.
	Bytes float64            `json:"bytes,omitempty"`
	Work  map[string]float64 `json:"work,omitempty"`
	// InFlight is the DRAM bytes one busy multiprocessor keeps
	// outstanding under the printed schedule (its resident warps' loads in
	// flight), which with the device's latency bounds the bandwidth the
	// kernel draws; 0 where the model does not know it.
	InFlight float64 `json:"in_flight_per_sm,omitempty"`
	// Issue is the warp instructions the launch issues by pipe, when the
	// model counted them (from the kernel's PTX or its form).
	Issue *Issue `json:"issue,omitempty"`
	// Bound names what bounds the predicted time: dram, latency (Little's
	// law), l2, shared, arithmetic, issue or launch.
	Bound string `json:"bound,omitempty"`
	// Loop is one iteration of the kernel's main loop, per warp and by
	// pipe, read from NVRTC's PTX (nil without NVRTC or without a loop
	// that loads global memory or runs mma).
	Loop *Issue `json:"loop_per_warp,omitempty"`
}

// Issue is a launch's warp instructions by the pipe that executes them.
type Issue struct {
	Int    float64 `json:"int"`
	FP     float64 `json:"fp"`
	Load   float64 `json:"load"`
	Shared float64 `json:"shared"`
	Other  float64 `json:"other"`
}

// Alternative is a schedule the cost model ranked below the printed one.
type Alternative struct {
	Schedule  string  `json:"schedule"`
	Predicted float64 `json:"predicted_s"`
}

// Params are the buffers launch l passes its kernel, in parameter order.
func (l Launch) Params() []int {
	var rows []int
	if l.Rows != nil {
		rows = l.Rows.Args
	}
	return slices.Concat(l.Args, rows, l.Outs)
}

// Build describes a lowered program and its printed kernels (one per
// launch, cuda.PrintProgram's order: Prep then Run). res holds NVRTC's
// report by kernel name (may be nil); m prices the launches whose kernels
// carry no estimate (may be nil).
func Build(lp *lower.Program, ks []*cuda.Kernel, res map[string]nvrtc.Resources, m *cost.Model) (*Plan, error) {
	launches := append(slices.Clone(lp.Prep), lp.Run...)
	if len(ks) != len(launches) {
		return nil, fmt.Errorf("plan of %s: %d kernels for %d launches", lp.Name, len(ks), len(launches))
	}
	digest, err := lower.WeightsDigest(lp)
	if err != nil {
		return nil, fmt.Errorf("plan of %s: %w", lp.Name, err)
	}
	p := &Plan{Format: FormatVersion, ArenaBytes: lp.ArenaBytes, TempBytes: lp.TempBytes, Outputs: maps.Clone(lp.Outputs), Updates: maps.Clone(lp.Updates), WeightsDigest: digest}
	for _, s := range lp.Symbols {
		p.Symbols = append(p.Symbols, Symbol{Name: s.Name, Lo: s.Lo, Hi: s.Hi, Buckets: s.Buckets()})
	}
	if lp.Step != nil {
		l := *lp.Step
		p.Step = &l
	}
	for _, b := range lp.Buffers {
		shape := make([]int64, len(b.Shape))
		for i, d := range b.Shape {
			shape[i] = int64(d)
		}
		pb := Buffer{ID: b.ID, Kind: b.Kind.String(), Name: b.Name, DType: b.DType.String(), Shape: shape, Bytes: b.Bytes, Offset: b.Offset}
		if b.Kind == lower.Constant && b.Leaf != nil {
			pb.Leaf = leafGraph(b.Leaf).String()
		}
		p.Buffers = append(p.Buffers, pb)
	}
	for i, l := range launches {
		k := ks[i]
		pl := Launch{Name: l.Name, Kernel: k.Name, Form: l.Form.String(), Body: l.Body.String(), Grid: k.Grid, Block: k.Block,
			Args: slices.Clone(l.Args), Outs: slices.Clone(l.Outs), Schedule: k.Schedule.String()}
		if l.Rows != nil {
			pl.Rows = &Rows{Max: l.Rows.Max, Seqs: l.Rows.Seqs, Axis: l.Rows.Axis, Args: slices.Clone(l.Rows.Args), GridAxis: -1, In: slices.Clone(l.Rows.In)}
			if k.Rows != nil {
				pl.Rows.GridAxis, pl.Rows.Num, pl.Rows.Den = k.Rows.Dim, k.Rows.Num, k.Rows.Den
			}
			for _, b := range k.Buckets {
				pb := Bucket{Hi: b.Hi, Kernel: b.Kernel.Name, Schedule: b.Kernel.Schedule.String(), Grid: b.Kernel.Grid, Block: b.Kernel.Block, GridAxis: -1, Predicted: b.Estimate.Seconds}
				if r := b.Kernel.Rows; r != nil {
					pb.GridAxis, pb.Num, pb.Den = r.Dim, r.Num, r.Den
				}
				pl.Buckets = append(pl.Buckets, pb)
			}
		}
		est := k.Estimate
		if est == nil && m != nil {
			if e, err := m.Kernel(l.Body); err == nil {
				est = &e
			}
		}
		if est != nil {
			pl.Predicted, pl.Bytes = est.Seconds, est.Features.Bytes
			pl.Bound = est.Bound
			if m != nil {
				pl.InFlight = est.Features.InFlightPerSM(m.Device)
			}
			if is := est.Features.Issue; is.Total() > 0 {
				pl.Issue = &Issue{Int: is.Int, FP: is.FP, Load: is.Load, Shared: is.Shared, Other: is.Other}
			}
			for _, w := range est.Features.Work {
				if w.FLOPs > 0 {
					if pl.Work == nil {
						pl.Work = map[string]float64{}
					}
					pl.Work[string(w.Class)+" "+w.DType] += w.FLOPs
				}
			}
		}
		for _, a := range k.Alternatives {
			pl.Alternatives = append(pl.Alternatives, Alternative{Schedule: a.Schedule.String(), Predicted: a.Seconds})
		}
		if r, ok := res[k.Name]; ok {
			pl.Registers, pl.Shared, pl.Spills, pl.Stack = r.Registers, r.SharedBytes, r.SpillStores, r.StackBytes
		}
		if i < len(lp.Prep) {
			p.Prep = append(p.Prep, pl)
		} else {
			p.Run = append(p.Run, pl)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("plan of %s: %w", lp.Name, err)
	}
	return p, nil
}

// kinds are the buffer kinds a plan may name.
var kinds = map[string]bool{}

func init() {
	for k := lower.Input; k <= lower.Output; k++ {
		kinds[k.String()] = true
	}
}

// maxRank and maxBytes bound what a plan may declare, so that a damaged
// file cannot make its reader allocate without limit.
const (
	maxRank  = 16
	maxBytes = 1 << 46
)

// Validate checks that the plan is whole: buffer ids are their places,
// kinds and dtypes are known, each buffer's bytes are its shape's, temp
// buffers lie inside the arena, launches name existing buffers and write
// no input, weight or constant, and outputs and updates name buffers of
// the right kinds.
func (p *Plan) Validate() error {
	if p.ArenaBytes < 0 || p.ArenaBytes > maxBytes {
		return fmt.Errorf("arena_bytes %d out of range", p.ArenaBytes)
	}
	for i, b := range p.Buffers {
		if b.ID != i {
			return fmt.Errorf("buffer %d has id %d", i, b.ID)
		}
		if !kinds[b.Kind] {
			return fmt.Errorf("buffer %d (%s): unknown kind %q", i, b.Name, b.Kind)
		}
		vt, err := b.Type()
		if err != nil {
			return fmt.Errorf("buffer %d (%s): %w", i, b.Name, err)
		}
		if want := vt.Shape.NumElements() * int64(vt.DType.Size()); b.Bytes != want {
			return fmt.Errorf("buffer %d (%s): %d bytes for %s%v, want %d", i, b.Name, b.Bytes, b.DType, b.Shape, want)
		}
		if b.Kind == lower.Temp.String() {
			if b.Offset < 0 || b.Offset > p.ArenaBytes-b.Bytes {
				return fmt.Errorf("buffer %d (%s): %d bytes at arena offset %d overrun the %d-byte arena", i, b.Name, b.Bytes, b.Offset, p.ArenaBytes)
			}
		} else if b.Offset != 0 {
			return fmt.Errorf("buffer %d (%s): a %s buffer has no arena offset", i, b.Name, b.Kind)
		}
	}
	if err := p.validateSymbols(); err != nil {
		return err
	}
	readOnly := map[string]bool{lower.Input.String(): true, lower.Weight.String(): true, lower.Constant.String(): true}
	for _, group := range []struct {
		name string
		ls   []Launch
	}{{"prep", p.Prep}, {"run", p.Run}} {
		for i, l := range group.ls {
			if l.Kernel == "" {
				return fmt.Errorf("%s launch %d has no kernel", group.name, i)
			}
			for d := range 3 {
				if l.Grid[d] < 1 || l.Block[d] < 1 {
					return fmt.Errorf("%s launch %d (%s): grid %v, block %v", group.name, i, l.Kernel, l.Grid, l.Block)
				}
			}
			if t := l.Block[0] * l.Block[1] * l.Block[2]; t > 1024 {
				return fmt.Errorf("%s launch %d (%s): %d threads per block", group.name, i, l.Kernel, t)
			}
			if r := l.Rows; r != nil {
				if group.name == "prep" || len(r.Args) != 2 || r.Max < 1 || r.Axis < 0 || r.GridAxis < -1 || r.GridAxis > 2 || r.GridAxis >= 0 && (r.Num < 1 || r.Den < 1) {
					return fmt.Errorf("%s launch %d (%s): a row count %+v; want a run's launch, the buffers of query_start and seqs, a grid axis -1..2 and a positive ratio", group.name, i, l.Kernel, *r)
				}
				for j, id := range r.Args {
					if id < 0 || id >= len(p.Buffers) || p.Buffers[id].Kind != lower.Input.String() || len(p.Buffers[id].Shape) != 1-j {
						return fmt.Errorf("%s launch %d (%s): the row count reads buffer %d, not the input query_start and the scalar seqs", group.name, i, l.Kernel, id)
					}
				}
				if r.In != nil && len(r.In) != len(l.Args) {
					return fmt.Errorf("%s launch %d (%s): rows given for %d of its %d inputs", group.name, i, l.Kernel, len(r.In), len(l.Args))
				}
				if err := validBuckets(l); err != nil {
					return fmt.Errorf("%s launch %d (%s): %w", group.name, i, l.Kernel, err)
				}
			} else if len(l.Buckets) > 0 {
				return fmt.Errorf("%s launch %d (%s): row buckets without a row count", group.name, i, l.Kernel)
			}
			for _, id := range l.Params() {
				if id < 0 || id >= len(p.Buffers) {
					return fmt.Errorf("%s launch %d (%s): buffer %d of %d", group.name, i, l.Kernel, id, len(p.Buffers))
				}
			}
			if len(l.Outs) == 0 {
				return fmt.Errorf("%s launch %d (%s) writes nothing", group.name, i, l.Kernel)
			}
			for _, id := range l.Outs {
				if b := p.Buffers[id]; readOnly[b.Kind] {
					return fmt.Errorf("%s launch %d (%s) writes %s buffer %d (%s)", group.name, i, l.Kernel, b.Kind, id, b.Name)
				}
			}
		}
	}
	for what, m := range map[string]map[string]int{"output": p.Outputs, "update": p.Updates} {
		for name, id := range m {
			if id < 0 || id >= len(p.Buffers) {
				return fmt.Errorf("%s %s: buffer %d of %d", what, name, id, len(p.Buffers))
			}
			// An update may name the intermediate a run copies into
			// its state at the end; an output must outlive the run.
			if k := p.Buffers[id].Kind; what == "output" && k == lower.Temp.String() {
				return fmt.Errorf("%s %s is temp buffer %d, which is not kept after a run", what, name, id)
			}
		}
	}
	return nil
}

// Type is the buffer's dtype and shape.
func (b Buffer) Type() (ir.ValueType, error) {
	dt, err := ir.ParseDType(b.DType)
	if err != nil {
		return ir.ValueType{}, err
	}
	if len(b.Shape) > maxRank {
		return ir.ValueType{}, fmt.Errorf("rank %d", len(b.Shape))
	}
	shape := make(ir.Shape, len(b.Shape))
	n := int64(1)
	for i, d := range b.Shape {
		if d < 0 || (n > 0 && d > maxBytes/n) {
			return ir.ValueType{}, fmt.Errorf("shape %v out of range", b.Shape)
		}
		n *= d
		shape[i] = ir.Dim(d)
	}
	return ir.ValueType{Shape: shape, DType: dt}, nil
}

// Parse reads a plan and validates it; name says where it came from.
func Parse(name string, data []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("plan %s: %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("plan %s: data after the plan", name)
	}
	if p.Format != FormatVersion {
		by := "an older lumsearch"
		if p.Version != "" {
			by = "lumsearch " + p.Version
		}
		if p.Format == 0 {
			return nil, fmt.Errorf("plan %s was written by %s, before plan.json had a format version; this lumsearch reads format %d: compile the model again", name, by, FormatVersion)
		}
		return nil, fmt.Errorf("plan %s has format %d (written by %s); this lumsearch reads format %d: compile the model again", name, p.Format, by, FormatVersion)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("plan %s: %w", name, err)
	}
	return &p, nil
}

// Read reads DIR/plan.json.
func Read(dir string) (*Plan, error) {
	path := filepath.Join(dir, FileName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return Parse(path, data)
}

// Encode is the plan as plan.json holds it: indented, with a final
// newline.
func (p *Plan) Encode() ([]byte, error) {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// Write writes DIR/plan.json.
func (p *Plan) Write(dir string) error {
	data, err := p.Encode()
	if err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o644); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// Kernels returns the distinct kernel names of the plan's launches, in
// first-use order (Prep, then Run), each launch's own kernel before its
// row buckets'.
func (p *Plan) Kernels() []string {
	var names []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			names = append(names, k)
		}
	}
	for _, l := range append(slices.Clone(p.Prep), p.Run...) {
		add(l.Kernel)
		for _, b := range l.Buckets {
			add(b.Kernel)
		}
	}
	return names
}

// leafGraph is a constant's leaf as a graph of its own.
func leafGraph(leaf *ir.Node) *ir.Graph {
	return &ir.Graph{Name: "constant", Nodes: []*ir.Node{leaf}, Outputs: []ir.Output{{Name: "out", Value: 0}}}
}

// ConstantsFile holds, in a compiled output folder, the values of the
// program's constant buffers by buffer name: what the runtime uploads for
// them, since plan.json holds no tensor data.
const ConstantsFile = "constants.safetensors"

// Constants evaluates a lowered program's constant buffers (the graph's
// constants and iotas), by buffer name; buffers without a graph leaf (a
// program rebuilt by Lowered) are left out.
func Constants(ctx context.Context, lp *lower.Program) (map[string]*ir.Tensor, error) {
	out := map[string]*ir.Tensor{}
	for _, b := range lp.Buffers {
		if b.Kind != lower.Constant || b.Leaf == nil {
			// A program rebuilt from a plan has no leaves: its
			// constants are in the output folder's file.
			continue
		}
		if _, dup := out[b.Name]; dup {
			return nil, fmt.Errorf("constants of %s: two constant buffers are named %s", lp.Name, b.Name)
		}
		t, err := b.Value(ctx)
		if err != nil {
			return nil, fmt.Errorf("constants of %s: %w", lp.Name, err)
		}
		out[b.Name] = t
	}
	return out, nil
}

// Lowered rebuilds the lowered program the plan describes, each launch's
// body parsed from its text: what the emulation runs and the verifier
// checks. Its constant buffers have no graph leaves (their values are in
// the output folder's constants file), and its launches no forms or
// classes. A plan written without bodies cannot be rebuilt.
func (p *Plan) Lowered(name string) (*lower.Program, error) {
	kindOf := map[string]lower.BufferKind{}
	for k := lower.Input; k <= lower.Output; k++ {
		kindOf[k.String()] = k
	}
	lp := &lower.Program{Name: name, ArenaBytes: p.ArenaBytes, TempBytes: p.TempBytes, Outputs: maps.Clone(p.Outputs), Updates: maps.Clone(p.Updates)}
	for _, s := range p.Symbols {
		lp.Symbols = append(lp.Symbols, ir.Symbol{Name: s.Name, Lo: s.Lo, Hi: s.Hi})
	}
	if p.Step != nil {
		if err := p.Step.Validate(); err != nil {
			return nil, fmt.Errorf("plan of %s: step: %w", name, err)
		}
		l := *p.Step
		lp.Step = &l
	}
	for _, b := range p.Buffers {
		vt, err := b.Type()
		if err != nil {
			return nil, fmt.Errorf("plan of %s: buffer %d: %w", name, b.ID, err)
		}
		lb := &lower.Buffer{ID: b.ID, Kind: kindOf[b.Kind], Name: b.Name, Shape: vt.Shape, DType: vt.DType, Bytes: b.Bytes, Offset: b.Offset}
		if b.Leaf != "" {
			if lb.Kind != lower.Constant {
				return nil, fmt.Errorf("plan of %s: %s buffer %d has a constant's leaf", name, b.Kind, b.ID)
			}
			g, err := ir.Parse(b.Leaf)
			if err != nil {
				return nil, fmt.Errorf("plan of %s: constant buffer %d: %w", name, b.ID, err)
			}
			if len(g.Nodes) != 1 || (g.Nodes[0].Op != ir.OpConst && g.Nodes[0].Op != ir.OpIota) {
				return nil, fmt.Errorf("plan of %s: constant buffer %d: its leaf is not one const or iota node", name, b.ID)
			}
			if leaf := g.Nodes[0]; leaf.DType != vt.DType || !leaf.Shape.Equal(vt.Shape) {
				return nil, fmt.Errorf("plan of %s: constant buffer %d is %s%v, its leaf %s%v", name, b.ID, vt.DType, vt.Shape, leaf.DType, leaf.Shape)
			}
			lb.Leaf = g.Nodes[0]
		}
		lp.Buffers = append(lp.Buffers, lb)
	}
	for i, l := range append(slices.Clone(p.Prep), p.Run...) {
		if l.Body == "" {
			return nil, fmt.Errorf("plan of %s: launch %d (%s) has no body; compile the model again with this version", name, i, l.Kernel)
		}
		body, err := ir.Parse(l.Body)
		if err != nil {
			return nil, fmt.Errorf("plan of %s: launch %d (%s): %w", name, i, l.Kernel, err)
		}
		if got, want := len(body.Inputs()), len(l.Args); got != want {
			return nil, fmt.Errorf("plan of %s: launch %d (%s): its body reads %d inputs, the launch passes %d", name, i, l.Kernel, got, want)
		}
		if got, want := len(body.Outputs), len(l.Outs); got != want {
			return nil, fmt.Errorf("plan of %s: launch %d (%s): its body writes %d outputs, the launch %d buffers", name, i, l.Kernel, got, want)
		}
		for j, v := range body.Inputs() {
			n, b := body.Node(v), lp.Buffers[l.Args[j]]
			if n.DType != b.DType || !n.Shape.Equal(b.Shape) {
				return nil, fmt.Errorf("plan of %s: launch %d (%s): input %d is %s%v in its body, buffer %d is %s%v", name, i, l.Kernel, j, n.DType, n.Shape, b.ID, b.DType, b.Shape)
			}
		}
		for j, o := range body.Outputs {
			n, b := body.Node(o.Value), lp.Buffers[l.Outs[j]]
			w, windowed, err := lower.OutputWindow(body, j)
			if err != nil {
				return nil, fmt.Errorf("plan of %s: launch %d (%s): %w", name, i, l.Kernel, err)
			}
			shape := n.Shape
			if windowed {
				shape = w.Shape
			}
			if n.DType != b.DType || !shape.Equal(b.Shape) {
				return nil, fmt.Errorf("plan of %s: launch %d (%s): output %d is %s%v in its body, buffer %d is %s%v", name, i, l.Kernel, j, n.DType, shape, b.ID, b.DType, b.Shape)
			}
		}
		ll := &lower.Launch{Name: l.Name, Body: body, Form: rules.FormOf(body), Args: slices.Clone(l.Args), Outs: slices.Clone(l.Outs)}
		if l.Rows != nil {
			ll.Rows = &lower.Rows{Max: l.Rows.Max, Seqs: l.Rows.Seqs, Axis: l.Rows.Axis, Args: slices.Clone(l.Rows.Args), In: slices.Clone(l.Rows.In)}
		}
		if i < len(p.Prep) {
			lp.Prep = append(lp.Prep, ll)
		} else {
			lp.Run = append(lp.Run, ll)
		}
	}
	return lp, nil
}

// validateSymbols checks that each symbol is named once, has a range, and
// is fed through an integer scalar input buffer of its name.
func (p *Plan) validateSymbols() error {
	seen := map[string]bool{}
	for _, s := range p.Symbols {
		if seen[s.Name] {
			return fmt.Errorf("two symbols named %q", s.Name)
		}
		seen[s.Name] = true
		if s.Lo < 0 || s.Lo > s.Hi {
			return fmt.Errorf("symbol %s: range %d..%d", s.Name, s.Lo, s.Hi)
		}
		i := slices.IndexFunc(p.Buffers, func(b Buffer) bool { return b.Kind == lower.Input.String() && b.Name == s.Name })
		if i < 0 {
			return fmt.Errorf("symbol %s has no input buffer", s.Name)
		}
		vt, err := p.Buffers[i].Type()
		if err != nil || !vt.DType.IsInt() || len(vt.Shape) != 0 || s.Hi > vt.DType.MaxInt() {
			return fmt.Errorf("symbol %s: its input is %s%v, not an integer scalar that holds %d", s.Name, p.Buffers[i].DType, p.Buffers[i].Shape, s.Hi)
		}
	}
	return nil
}

// CheckSymbol says whether v is a value symbol name may take when the
// program runs: within the range it was compiled for. A name that is not
// a symbol of the plan passes.
func (p *Plan) CheckSymbol(name string, v int64) error {
	for _, s := range p.Symbols {
		if s.Name == name && (v < s.Lo || v > s.Hi) {
			return fmt.Errorf("%s=%d is outside the range %s was compiled for, %d..%d", name, v, p.Model, s.Lo, s.Hi)
		}
	}
	return nil
}
