package search

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/fleet"
	"github.com/lumsearch/lumsearch/internal/timing"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/measure"
	"github.com/lumsearch/lumsearch/tunedb"
)

// BenchKernel is one run launch of the compiled program in a bench.
type BenchKernel struct {
	Launch    string  `json:"launch"`
	Kernel    string  `json:"kernel"`
	Schedule  string  `json:"schedule"`
	Predicted float64 `json:"predicted_ms,omitempty"`
	// MS is named median_ms, not ms, so that the one "ms" of the output
	// is the whole run's, which scripts/gpu-check.sh reads with sed.
	MS   float64 `json:"median_ms"`
	IQR  float64 `json:"iqr_ms"`
	Runs int     `json:"runs"`
	// Bytes is the cost model's DRAM bytes for the launch and GBps what
	// the measured median makes of them; Bound what the model says bounds
	// it (dram, latency, l2, shared, arithmetic, issue, launch), so that
	// a GPU's figures say which of the model's terms was wrong.
	Bytes float64 `json:"bytes,omitempty"`
	GBps  float64 `json:"achieved_gb_s,omitempty"`
	Bound string  `json:"bound,omitempty"`
}

// BenchReport is what a bench measured; its JSON form is what
// "lumsearch bench --json" prints. Times are in milliseconds.
type BenchReport struct {
	Model string `json:"model"`
	// At holds the values of the program's runtime extents the runs
	// took (a decode step's past), by name; nil without any.
	At        map[string]int64 `json:"at,omitempty"`
	Where     string           `json:"where"`
	Device    string           `json:"device"`
	MS        float64          `json:"ms"`
	IQR       float64          `json:"iqr_ms"`
	Runs      int              `json:"runs"`
	Graph     bool             `json:"graph"`
	NaiveMS   float64          `json:"naive_ms"`
	NaiveIQR  float64          `json:"naive_iqr_ms"`
	NaiveRuns int              `json:"naive_runs"`
	Speedup   float64          `json:"speedup"`
	Predicted float64          `json:"predicted_ms"`
	RelError  float64          `json:"relative_error"`
	RelLimit  float64          `json:"relative_limit"`
	Checked   int              `json:"checked_elements"`
	Kernels   []BenchKernel    `json:"kernels"`
	TuneDB    string           `json:"tunedb"`
	Recorded  int              `json:"recorded"`
	// TuneDBWarning says which bad lines of the tuning database were
	// skipped and how to remove them ("" when none).
	TuneDBWarning string `json:"tunedb_warning,omitempty"`
	// Outputs is the comparison with an outputs file (BenchOptions.Feeds),
	// nil without one.
	Outputs *OutputsCheck `json:"outputs_file,omitempty"`

	// Fleet is the fleet the kernels were measured on (BenchOptions.
	// Workers, its password hidden); "" when they ran here. Then MS and
	// NaiveMS are sums of kernel medians, not whole runs.
	Fleet string `json:"fleet,omitempty"`

	// Driver and Compiler are the GPU's driver version and the
	// compiler's ("" and the emulation's under emulation); Target is the
	// device the cost model predicted for.
	Driver   string `json:"-"`
	Compiler string `json:"-"`
	Target   string `json:"-"`
}

// kernelRows pairs each run launch with its kernel and timing.
func kernelRows(s *benchSetup, t *benchTimes) []BenchKernel {
	lp, ks := s.opt.lp, s.opt.ks[len(s.opt.lp.Prep):]
	rows := make([]BenchKernel, len(lp.Run))
	for i, l := range lp.Run {
		r := BenchKernel{Launch: l.Name, Kernel: ks[i].Name, Schedule: ks[i].Schedule.String()}
		if e := ks[i].Estimate; e != nil {
			r.Predicted, r.Bytes, r.Bound = e.Seconds*1e3, e.Features.Bytes, e.Bound
		}
		if i < len(t.launches) {
			r.MS, r.IQR, r.Runs = t.launches[i].Median*1e3, t.launches[i].IQR*1e3, len(t.launches[i].Samples)
			r.GBps = achievedGBps(r.Bytes, r.MS)
		}
		rows[i] = r
	}
	return rows
}

// achievedGBps is the bandwidth bytes moved in ms milliseconds make, 0
// when either is unknown.
func achievedGBps(bytes, ms float64) float64 {
	if ms <= 0 || bytes <= 0 {
		return 0
	}
	return bytes / (ms * 1e-3) / 1e9
}

