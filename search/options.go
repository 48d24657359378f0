package search

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// Measure says where Optimize measures the chosen kernels.
type Measure string

// The places to measure.
const (
	// MeasureNone measures nothing: the cost model alone decides (the
	// zero value).
	MeasureNone Measure = "none"
	// MeasureAuto measures on the GPU when there is one, else nothing.
	MeasureAuto Measure = "auto"
	// MeasureGPU measures on the GPU and fails without one.
	MeasureGPU Measure = "gpu"
	// MeasureEmulated measures under the CPU emulation: CPU times,
	// recorded apart from GPU times and never fed back into a GPU's
	// extraction.
	MeasureEmulated Measure = "emulated"
)

// Options say how Optimize and Compile compile a model. The zero value
// compiles for DefaultTarget in its architecture with the default limits,
// without a budget or measurement, and verifies.
type Options struct {
	// Target is the device the cost model prices for (a built-in name,
	// or "auto" for the GPU here; "" means DefaultTarget).
	Target string
	// Arch is what NVRTC compiles for: sm_80 or sm_90 ("" means the
	// target's).
	Arch string
	// TuneDB is the tuning database: measured times override predictions,
	// measurements are recorded in it, and a model's last plan is kept
	// beside it ("" means $LUMSEARCH_TUNEDB or the user cache's).
	TuneDB string
	// NoVerify skips verification under the CPU emulation.
	NoVerify bool
	// InputRanges replace, for the leaves they name, the ranges the
	// verification draws random values from (ir.InputRanges infers them
	// from use: indices, positions, masks).
	InputRanges InputRanges
	// Expect is where a runtime extent is expected to run (--expect
	// past=LO..HI), within the range it was compiled for: the cost model
	// prices the work that follows it over that range's buckets instead
	// of the whole range's. Only past, a decode step's position, for now.
	Expect map[string]ir.Symbol
	// Rules choose the rule sets and add a user's rule files, each rule
	// verified before use (the zero value: the built-in sets).
	Rules RuleOptions
	// Events receives progress, one event at a time (nil: none). A
	// Printer shows them as the command line does.
	Events func(Event)

	// The rest is Optimize's alone.

	// Budget bounds the whole run, writing included (0: none; the work
	// limits end the search).
	Budget time.Duration
	// IterLimit and NodeLimit bound each saturation stage (0: 30
	// iterations, 200,000 e-nodes).
	IterLimit, NodeLimit int
	// Seed seeds random weights, inputs and measurement samples.
	Seed uint64
	// Measure says where to measure the chosen kernels ("" is
	// MeasureNone).
	Measure Measure
	// Candidates is how many kernels are measured, each in its best
	// schedules (the command line's default is 8).
	Candidates int
	// Worker starts a measuring worker: a process that serves the
	// measure package's protocol on its standard input and output, such
	// as "lumsearch worker --measure gpu". It is given the place to
	// measure. Required for Measure other than none, unless auto finds no
	// GPU.
	Worker func(where string) *exec.Cmd
	// Workers, when set, is the NATS URL of a measuring fleet (lumsearch
	// tuning-server; see docs/distributed.md): the chosen kernels are
	// measured by its tune-workers of the target's kind (the cost
	// device's name, such as h100-sxm) instead of a local worker, on
	// their GPUs (Measure auto or gpu) or under their emulation
	// (Measure emulated), every kernel of a round at once. A kernel the
	// fleet's shared tuning bucket has measured before is not measured
	// again. The records are added to TuneDB as well. A fleet that cannot
	// be reached, or whose server or workers vanish, leaves the kernels
	// it has not measured to the cost model, and the run says so; the
	// budget bounds every wait.
	Workers string
	// Fleet, when set, replaces the fleet client's waits (how long no
	// worker of the kind or no server is waited for, how often they are
	// checked); its Kind and Mode are Optimize's.
	Fleet fleet.ClientOptions
	// Ablate has the report's rule table priced without each rule set
	// and rule file: the last stage saturated again without it, as many
	// as the budget leaves time for (the command line's --ablate, on by
	// default; off, the table says so).
	Ablate bool
	// Dump, when set, is a folder that receives the e-graph and the
	// chosen program after every stage.
	Dump string
	// Command is the command line's text of the options, for plan.json
	// and the report ("" means the canonical text of these options).
	Command string
}

// withDefaults fills in what the zero value leaves to the compiler.
func (o Options) withDefaults() Options {
	if o.Target == "" {
		o.Target = DefaultTarget
	}
	if o.Measure == "" {
		o.Measure = MeasureNone
	}
	return o
}

// canonical is the options that make a model's program what it is, as
// text in a fixed order, for plan.json and the report.
func (o Options) canonical(mo ModelOptions) string {
	text := fmt.Sprintf("seq=%d dtype=%s kind=%s dims=%s target=%s arch=%s budget=%v measure=%s candidates=%d iter-limit=%d node-limit=%d verify=%v",
		mo.Build.Seq, mo.Build.DType, mo.Kind, mo.Dims, o.Target, o.Arch, o.Budget, o.Measure, o.Candidates, o.IterLimit, o.NodeLimit, !o.NoVerify)
	if mo.Build.MaxSeq > 0 {
		text += fmt.Sprintf(" max-seq=%d", mo.Build.MaxSeq)
	}
	if len(o.Expect) > 0 {
		text += " expect=" + DimFlag{Ranges: o.Expect}.String()
	}
	for _, f := range o.Rules.Files {
		text += " rules=" + f
	}
	for _, s := range o.Rules.Disable {
		text += " disable=" + s
	}
	for _, s := range o.Rules.Enable {
		text += " enable=" + s
	}
	return text
}

// price resolves o's target (the saturation options that price by its
// cost model, the pricing's name and the model) and its architecture,
// the target's when o names none.
func (o *Options) price(ctx context.Context, g *ir.Graph) (rules.SaturateOptions, string, *cost.Model, error) {
	sat, name, cm, err := Pricing{Target: o.Target, TuneDB: o.TuneDB, Expect: expectedRanges(g, o.Expect)}.Options(ctx)
	if err != nil {
		return sat, "", nil, err
	}
	if o.Arch == "" {
		o.Arch = cm.Device.Arch
	}
	return sat, name, cm, checkArch(o.Arch)
}

// checkArch refuses an architecture NVRTC 11.8 does not compile for.
func checkArch(arch string) error {
	if arch != "sm_80" && arch != "sm_90" {
		return optionErrorf("--arch %s: want sm_80 or sm_90 (NVRTC 11.8's targets)", arch)
	}
	return nil
}
