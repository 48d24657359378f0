// Package report owns report.md and its SVG charts: what an optimize run
// shows people about its search, its program and the rules behind it.
//
// A Report is plain data. The search package fills it in from its own
// records (the loop's steps, the lowered program's kernels, the cost
// model's prices, the rule statistics) and this package only renders it,
// so the report never imports the search: it can be rendered, tested and
// grown (per-bucket tables, new charts) without a search to run, and the
// search cannot reach into how it is drawn. Rendering is deterministic:
// equal reports give equal bytes, which keeps two runs' folders identical
// and lets the tests compare against golden files.
//
// The charts are drawn by the small SVG writers of this package
// (LineChart, BarChart, ScatterChart) rather than a plotting library, for
// the same byte-for-byte reason.
package report

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lumsearch/lumsearch/plan"
)

// FileName is the Markdown file WriteFiles writes in its directory.
const FileName = "report.md"

// AssetsDir is the directory, beside FileName, that holds the charts
// report.md links (relative links, so the directory can move).
const AssetsDir = "report"

// Report is what report.md shows about one optimize run. The search fills
// it in; Markdown and the SVG charts render it. Everything in it is
// deterministic for a given input, seed and options, except the fields
// marked as wall-clock figures, which are left zero when the search was
// ended by its work limits (so that two such runs write identical files).
type Report struct {
	Model   string // the model's name (corpus name or file)
	Target  string // the device the cost model priced for
	Arch    string // the architecture compiled for
	Version string // lumsearch's version
	Seed    uint64
	// Options is the command line's options in a canonical text form.
	Options string
	// Budget is --budget (0: none); Elapsed the run's wall time (a
	// wall-clock figure).
	Budget  time.Duration
	Elapsed time.Duration
	// EndedBy says what ended the search: "work limits", "budget",
	// "interrupted", "saturated".
	EndedBy string

	// Steps are the search's progress, in order: one per saturation
	// iteration and per extraction round.
	Steps []Step
	// Categories compare the optimized program with the naive one by
	// kernel category (the kernel form: elementwise, row, matmul,
	// attention, copy, ...), predicted and, where measured, measured
	// (Categories builds them from both programs' launches).
	Categories []Category
	// Kernels are the optimized program's launches.
	Kernels []Kernel
	// Buckets are the program's predicted time per run at each bucket of
	// each runtime extent (a decode step's past); none for a program
	// without one.
	Buckets []BucketTime
	// RuleSets are the rule sets (and a user's rule files) and what each
	// contributed.
	RuleSets []RuleSet
	// Ablation says how RuleSet.Without was found (the program extracted
	// without each set, priced as the search prices its extractions) or
	// why it was not; AblationBase is the same price of the program with
	// every set, which Without compares with.
	Ablation     string
	AblationBase float64
	// RuleFiles are the user's rule files the search ran, RulesUsed the
	// rules the program's choices rest on (plan.json's).
	RuleFiles []plan.RuleFile
	RulesUsed []plan.RuleUse
	// Summary figures.
	Summary Summary
	// Measured says where kernels were measured: "gpu", "emulated" (CPU
	// times, not comparable with predictions) or "" (not measured).
	Measured string
	// Notes are free sentences the report lists at the end (what was
	// skipped, why).
	Notes []string
}

// Step is one point of the search's progress.
type Step struct {
	Index int
	// Phase is what the step did: "naive" (the naive program built),
	// "saturate" (one iteration) or "extract"; Stage is the rule stage's
	// name ("naive" for the naive program).
	Phase string
	Stage string
	// Nodes and Classes are the e-graph's size after the step.
	Nodes   int
	Classes int
	// Best is the best predicted time per run found so far, in seconds
	// (0 before the first extraction).
	Best float64
	// At is when the step ended, since the start (a wall-clock figure).
	At time.Duration
}

// Category is one kernel category's time per run.
type Category struct {
	Name string
	// Launches per run in the optimized and the naive program.
	Launches      int
	NaiveLaunches int
	// Predicted seconds per run, optimized and naive.
	Predicted      float64
	NaivePredicted float64
	// Measured seconds per run where every launch of the category was
	// measured (0: not measured), and MeasuredWhere ("gpu"/"emulated").
	Measured float64
	// MeasuredWhere is where Measured was measured; "" means the
	// report's Measured.
	MeasuredWhere string
}

