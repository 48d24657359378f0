package report

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// emulatedCaveat is said wherever emulated times appear, because they
// look like GPU times and are not.
const emulatedCaveat = "Times measured \"emulated\" are CPU times of the kernels' emulation, not GPU times; they are not comparable with the predicted times."

// Markdown renders the report as report.md, linking the charts under
// report/. Equal reports render equal bytes; wall-clock figures that are
// zero are left out.
func (r *Report) Markdown() []byte {
	var b bytes.Buffer
	model := r.Model
	if model == "" {
		model = "(unnamed model)"
	}
	fmt.Fprintf(&b, "# lumsearch optimize: %s\n\n", mdText(model))
	r.mdSummary(&b)
	charts := r.charts()
	chart := func(file string) {
		for _, c := range charts {
			if c.file == file {
				fmt.Fprintf(&b, "![%s](%s/%s)\n\n", c.alt, AssetsDir, c.file)
			}
		}
	}

	b.WriteString("## Search\n\n")
	chart(bestSVG)
	chart(egraphSVG)
	r.mdSteps(&b)

	b.WriteString("## Kernel categories\n\n")
	chart(categoriesSVG)
	r.mdCategories(&b)

	if r.anyKernelMeasured() {
		b.WriteString("## Predicted vs measured\n\n")
		chart(measuredSVG)
		b.WriteString("Points above the dashed line took longer than predicted.")
		if r.Measured == "emulated" || r.anyWhere("emulated") {
			b.WriteString(" " + emulatedCaveat)
		}
		b.WriteString("\n\n")
	}

	if len(r.Buckets) > 0 {
		b.WriteString("## Predicted time per bucket\n\n")
		b.WriteString("One program serves every value of its runtime extents; the cost model prices it at each bucket of their ranges.\n\n")
		b.WriteString("| Extent | Predicted per run | Hardware floor | Predicted / floor |\n|---|---|---|---|\n")
		for _, bt := range r.Buckets {
			ratio := "—"
			if bt.Floor > 0 {
				ratio = fmtRatio(bt.Predicted / bt.Floor)
			}
			fmt.Fprintf(&b, "| %s=%d | %s | %s | %s |\n", mdText(bt.Symbol), bt.Value, fmtSeconds(bt.Predicted), fmtSeconds(bt.Floor), ratio)
		}
		b.WriteString("\n")
	}

	b.WriteString("## Kernels\n\n")
	r.mdKernels(&b)
	b.WriteString("## Rule sets\n\n")
	r.mdRuleSets(&b)

	b.WriteString("## Notes\n\n")
	if len(r.Notes) == 0 {
		b.WriteString("None.\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", mdText(n))
	}
	return b.Bytes()
}

// anyWhere says whether any measured kernel or category names where.
func (r *Report) anyWhere(where string) bool {
	for _, k := range r.Kernels {
		if k.Measured > 0 && k.Where == where {
			return true
		}
	}
	for _, c := range r.Categories {
		if c.Measured > 0 && c.MeasuredWhere == where {
			return true
		}
	}
	return false
}