// repriceAt prices each launch of a bench run at decode position past:
// the compile-time estimates average a runtime position over its range,
// so an attention's bytes and time there are not the run's. The model's
// bytes, time and bound at past replace them (and the achieved bandwidth
// is recomputed), where the target is a built-in description.
func repriceAt(s *benchSetup, rep *BenchReport, past int64) {
	d, err := cost.LookupDevice(s.device)
	if err != nil {
		return // a user's device file: the compile-time figures stay
	}
	m := cost.NewModel(d, cost.Defaults(d)).AtPosition(past)
	lp, ks := s.opt.lp, s.opt.ks[len(s.opt.lp.Prep):]
	var predicted float64
	for i := range rep.Kernels {
		r := &rep.Kernels[i]
		ranked, err := m.Ranked(lp.Run[i].Body)
		if err == nil {
			for _, e := range ranked {
				if e.Schedule == ks[i].Schedule {
					r.Predicted, r.Bytes, r.Bound = e.Seconds*1e3, e.Features.Bytes, e.Bound
					r.GBps = achievedGBps(r.Bytes, r.MS)
					break
				}
			}
		}
		predicted += r.Predicted
	}
	rep.Predicted = predicted
}

// record appends one record per distinct kernel of the compiled program
// (the samples of its launches pooled) to the tuning database.
func (b bench) record(s *benchSetup, t *benchTimes) (path string, recorded int, warning string, err error) {
	path, err = tuneDBPath(b.dbPath)
	if err != nil {
		return "", 0, "", err
	}
	db, err := tunedb.Open(path)
	if err != nil {
		return "", 0, "", err
	}
	warning = db.Warning()
	host, _ := os.Hostname()
	where := tunedb.WhereGPU
	if t.where == measure.WhereEmulated {
		where = tunedb.WhereEmulated
	}
	lp, ks := s.opt.lp, s.opt.ks[len(s.opt.lp.Prep):]
	var order []string
	samples := map[string][]float64{}
	first := map[string]int{}
	for i := range lp.Run {
		name := ks[i].Name
		if _, ok := first[name]; !ok {
			first[name] = i
			order = append(order, name)
		}
		if i < len(t.launches) {
			samples[name] = append(samples[name], t.launches[i].Samples...)
		}
	}
	at := time.Now().UTC()
	var recs []tunedb.Record
	for _, name := range order {
		i := first[name]
		if len(samples[name]) == 0 {
			continue
		}
		med, iqr := timing.MedianIQR(samples[name])
		if med <= 0 {
			continue // a time the clock could not resolve is no measurement
		}
		shapes, dtypes := bodySignature(lp.Run[i].Body)
		r := tunedb.Record{
			Key: tunedb.Key{Spec: lp.Run[i].Body.String(), Schedule: ks[i].Schedule.String(), Shapes: shapes, DTypes: dtypes,
				Device: t.device, Driver: t.driver, Compiler: t.compiler},
			Median: med, Spread: iqr, Samples: len(samples[name]), Where: where, Host: host, At: at,
		}
		if ks[i].Estimate != nil {
			r.Predicted = ks[i].Estimate.Seconds
		}
		recs = append(recs, r)
	}
	if err := db.Append(recs...); err != nil {
		return "", 0, "", fmt.Errorf("tuning database %s: %w", path, err)
	}
	return path, len(recs), warning, nil
}

// bodySignature is a kernel body's argument shapes and dtypes, inputs then
// outputs, as "4x64,64->4x64" and "f32,f32->f32".
func bodySignature(body *ir.Graph) (string, string) {
	side := func(vs []ir.Value) (string, string) {
		var shapes, dtypes []string
		for _, v := range vs {
			n := body.Node(v)
			dims := make([]string, len(n.Shape))
			for i, d := range n.Shape {
				dims[i] = fmt.Sprint(d)
			}
			shapes = append(shapes, strings.Join(dims, "x"))
			dtypes = append(dtypes, n.DType.String())
		}
		return strings.Join(shapes, ","), strings.Join(dtypes, ",")
	}
	var outs []ir.Value
	for _, o := range body.Outputs {
		outs = append(outs, o.Value)
	}
	is, id := side(body.Inputs())
	oshape, odtype := side(outs)
	return is + "->" + oshape, id + "->" + odtype
}

