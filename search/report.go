package search

import (
	"time"

	"github.com/lumsearch/lumsearch/plan"
)

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
	// attention, copy, ...), predicted and, where measured, measured.
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
	// Phase is "saturate", "extract" or "measure"; Stage the rule
	// stage's name during saturation.
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

// Kernel is one launch of the optimized program.
type Kernel struct {
	Launch    string // the launch's name
	Kernel    string // the printed kernel's name
	Form      string // its category
	Schedule  string
	Predicted float64 // seconds
	Measured  float64 // seconds; 0 when not measured
	Where     string  // where Measured was measured
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