func (r *Report) mdSummary(b *bytes.Buffer) {
	s := r.Summary
	b.WriteString("## Summary\n\n| Figure | Value |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(b, "| %s | %s |\n", k, v) }

	launches := fmt.Sprintf("%d optimized, %d naive", s.Launches, s.NaiveLaunches)
	if s.Launches > 0 && s.NaiveLaunches > 0 {
		launches += " (" + fmtRatio(float64(s.NaiveLaunches)/float64(s.Launches)) + " fewer)"
	}
	row("Launches per run", launches)
	if s.Layers > 0 {
		l := float64(s.Layers)
		row("Launches per layer", fmt.Sprintf("%s optimized, %s naive (%d layers)",
			strconv.FormatFloat(float64(s.Launches)/l, 'f', 1, 64),
			strconv.FormatFloat(float64(s.NaiveLaunches)/l, 'f', 1, 64), s.Layers))
	}
	if s.Prep > 0 {
		row("Launches at load", strconv.Itoa(s.Prep))
	}
	pred := fmtSeconds(s.Predicted) + " optimized, " + fmtSeconds(s.Naive) + " naive"
	if s.Predicted > 0 && s.Naive > 0 {
		pred += " (" + fmtRatio(s.Naive/s.Predicted) + " faster)"
	}
	row("Predicted time per run", pred)
	if s.Floor > 0 {
		floor := fmtSeconds(s.Floor)
		if s.Predicted > 0 {
			floor += "; optimized is " + fmtRatio(s.Predicted/s.Floor) + " the floor"
		}
		if s.Naive > 0 {
			floor += ", naive " + fmtRatio(s.Naive/s.Floor)
		}
		row("Floor (hardware)", floor+" (the bytes at peak bandwidth or the arithmetic at peak throughput, not derated)")
		if s.Achievable > 0 {
			achievable := fmtSeconds(s.Achievable)
			if s.Predicted > 0 {
				achievable += "; optimized is " + fmtRatio(s.Predicted/s.Achievable) + " of it"
			}
			row("Achievable floor", achievable+" (derated by the device's achievable bandwidth and matmul fractions)")
		}
		row("Floor counts", formatSig(s.FloorBytes, byteUnits, false)+" of DRAM traffic, "+
			formatSig(s.FloorFLOPs, flopUnits, false))
	} else {
		row("Floor", "not computed")
	}
	if s.Verified != "" {
		row("Verification", mdText(s.Verified))
	} else {
		row("Verification", "none recorded")
	}
	if r.Measured != "" {
		m := mdText(r.Measured)
		if r.Measured == "emulated" {
			m += " (CPU times of the emulation, not GPU times)"
		}
		row("Measured", m)
	}
	row("Search ended by", mdOrDash(mdText(r.EndedBy)))
	if r.Budget > 0 {
		row("Budget", r.Budget.String())
	}
	if r.Elapsed > 0 { // wall clock: shown only when recorded
		row("Elapsed", fmtSeconds(r.Elapsed.Seconds()))
	}
	row("Seed", strconv.FormatUint(r.Seed, 10))
	row("Options", mdOrDash(mdCode(r.Options)))
	target := mdText(r.Target)
	if r.Arch != "" {
		if target != "" {
			target += ", "
		}
		target += "arch " + mdText(r.Arch)
	}
	row("Target", mdOrDash(target))
	row("Version", mdOrDash(mdText(r.Version)))
	b.WriteString("\n")
}

func (r *Report) mdSteps(b *bytes.Buffer) {
	if len(r.Steps) == 0 {
		b.WriteString("No search steps recorded.\n\n")
		return
	}
	at := false
	for _, st := range r.Steps {
		at = at || st.At > 0
	}
	b.WriteString("| Step | Phase | Stage | E-nodes | E-classes | Best predicted |")
	if at {
		b.WriteString(" At |")
	}
	b.WriteString("\n|---:|---|---|---:|---:|---:|")
	if at {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, st := range r.Steps {
		best := "—"
		if st.Best > 0 {
			best = fmtSeconds(st.Best)
		}
		fmt.Fprintf(b, "| %d | %s | %s | %d | %d | %s |", st.Index, mdOrDash(mdText(st.Phase)), mdOrDash(mdText(st.Stage)), st.Nodes, st.Classes, best)
		if at {
			// A zero At within a timed run is a missing figure, not 0 s.
			a := "—"
			if st.At > 0 {
				a = fmtSeconds(st.At.Seconds())
			}
			fmt.Fprintf(b, " %s |", a)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func (r *Report) mdCategories(b *bytes.Buffer) {
	if len(r.Categories) == 0 {
		b.WriteString("No kernel categories recorded.\n\n")
		return
	}
	measured, emulated := false, false
	for _, c := range r.Categories {
		if c.Measured > 0 {
			measured = true
			emulated = emulated || r.categoryWhere(c) == "emulated"
		}
	}
	b.WriteString("| Category | Launches | Naive launches | Predicted | Naive predicted | Speedup |")
	if measured {
		b.WriteString(" Measured | Where |")
	}
	b.WriteString("\n|---|---:|---:|---:|---:|---:|")
	if measured {
		b.WriteString("---:|---|")
	}
	b.WriteString("\n")
	var tl, tnl int
	var tp, tnp float64
	for _, c := range r.Categories {
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s |", mdOrDash(mdText(c.Name)), c.Launches, c.NaiveLaunches,
			fmtSeconds(c.Predicted), fmtSeconds(c.NaivePredicted), mdSpeedup(c.NaivePredicted, c.Predicted))
		if measured {
			if c.Measured > 0 {
				fmt.Fprintf(b, " %s | %s |", fmtSeconds(c.Measured), mdOrDash(mdText(r.categoryWhere(c))))
			} else {
				b.WriteString(" — | — |")
			}
		}
		b.WriteString("\n")
		tl, tnl, tp, tnp = tl+c.Launches, tnl+c.NaiveLaunches, tp+c.Predicted, tnp+c.NaivePredicted
	}
	fmt.Fprintf(b, "| **total** | %d | %d | %s | %s | %s |", tl, tnl, fmtSeconds(tp), fmtSeconds(tnp), mdSpeedup(tnp, tp))
	if measured {
		b.WriteString(" | |")
	}
	b.WriteString("\n\n")
	if emulated {
		b.WriteString(emulatedCaveat + "\n\n")
	}
}

// categoryWhere is where c was measured, defaulting to the report's.
func (r *Report) categoryWhere(c Category) string {
	if c.MeasuredWhere != "" {
		return c.MeasuredWhere
	}
	return r.Measured
}

func (r *Report) mdKernels(b *bytes.Buffer) {
	if len(r.Kernels) == 0 {
		b.WriteString("No kernels recorded.\n\n")
		return
	}
	// No emulation caveat here: kernels measured at all put the
	// "Predicted vs measured" section, which says it, above this table.
	b.WriteString("| # | Launch | Kernel | Form | Schedule | Predicted | Measured |\n|---:|---|---|---|---|---:|---:|\n")
	for i, k := range r.Kernels {
		m := "—"
		if k.Measured > 0 {
			where := k.Where
			if where == "" {
				where = r.Measured
			}
			m = fmtSeconds(k.Measured)
			if where != "" {
				m += " (" + mdText(where) + ")"
			}
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s |\n", i+1, mdOrDash(mdCode(k.Launch)), mdOrDash(mdCode(k.Kernel)),
			mdOrDash(mdText(k.Form)), mdOrDash(mdCode(k.Schedule)), fmtSeconds(k.Predicted), m)
	}
	b.WriteString("\n")
	r.mdKernelBuckets(b)
}

// mdKernelBuckets lists, for a serving step's kernels that change with
// the rows present, the schedule of each bucket, runs of buckets that
// share a kernel on one line.
func (r *Report) mdKernelBuckets(b *bytes.Buffer) {
	seen := map[string]bool{}
	header := false
	for _, k := range r.Kernels {
		if len(k.Buckets) == 0 || seen[k.Kernel] {
			continue
		}
		seen[k.Kernel] = true
		if !header {
			b.WriteString("### Kernels by rows present\n\n")
			b.WriteString("A serving step's row-wise launch runs the kernel of the bucket that holds the rows present (tokens, or sequences for the LM head), each printed for its bucket's top in the schedule the cost model ranks best there.\n\n")
			b.WriteString("| Kernel | Rows | Bucket kernel | Schedule |\n|---|---|---|---|\n")
			header = true
		}
		lo := int64(1)
		for i, bk := range k.Buckets {
			if i+1 < len(k.Buckets) && k.Buckets[i+1].Kernel == bk.Kernel {
				continue
			}
			rows := fmt.Sprintf("%d–%d", lo, bk.Hi)
			if lo == bk.Hi {
				rows = fmt.Sprint(lo)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", mdCode(k.Kernel), rows, mdCode(bk.Kernel), mdCode(bk.Schedule))
			lo = bk.Hi + 1
		}
	}
	if header {
		b.WriteString("\n")
	}
}

func (r *Report) mdRuleSets(b *bytes.Buffer) {
	if len(r.RuleSets) == 0 {
		b.WriteString("No rule sets recorded.\n\n")
		return
	}
	b.WriteString("| Rule set | Rules | Fired | Matches | Predicted without it | Cost of removing it |\n|---|---:|---:|---:|---:|---:|\n")
	for _, rs := range r.RuleSets {
		without, cost := "not computed", "—"
		if rs.Without > 0 {
			without = fmtSeconds(rs.Without)
			p := r.AblationBase
			if p <= 0 {
				p = r.Summary.Predicted
			}
			if p > 0 {
				d := rs.Without - p
				sign := "+"
				if d < 0 {
					sign, d = "−", -d
				}
				cost = sign + fmtSeconds(d) + " (" + fmtRatio(rs.Without/p) + ")"
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s | %s |\n", mdOrDash(mdText(rs.Name)), rs.Rules, rs.Fired, rs.Matches, without, cost)
	}
	b.WriteString("\n")
	if r.Ablation != "" {
		fmt.Fprintf(b, "Predicted without it: %s.\n\n", mdText(r.Ablation))
	}
	if len(r.RuleFiles) > 0 {
		b.WriteString("Rule files (`--rules`), every rule verified before the search:\n\n| File | Digest | Rules |\n|---|---|---|\n")
		for _, f := range r.RuleFiles {
			fmt.Fprintf(b, "| %s | %s | %s |\n", mdCode(f.Path), mdCode(f.Digest), mdText(strings.Join(f.Rules, ", ")))
		}
		b.WriteString("\n")
	}
	if len(r.RulesUsed) > 0 {
		b.WriteString("Rules the program rests on (the e-graph's union provenance: the unions that put each chosen kernel in the class its users read):\n\n| Rule | From | Unions |\n|---|---|---:|\n")
		for _, u := range r.RulesUsed {
			fmt.Fprintf(b, "| %s | %s | %d |\n", mdCode(u.Rule), mdOrDash(mdText(u.From)), u.Unions)
		}
		b.WriteString("\n")
	}
}

var (
	byteUnits = []valueUnit{{1, " B"}, {1e3, " kB"}, {1e6, " MB"}, {1e9, " GB"}, {1e12, " TB"}}
	flopUnits = []valueUnit{{1, " FLOP"}, {1e3, " kFLOP"}, {1e6, " MFLOP"}, {1e9, " GFLOP"}, {1e12, " TFLOP"}, {1e15, " PFLOP"}}
	ratioUnit = []valueUnit{{1, "×"}}
)

// fmtSeconds formats seconds with a unit and three significant figures
// ("1.23 ms", "45.6 µs").
func fmtSeconds(s float64) string { return formatSig(s, secondUnits, false) }

// fmtRatio formats a ratio to three significant figures ("3.71×").
func fmtRatio(x float64) string { return formatSig(x, ratioUnit, false) }

// mdSpeedup is naive/optimized as a ratio, or a dash when undefined.
func mdSpeedup(naive, opt float64) string {
	if naive > 0 && opt > 0 {
		return fmtRatio(naive / opt)
	}
	return "—"
}

func mdOrDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// mdText escapes s for Markdown text and table cells: Markdown and HTML
// specials are escaped (a model named "a<b" must not open a tag, nor
// "x|y" split a cell) and line breaks become spaces.
func mdText(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '\\', '`', '*', '_', '[', ']', '|', '#':
			b.WriteByte('\\')
			b.WriteRune(c)
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '\n', '\r', '\t':
			b.WriteByte(' ')
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// mdCode puts s in a code span that survives backticks and, inside a
// table, pipes ("" for empty s).
func mdCode(s string) string {
	if s == "" {
		return ""
	}
	s = strings.NewReplacer("\n", " ", "\r", " ", "|", `\|`).Replace(s)
	run, longest := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}