// buildBenchReport gathers a bench's figures.
func buildBenchReport(s *benchSetup, t *benchTimes, dbPath string, recorded int) *BenchReport {
	rows := kernelRows(s, t)
	var predicted float64
	for _, r := range rows {
		predicted += r.Predicted
	}
	speedup := 0.0
	if t.opt.Median > 0 {
		speedup = t.naive.Median / t.opt.Median
	}
	return &BenchReport{Model: s.model, Where: t.where, Device: t.device,
		MS: t.opt.Median * 1e3, IQR: t.opt.IQR * 1e3, Runs: len(t.opt.Samples), Graph: t.opt.Graph,
		NaiveMS: t.naive.Median * 1e3, NaiveIQR: t.naive.IQR * 1e3, NaiveRuns: len(t.naive.Samples),
		Speedup: speedup, Predicted: predicted, RelError: t.relError, RelLimit: t.relLimit, Checked: t.checkedAt,
		Kernels: rows, TuneDB: dbPath, Recorded: recorded, Driver: t.driver, Compiler: t.compiler, Target: s.device}
}

// WriteJSON writes the report as one JSON object on a line.
func (r *BenchReport) WriteJSON(w io.Writer) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// WriteText writes the report as a table of launches between a line on
// the check and a line on the whole runs.
func (r *BenchReport) WriteText(w io.Writer) error {
	label := "GPU"
	switch {
	case r.Fleet != "":
		if r.Where == measure.WhereEmulated {
			label = "EMULATED"
		}
		fmt.Fprintf(w, "bench %s on the fleet at %s: the tune-workers of %s (%s), %s\n", r.Model, r.Fleet, r.Device, r.Where, fleet.Env{Driver: r.Driver, Compiler: r.Compiler})
	case r.Where == measure.WhereEmulated:
		label = "EMULATED"
		fmt.Fprintf(w, "bench %s under the CPU emulation: times are the emulation's wall times, not GPU times\n", r.Model)
	default:
		fmt.Fprintf(w, "bench %s on %s (driver %s, %s)\n", r.Model, r.Device, r.Driver, r.Compiler)
	}
	if len(r.At) > 0 {
		fmt.Fprintf(w, "at %s (runtime extents)\n", symbolText(r.At))
	}
	if r.Fleet != "" {
		fmt.Fprintf(w, "check: every kernel of both programs against the reference at its real shapes, by the worker that timed it\n")
	} else {
		fmt.Fprintf(w, "check: the compiled program's outputs match the naive program's (%d elements; relative L2 error %.2g, at most %.2g)\n",
			r.Checked, r.RelError, r.RelLimit)
	}
	if r.Outputs != nil {
		fmt.Fprintf(w, "check: %v\n", r.Outputs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "LAUNCH\tKERNEL\tSCHEDULE\tPREDICTED (%s)\tBOUND\t%s MEDIAN\tIQR\tRUNS\tGB/S\n", r.Target, label)
	for _, k := range r.Kernels {
		gbps := "-"
		if k.GBps > 0 {
			gbps = fmt.Sprintf("%.0f", k.GBps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", k.Launch, k.Kernel, k.Schedule, Seconds(k.Predicted/1e3), k.Bound,
			Seconds(k.MS/1e3), Seconds(k.IQR/1e3), k.Runs, gbps)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	how := "launches one by one"
	if r.Graph {
		how = "one CUDA graph"
	}
	if r.Fleet != "" {
		fmt.Fprintf(w, "sum of the kernels' medians (%s; no whole run on the fleet): compiled %s (predicted %s), naive %s; speedup %.2fx\n",
			strings.ToLower(label), Seconds(r.MS/1e3), Seconds(r.Predicted/1e3), Seconds(r.NaiveMS/1e3), r.Speedup)
	} else {
		fmt.Fprintf(w, "end to end (%s): compiled %s (IQR %s, %d runs, %s; predicted %s), naive %s (IQR %s, %d runs); speedup %.2fx\n",
			strings.ToLower(label), Seconds(r.MS/1e3), Seconds(r.IQR/1e3), r.Runs, how, Seconds(r.Predicted/1e3),
			Seconds(r.NaiveMS/1e3), Seconds(r.NaiveIQR/1e3), r.NaiveRuns, r.Speedup)
	}
	if r.TuneDBWarning != "" {
		if _, err := fmt.Fprintf(w, "note: %s\n", r.TuneDBWarning); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "tuning database: %d kernel measurements (%s) recorded in %s\n", r.Recorded, r.Where, r.TuneDB)
	return err
}