// Kernel is one launch of a program: the optimized program's in
// Report.Kernels, and either program's for Categories.
type Kernel struct {
	Launch    string  // the launch's name
	Kernel    string  // the printed kernel's name
	Form      string  // its kernel form, whose first part is its category
	Schedule  string  // the schedule it is printed in
	Predicted float64 // seconds
	Measured  float64 // seconds; 0 when not measured
	Where     string  // where Measured was measured
	// Buckets, for a serving step's launch that keeps a kernel per
	// bucket of the rows present, are those kernels by bucket.
	Buckets []KernelBucket
}

// KernelBucket is the kernel a launch runs with at most Hi rows present
// (more than the previous bucket's), and its schedule.
type KernelBucket struct {
	Hi       int64
	Kernel   string
	Schedule string
}

// RuleSet is one rule set's part in the result.
type RuleSet struct {
	Name string
	// Rules in the set and how many of them fired at least once.
	Rules int
	Fired int
	// Matches is the rewrites the set's rules applied.
	Matches int
	// Without is the best predicted time per run with this set left out
	// (an ablation; 0 when not computed).
	Without float64
}

// Summary holds the figures the report and the note quote.
type Summary struct {
	Launches      int // per run, optimized
	NaiveLaunches int // per run, naive
	Prep          int // launches at load
	// Layers is the model's repeated blocks (0: none), so launches per
	// layer are Launches/Layers.
	Layers int
	// Predicted seconds per run: optimized, naive, and the floor: the
	// model's unavoidable DRAM bytes at the device's peak bandwidth or
	// its arithmetic at peak throughput, whichever is larger, with no
	// derating (no program beats it; Floor). Achievable is the same
	// derated by the fractions a streaming kernel and a library matmul
	// reach. For a program with runtime extents, averages over their
	// buckets (Buckets has each).
	Predicted  float64
	Naive      float64
	Floor      float64
	Achievable float64
	// FloorBytes and FloorFLOPs are what the floor counts.
	FloorBytes float64
	FloorFLOPs float64
	// Verified describes the verification that passed.
	Verified string
}

// BucketTime is a program's predicted time per run with one runtime
// extent at one bucket of its range (ir.Symbol.Buckets): a decode step's
// time per token at a position.
type BucketTime struct {
	// Symbol is the runtime extent's name ("past"), Value the bucket.
	Symbol string
	Value  int64
	// Predicted is the cost model's seconds per run, each kernel in the
	// schedule the program runs it in; Floor the hardware floor there.
	Predicted float64
	Floor     float64
}

// Categories groups the optimized program's launches (kernels) and the
// naive program's (naive: only Form and Predicted are read) by kernel
// category, in name order. A category's Measured is the sum of its
// launches' measured times only when every one of them was measured: a
// partial sum would read as a speed-up that nobody measured.
func Categories(kernels, naive []Kernel) []Category {
	cats := map[string]*Category{}
	cat := func(name string) *Category {
		if cats[name] == nil {
			cats[name] = &Category{Name: name}
		}
		return cats[name]
	}
	for _, k := range kernels {
		c := cat(category(k.Form))
		c.Launches++
		c.Predicted += k.Predicted
	}
	for _, k := range naive {
		c := cat(category(k.Form))
		c.NaiveLaunches++
		c.NaivePredicted += k.Predicted
	}
	var out []Category
	for _, name := range slices.Sorted(maps.Keys(cats)) {
		c := cats[name]
		all := c.Launches > 0
		sum := 0.0
		for _, k := range kernels {
			if category(k.Form) == name {
				if k.Measured == 0 {
					all = false
				}
				sum += k.Measured
			}
		}
		if all {
			c.Measured = sum
		}
		out = append(out, *c)
	}
	return out
}

// category is a kernel form's category: the form without its prologue
// and epilogue ("matmul, prologue [...]" is a matmul).
func category(form string) string {
	c, _, _ := strings.Cut(form, ",")
	return strings.TrimSpace(c)
}

// WriteFiles writes dir/report.md and the charts it links under
// dir/report/, creating the directories. A chart a previous run wrote
// but this report does not link is removed, so the directory holds
// exactly this run's report.
func (r *Report) WriteFiles(dir string) error {
	assets := filepath.Join(dir, AssetsDir)
	if err := os.MkdirAll(assets, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	written := map[string]bool{}
	for _, c := range r.charts() {
		if err := os.WriteFile(filepath.Join(assets, c.file), c.svg(r), 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		written[c.file] = true
	}
	for _, f := range []string{bestSVG, egraphSVG, categoriesSVG, measuredSVG} {
		if written[f] {
			continue
		}
		if err := os.Remove(filepath.Join(assets, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("report: %w", err)
		}
	}
	// report.md last: once it exists, everything it links does too.
	if err := os.WriteFile(filepath.Join(dir, FileName), r.Markdown(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
