package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The chart writers below are deliberately small and use only the
// standard library: report.md must render the same bytes for the same
// report (so reports can be diffed and golden-tested), which rules out
// plotting libraries with their own float formatting, fonts and maps.
// Every coordinate goes through svgNum (fixed one-decimal formatting) and
// every value through finite checks, so no NaN or Inf ever reaches a file.

// Axis describes one axis of a chart.
type Axis struct {
	// Label is the axis title.
	Label string
	// Seconds says the values are seconds, so tick labels read ns, µs,
	// ms or s; otherwise they are counts (k, M, G suffixes).
	Seconds bool
	// Log asks for a log10 scale; nonpositive values are then left out.
	// BarChart ignores it (bars need a zero baseline).
	Log bool
}

// XYSeries is a named list of points for LineChart and ScatterChart.
// X and Y pair up by index; extra values in the longer slice are ignored.
type XYSeries struct {
	Name string
	X, Y []float64
}

// BarSeries is one bar per group for BarChart: Values[i] belongs to
// groups[i]; missing or non-finite values draw no bar.
type BarSeries struct {
	Name   string
	Values []float64
}

// RefLine is a labelled horizontal reference line (a floor, a baseline)
// that LineChart draws dashed across the plot.
type RefLine struct {
	Name string
	Y    float64
}

const (
	svgWidth   = 640.0
	svgHeight  = 360.0
	svgCharW   = 6.5 // rough width of an 11px sans-serif glyph, for layout only
	svgMarginL = 76.0
	svgMarginR = 18.0
	svgMarkers = 60 // draw point markers on lines with at most this many points
)

// svgPalette is a fixed colour cycle (Tableau 10), indexed by series
// position so colours are stable across runs.
var svgPalette = []string{
	"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
}

func svgColor(i int) string { return svgPalette[i%len(svgPalette)] }

// svgNum formats a coordinate: fixed one decimal, never NaN/Inf, never
// "-0.0", so equal inputs give equal bytes.
func svgNum(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		x = 0
	}
	s := strconv.FormatFloat(x, 'f', 1, 64)
	if s == "-0.0" {
		s = "0.0"
	}
	return s
}

