package report

import (
	"math"
	"strconv"
)

// The chart files, by name in AssetsDir.
const (
	bestSVG       = "best.svg"
	egraphSVG     = "egraph.svg"
	categoriesSVG = "categories.svg"
	measuredSVG   = "measured.svg"
)

// reportChart is one chart file report.md links.
type reportChart struct {
	file, alt string
	svg       func(*Report) []byte
}

// charts lists the charts this report links, in the order it shows
// them; Markdown and WriteFiles share it so links and files agree.
func (r *Report) charts() []reportChart {
	c := []reportChart{
		{bestSVG, "best predicted time per run by search step", (*Report).BestChart},
		{egraphSVG, "e-graph size by search step", (*Report).EGraphChart},
		{categoriesSVG, "predicted time per run by kernel category", (*Report).CategoryChart},
	}
	if r.anyKernelMeasured() {
		c = append(c, reportChart{measuredSVG, "predicted vs measured time per kernel", (*Report).MeasuredChart})
	}
	return c
}

// anyKernelMeasured says whether the report has a measured chart to show.
func (r *Report) anyKernelMeasured() bool {
	for _, k := range r.Kernels {
		if k.Measured > 0 && svgFinite(k.Measured) {
			return true
		}
	}
	return false
}

// BestChart is the line chart of the best predicted time per run against
// the search step, with the floor (and the naive time, when it fits the
// scale) as dashed references.
func (r *Report) BestChart() []byte {
	s := XYSeries{Name: "best predicted"}
	hi := 0.0
	for _, st := range r.Steps {
		if st.Best > 0 && svgFinite(st.Best) { // 0: nothing extracted yet
			s.X = append(s.X, float64(st.Index))
			s.Y = append(s.Y, st.Best)
			hi = math.Max(hi, st.Best)
		}
	}
	var refs []RefLine
	if r.Summary.Floor > 0 {
		refs = append(refs, RefLine{"floor", r.Summary.Floor})
	}
	// A naive time far above the curve would flatten it against the
	// axis, so it is drawn only when it is on the same scale.
	if n := r.Summary.Naive; n > 0 && n <= 4*hi {
		refs = append(refs, RefLine{"naive", n})
	}
	return LineChart("Best predicted time per run", Axis{Label: "search step"},
		Axis{Label: "predicted time per run", Seconds: true}, []XYSeries{s}, refs...)
}

// EGraphChart is the bar chart of the e-graph's size (e-nodes) after each
// search step.
func (r *Report) EGraphChart() []byte {
	groups := make([]string, len(r.Steps))
	nodes := BarSeries{Name: "e-nodes", Values: make([]float64, len(r.Steps))}
	for i, st := range r.Steps {
		groups[i] = strconv.Itoa(st.Index)
		nodes.Values[i] = float64(st.Nodes)
	}
	return BarChart("E-graph size (e-nodes) per step", Axis{Label: "search step"},
		Axis{Label: "e-nodes"}, groups, []BarSeries{nodes})
}

// CategoryChart is the grouped bar chart of the predicted time per run by
// kernel category, optimized against naive, with measured bars where a
// category was measured.
func (r *Report) CategoryChart() []byte {
	n := len(r.Categories)
	groups := make([]string, n)
	opt := BarSeries{Name: "optimized (predicted)", Values: make([]float64, n)}
	naive := BarSeries{Name: "naive (predicted)", Values: make([]float64, n)}
	meas := BarSeries{Name: "optimized (measured" + whereSuffix(r.Measured) + ")", Values: make([]float64, n)}
	measured := false
	for i, c := range r.Categories {
		groups[i] = c.Name
		opt.Values[i] = c.Predicted
		naive.Values[i] = c.NaivePredicted
		meas.Values[i] = c.Measured
		measured = measured || c.Measured > 0
	}
	series := []BarSeries{opt, naive}
	if measured {
		series = append(series, meas)
	}
	return BarChart("Predicted time per run by kernel category", Axis{Label: "kernel category"},
		Axis{Label: "time per run", Seconds: true}, groups, series)
}

// whereSuffix names where times were measured for a legend, flagging
// emulated times as CPU times.
func whereSuffix(where string) string {
	switch where {
	case "":
		return ""
	case "emulated":
		return ", emulated: CPU time"
	}
	return ", " + where
}

// MeasuredChart is the scatter of predicted against measured time per
// kernel, one colour per kernel form, on log scales when the times span
// more than two decades; nil when no kernel was measured.
func (r *Report) MeasuredChart() []byte {
	if !r.anyKernelMeasured() {
		return nil
	}
	var b svgBounds
	for _, k := range r.Kernels {
		if k.Measured > 0 && k.Predicted > 0 {
			b.add(k.Measured)
			b.add(k.Predicted)
		}
	}
	log := b.ok && b.lo > 0 && b.hi/b.lo > 100
	var series []XYSeries
	for _, f := range sortedForms(r.Kernels) {
		s := XYSeries{Name: f}
		if s.Name == "" {
			s.Name = "(no form)"
		}
		for _, k := range r.Kernels {
			if k.Form == f && k.Measured > 0 {
				s.X = append(s.X, k.Predicted)
				s.Y = append(s.Y, k.Measured)
			}
		}
		if len(s.X) > 0 {
			series = append(series, s)
		}
	}
	ylabel := "measured time"
	if r.Measured == "emulated" {
		ylabel = "measured time (emulated: CPU time, not GPU)"
	} else if r.Measured != "" {
		ylabel += " (" + r.Measured + ")"
	}
	return ScatterChart("Predicted vs measured time per kernel",
		Axis{Label: "predicted time", Seconds: true, Log: log},
		Axis{Label: ylabel, Seconds: true, Log: log}, series, true)
}