// svgEsc escapes text for XML character data and attribute values;
// encoding/xml also replaces characters XML cannot hold, which keeps the
// file well formed whatever a model name contains.
func svgEsc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// svgTrunc shortens a label to n runes so long names do not run off the
// chart; the full name stays in the bar's tooltip.
func svgTrunc(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func svgFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// svgDoc accumulates one SVG document.
type svgDoc struct {
	buf  bytes.Buffer
	w, h float64
}

func newSVG(w, h float64, title string) *svgDoc {
	d := &svgDoc{w: w, h: h}
	fmt.Fprintf(&d.buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="11">`+"\n",
		svgNum(w), svgNum(h), svgNum(w), svgNum(h))
	fmt.Fprintf(&d.buf, "<title>%s</title>\n", svgEsc(title))
	d.buf.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	d.text(w/2, 22, svgTrunc(title, 90), `text-anchor="middle" font-size="15" font-weight="bold"`)
	return d
}

func (d *svgDoc) text(x, y float64, s, attrs string) {
	fmt.Fprintf(&d.buf, `<text x="%s" y="%s" %s>%s</text>`+"\n", svgNum(x), svgNum(y), attrs, svgEsc(s))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&d.buf, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`+"\n",
		svgNum(x1), svgNum(y1), svgNum(x2), svgNum(y2), attrs)
}

func (d *svgDoc) bytes() []byte {
	d.buf.WriteString("</svg>\n")
	return d.buf.Bytes()
}

// noDataSVG is the small chart written for empty data, so a report
// always links a readable file instead of failing or plotting NaN.
func noDataSVG(title string) []byte {
	d := newSVG(svgWidth, 120, title)
	d.text(svgWidth/2, 72, "no data", `text-anchor="middle" font-size="13" fill="#666"`)
	return d.bytes()
}

// valueUnit is one rung of a unit ladder for value labels.
type valueUnit struct {
	factor float64
	suffix string
}

var (
	secondUnits = []valueUnit{{1e-9, " ns"}, {1e-6, " µs"}, {1e-3, " ms"}, {1, " s"}}
	countUnits  = []valueUnit{{1, ""}, {1e3, "k"}, {1e6, "M"}, {1e9, "G"}}
)

// pickUnit is the largest unit not above a (the smallest for tiny a).
func pickUnit(a float64, units []valueUnit) int {
	i := 0
	for j, u := range units {
		if a >= u.factor {
			i = j
		}
	}
	return i
}

// formatSig formats v to three significant figures in the unit of the
// ladder that keeps the number in [1, 1000); trim drops trailing zeros
// (for tick labels, where "1 ms" reads better than "1.00 ms").
func formatSig(v float64, units []valueUnit, trim bool) string {
	if !svgFinite(v) {
		return "n/a"
	}
	if v == 0 {
		return "0" + units[pickUnit(1, units)].suffix
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	i := pickUnit(v, units)
	for {
		x := v / units[i].factor
		mag := math.Floor(math.Log10(x))
		p := math.Pow(10, mag-2)
		r := math.Round(x/p) * p
		// Rounding can carry into the next magnitude (999.7 -> 1000):
		// move up a unit, or recount the decimals, to keep three figures.
		if r >= 1000 && i+1 < len(units) {
			i++
			continue
		}
		if r > 0 {
			mag = math.Floor(math.Log10(r) + 1e-9)
		}
		dec := max(0, 2-int(mag))
		s := strconv.FormatFloat(r, 'f', dec, 64)
		if trim && strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return sign + s + units[i].suffix
	}
}

// axisScale maps data values onto pixels and holds the ticks.
type axisScale struct {
	log    bool
	lo, hi float64 // data range; log10 of it on log axes
	p0, p1 float64 // pixels for lo and hi
	ticks  []float64
	labels []string
}

func (a *axisScale) px(v float64) float64 {
	if a.log {
		if v <= 0 {
			v = math.Pow(10, a.lo)
		}
		v = math.Log10(v)
	}
	if !(a.hi > a.lo) || !svgFinite(v) {
		return (a.p0 + a.p1) / 2
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// svgNiceStep rounds raw up to 1, 2 or 5 times a power of ten, so ticks
// land on numbers people read at a glance.
func svgNiceStep(raw float64) float64 {
	if !(raw > 0) || !svgFinite(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

// svgLinearAxis covers [lo, hi] with about five nice ticks; integer axes
// (step indices, counts) never get fractional ticks.
func svgLinearAxis(lo, hi float64, ax Axis, integer bool) axisScale {
	if !svgFinite(lo) || !svgFinite(hi) {
		lo, hi = 0, 1
	}
	if hi <= lo {
		d := math.Abs(lo) / 2
		if integer || d == 0 {
			d = 1
		}
		orig := lo
		lo, hi = lo-d, hi+d
		if orig >= 0 && lo < 0 {
			lo = 0
		}
	}
	step := svgNiceStep((hi - lo) / 5)
	if integer && step < 1 {
		step = 1
	}
	k0, k1 := math.Floor(lo/step+1e-9), math.Ceil(hi/step-1e-9)
	if k1 <= k0 {
		k1 = k0 + 1
	}
	a := axisScale{lo: k0 * step, hi: k1 * step}
	units := countUnits
	if ax.Seconds {
		units = secondUnits
	}
	u := units[pickUnit(math.Max(math.Abs(a.lo), math.Abs(a.hi)), units)]
	dec := 0
	if s := step / u.factor; s < 1 {
		dec = min(9, int(math.Ceil(-math.Log10(s)-1e-9)))
	}
	for k := k0; k <= k1 && len(a.ticks) < 60; k++ {
		v := k * step
		a.ticks = append(a.ticks, v)
		if k == 0 {
			a.labels = append(a.labels, "0")
			continue
		}
		a.labels = append(a.labels, strconv.FormatFloat(v/u.factor, 'f', dec, 64)+u.suffix)
	}
	return a
}

// svgLogAxis covers [lo, hi] (both > 0) with whole decades.
func svgLogAxis(lo, hi float64, ax Axis) axisScale {
	if !(lo > 0) || !svgFinite(lo) {
		lo = 1
	}
	if !(hi >= lo) || !svgFinite(hi) {
		hi = lo
	}
	e0, e1 := math.Floor(math.Log10(lo)+1e-9), math.Ceil(math.Log10(hi)-1e-9)
	if e1 <= e0 {
		e1 = e0 + 1
	}
	a := axisScale{log: true, lo: e0, hi: e1}
	units := countUnits
	if ax.Seconds {
		units = secondUnits
	}
	every := math.Max(1, math.Ceil((e1-e0)/8))
	for e := e0; e <= e1; e += every {
		v := math.Pow(10, e)
		a.ticks = append(a.ticks, v)
		a.labels = append(a.labels, formatSig(v, units, true))
	}
	return a
}

// plotBox is the plot area in pixels.
type plotBox struct{ left, top, right, bottom float64 }

// legendItem is one entry of a chart legend.
type legendItem struct {
	name, color string
	kind        int // legendBar, legendLine, legendDash or legendDot
}

const (
	legendBar = iota
	legendLine
	legendDash
	legendDot
)

// legendWidth is an item's width: swatch, gap, text, gap.
func legendWidth(it legendItem) float64 {
	return 18 + 4 + float64(utf8.RuneCountInString(svgTrunc(it.name, 40)))*svgCharW + 14
}

// legendRows is how many rows the legend wraps into.
func legendRows(items []legendItem) int {
	if len(items) == 0 {
		return 0
	}
	rows, x := 1, svgMarginL
	for _, it := range items {
		w := legendWidth(it)
		if x+w > svgWidth-svgMarginR && x > svgMarginL {
			rows++
			x = svgMarginL
		}
		x += w
	}
	return rows
}

// legend draws the items in rows from y (the first row's baseline).
func (d *svgDoc) legend(items []legendItem, y float64) {
	x := svgMarginL
	for _, it := range items {
		w := legendWidth(it)
		if x+w > svgWidth-svgMarginR && x > svgMarginL {
			y += 16
			x = svgMarginL
		}
		switch it.kind {
		case legendBar:
			fmt.Fprintf(&d.buf, `<rect x="%s" y="%s" width="14" height="10" fill="%s"/>`+"\n", svgNum(x), svgNum(y-9), it.color)
		case legendLine:
			d.line(x, y-4, x+18, y-4, `stroke="`+it.color+`" stroke-width="2"`)
		case legendDash:
			d.line(x, y-4, x+18, y-4, `stroke="`+it.color+`" stroke-width="1.5" stroke-dasharray="4 3"`)
		case legendDot:
			fmt.Fprintf(&d.buf, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", svgNum(x+7), svgNum(y-4), it.color)
		}
		d.text(x+22, y, svgTrunc(it.name, 40), "")
		x += w
	}
}

// svgLayout places the legend under the title and returns the plot box for
// a chart of height h with extraBottom pixels reserved for x labels.
func svgLayout(h float64, items []legendItem, extraBottom float64) plotBox {
	rows := legendRows(items)
	top := 40.0 + float64(rows)*16 + 8
	return plotBox{left: svgMarginL, top: top, right: svgWidth - svgMarginR, bottom: h - 44 - extraBottom}
}

// yAxis draws horizontal grid lines with labels and the y axis title.
func (d *svgDoc) yAxis(b plotBox, ys *axisScale, ax Axis) {
	for i, t := range ys.ticks {
		y := ys.px(t)
		d.line(b.left, y, b.right, y, `stroke="#e0e0e0"`)
		d.text(b.left-6, y+4, ys.labels[i], `text-anchor="end"`)
	}
	d.line(b.left, b.top, b.left, b.bottom, `stroke="#333"`)
	cy := (b.top + b.bottom) / 2
	fmt.Fprintf(&d.buf, `<text x="16.0" y="%s" text-anchor="middle" transform="rotate(-90 16.0 %s)">%s</text>`+"\n",
		svgNum(cy), svgNum(cy), svgEsc(ax.Label))
}

// xAxis draws a numeric x axis: ticks, labels and title.
func (d *svgDoc) xAxis(b plotBox, xs *axisScale, ax Axis, grid bool) {
	for i, t := range xs.ticks {
		x := xs.px(t)
		if grid {
			d.line(x, b.top, x, b.bottom, `stroke="#e0e0e0"`)
		}
		d.line(x, b.bottom, x, b.bottom+4, `stroke="#333"`)
		d.text(x, b.bottom+16, xs.labels[i], `text-anchor="middle"`)
	}
	d.line(b.left, b.bottom, b.right, b.bottom, `stroke="#333"`)
	d.text((b.left+b.right)/2, d.h-10, ax.Label, `text-anchor="middle"`)
}

// xyPoints returns the plottable points of s: finite, and positive on
// log axes.
func xyPoints(s XYSeries, x, y Axis) (xs, ys []float64) {
	n := min(len(s.X), len(s.Y))
	for i := range n {
		px, py := s.X[i], s.Y[i]
		if !svgFinite(px) || !svgFinite(py) || (x.Log && px <= 0) || (y.Log && py <= 0) {
			continue
		}
		xs, ys = append(xs, px), append(ys, py)
	}
	return xs, ys
}

// svgBounds is the running minimum and maximum of some values.
type svgBounds struct {
	lo, hi float64
	ok     bool
}

func (b *svgBounds) add(v float64) {
	if !svgFinite(v) {
		return
	}
	if !b.ok {
		b.lo, b.hi, b.ok = v, v, true
		return
	}
	b.lo, b.hi = math.Min(b.lo, v), math.Max(b.hi, v)
}

func svgMakeAxis(b svgBounds, ax Axis, integer, fromZero bool) axisScale {
	if ax.Log {
		return svgLogAxis(b.lo, b.hi, ax)
	}
	lo, hi := b.lo, b.hi
	if fromZero {
		lo, hi = math.Min(lo, 0), math.Max(hi, 0)
	}
	return svgLinearAxis(lo, hi, ax, integer)
}

// LineChart draws each series as a line (with markers when short) over
// a numeric x axis; the y axis starts at zero on linear scales so the
// lines' heights compare honestly. refs are dashed horizontal lines.
// Empty data gives a "no data" chart.
func LineChart(title string, x, y Axis, series []XYSeries, refs ...RefLine) []byte {
	var xb, yb svgBounds
	have := false
	for _, s := range series {
		xs, ys := xyPoints(s, x, y)
		for i := range xs {
			xb.add(xs[i])
			yb.add(ys[i])
			have = true
		}
	}
	if !have {
		return noDataSVG(title)
	}
	var keep []RefLine
	for _, r := range refs {
		if svgFinite(r.Y) && (!y.Log || r.Y > 0) {
			keep = append(keep, r)
			yb.add(r.Y)
		}
	}
	var items []legendItem
	if len(series) > 1 || len(keep) > 0 {
		for i, s := range series {
			items = append(items, legendItem{s.Name, svgColor(i), legendLine})
		}
	}
	for i, r := range keep {
		items = append(items, legendItem{r.Name, refColor(i), legendDash})
	}
	d := newSVG(svgWidth, svgHeight, title)
	b := svgLayout(svgHeight, items, 0)
	d.legend(items, 44)
	xs := svgMakeAxis(xb, x, !x.Seconds, false)
	ys := svgMakeAxis(yb, y, false, true)
	xs.p0, xs.p1 = b.left, b.right
	ys.p0, ys.p1 = b.bottom, b.top
	d.yAxis(b, &ys, y)
	d.xAxis(b, &xs, x, false)
	for i, r := range keep {
		py := ys.px(r.Y)
		d.line(b.left, py, b.right, py, `stroke="`+refColor(i)+`" stroke-width="1.5" stroke-dasharray="4 3"`)
	}
	for i, s := range series {
		px, py := xyPoints(s, x, y)
		if len(px) == 0 {
			continue
		}
		var pts strings.Builder
		for j := range px {
			if j > 0 {
				pts.WriteByte(' ')
			}
			pts.WriteString(svgNum(xs.px(px[j])) + "," + svgNum(ys.px(py[j])))
		}
		fmt.Fprintf(&d.buf, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", pts.String(), svgColor(i))
		if len(px) <= svgMarkers {
			for j := range px {
				fmt.Fprintf(&d.buf, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", svgNum(xs.px(px[j])), svgNum(ys.px(py[j])), svgColor(i))
			}
		}
	}
	return d.bytes()
}

// refColor colours reference lines apart from the series palette.
func refColor(i int) string {
	return []string{"#555555", "#e15759", "#59a14f"}[i%3]
}

// ScatterChart draws each series as dots. With diagonal set both axes
// share one range and a dashed y = x line is drawn, so points above it
// took longer than the x value says. Empty data gives a "no data" chart.
func ScatterChart(title string, x, y Axis, series []XYSeries, diagonal bool) []byte {
	var xb, yb svgBounds
	have := false
	for _, s := range series {
		xs, ys := xyPoints(s, x, y)
		for i := range xs {
			xb.add(xs[i])
			yb.add(ys[i])
			have = true
		}
	}
	if !have {
		return noDataSVG(title)
	}
	var items []legendItem
	if len(series) > 1 {
		for i, s := range series {
			items = append(items, legendItem{s.Name, svgColor(i), legendDot})
		}
	}
	if diagonal {
		items = append(items, legendItem{"y = x", "#888888", legendDash})
		// One shared range keeps the diagonal at 45 degrees.
		xb.add(yb.lo)
		xb.add(yb.hi)
		yb = xb
		if x.Log != y.Log {
			y.Log = x.Log
		}
	}
	d := newSVG(svgWidth, svgHeight, title)
	b := svgLayout(svgHeight, items, 0)
	d.legend(items, 44)
	xs := svgMakeAxis(xb, x, false, !x.Log && !diagonal)
	ys := svgMakeAxis(yb, y, false, !y.Log && !diagonal)
	xs.p0, xs.p1 = b.left, b.right
	ys.p0, ys.p1 = b.bottom, b.top
	d.yAxis(b, &ys, y)
	d.xAxis(b, &xs, x, true)
	if diagonal {
		lo := math.Max(xs.lo, ys.lo)
		hi := math.Min(xs.hi, ys.hi)
		if xs.log {
			lo, hi = math.Pow(10, lo), math.Pow(10, hi)
		}
		d.line(xs.px(lo), ys.px(lo), xs.px(hi), ys.px(hi), `stroke="#888888" stroke-width="1.5" stroke-dasharray="4 3"`)
	}
	for i, s := range series {
		px, py := xyPoints(s, x, y)
		for j := range px {
			fmt.Fprintf(&d.buf, `<circle cx="%s" cy="%s" r="3.5" fill="%s" fill-opacity="0.8"/>`+"\n",
				svgNum(xs.px(px[j])), svgNum(ys.px(py[j])), svgColor(i))
		}
	}
	return d.bytes()
}

// BarChart draws vertical bars, one group per groups entry and one bar
// per series within a group, from a zero baseline (y.Log is ignored).
// Group labels thin out or tilt when they would overlap. Empty data
// gives a "no data" chart.
func BarChart(title string, x, y Axis, groups []string, series []BarSeries) []byte {
	var yb svgBounds
	for _, s := range series {
		for i, v := range s.Values {
			if i < len(groups) {
				yb.add(v)
			}
		}
	}
	if len(groups) == 0 || !yb.ok {
		return noDataSVG(title)
	}
	y.Log = false
	var items []legendItem
	if len(series) > 1 {
		for i, s := range series {
			items = append(items, legendItem{s.Name, svgColor(i), legendBar})
		}
	}

	// Label layout: all level if they fit; short labels (step numbers)
	// thin out; long ones (category names) tilt.
	const maxLabel = 24
	n := float64(len(groups))
	slot := (svgWidth - svgMarginL - svgMarginR) / n
	maxLen := 0
	for _, g := range groups {
		maxLen = max(maxLen, utf8.RuneCountInString(svgTrunc(g, maxLabel)))
	}
	need := float64(maxLen)*svgCharW + 6
	every, tilt := 1, false
	switch {
	case need <= slot:
	case maxLen <= 6:
		every = int(svgNiceStep(need / slot)) // every 2nd, 5th, 10th...: steps read naturally
	default:
		tilt = true
		if slot < 14 {
			every = int(svgNiceStep(14 / slot))
		}
	}
	extra, h := 0.0, svgHeight
	if tilt {
		extra = float64(maxLen)*svgCharW*0.58 + 4
		h += extra
	}

	d := newSVG(svgWidth, h, title)
	b := svgLayout(h, items, extra)
	d.legend(items, 44)
	ys := svgMakeAxis(yb, y, !y.Seconds, true)
	ys.p0, ys.p1 = b.bottom, b.top
	d.yAxis(b, &ys, y)
	slot = (b.right - b.left) / n
	units := countUnits
	if y.Seconds {
		units = secondUnits
	}
	ns := float64(max(1, len(series)))
	barW := slot * 0.8 / ns
	base := ys.px(0)
	for gi, g := range groups {
		x0 := b.left + float64(gi)*slot
		for si, s := range series {
			if gi >= len(s.Values) || !svgFinite(s.Values[gi]) {
				continue
			}
			v := s.Values[gi]
			top, bot := ys.px(v), base
			if top > bot {
				top, bot = bot, top
			}
			fmt.Fprintf(&d.buf, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
				svgNum(x0+slot*0.1+float64(si)*barW), svgNum(top), svgNum(barW), svgNum(bot-top), svgColor(si),
				svgEsc(barTip(g, s.Name, formatSig(v, units, false))))
		}
		if gi%every != 0 {
			continue
		}
		cx := x0 + slot/2
		d.line(cx, b.bottom, cx, b.bottom+4, `stroke="#333"`)
		label := svgTrunc(g, maxLabel)
		if tilt {
			// A tilted label runs left of its bar; shorten the first
			// ones so they stay inside the image.
			room := int((cx - 4) / (svgCharW * 0.82))
			label = svgTrunc(g, max(2, min(maxLabel, room)))
			ly := b.bottom + 14
			fmt.Fprintf(&d.buf, `<text x="%s" y="%s" text-anchor="end" transform="rotate(-35 %s %s)">%s</text>`+"\n",
				svgNum(cx), svgNum(ly), svgNum(cx), svgNum(ly), svgEsc(label))
		} else {
			d.text(cx, b.bottom+16, label, `text-anchor="middle"`)
		}
	}
	d.line(b.left, base, b.right, base, `stroke="#333"`)
	d.text((b.left+b.right)/2, d.h-10, x.Label, `text-anchor="middle"`)
	return d.bytes()
}

func barTip(group, series, value string) string {
	if series == "" {
		return group + ": " + value
	}
	return group + ", " + series + ": " + value
}

// sortedForms lists the distinct forms in name order, for series that
// must not depend on the kernels' order of appearance being stable.
func sortedForms(ks []Kernel) []string {
	var forms []string
	seen := map[string]bool{}
	for _, k := range ks {
		if !seen[k.Form] {
			seen[k.Form] = true
			forms = append(forms, k.Form)
		}
	}
	sort.Strings(forms)
	return forms
}
