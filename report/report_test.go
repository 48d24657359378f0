package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// fullReport fills every field, with emulated measurements so the
// caveat paths render.
func fullReport() *Report {
	return &Report{
		Model:   "tiny-llama",
		Target:  "H200",
		Arch:    "sm_90",
		Version: "v0.3.0",
		Seed:    7,
		Options: "--budget 30s --seed 7 --measure emulated",
		Budget:  30 * time.Second,
		Elapsed: 12345 * time.Millisecond,
		EndedBy: "work limits",
		Steps: []Step{
			{Index: 0, Phase: "saturate", Stage: "fuse", Nodes: 120, Classes: 80, At: 10 * time.Millisecond},
			{Index: 1, Phase: "saturate", Stage: "fuse", Nodes: 950, Classes: 400, At: 120 * time.Millisecond},
			{Index: 2, Phase: "extract", Nodes: 950, Classes: 400, Best: 2.5e-3, At: 300 * time.Millisecond},
			{Index: 3, Phase: "saturate", Stage: "schedule", Nodes: 4200, Classes: 1500, Best: 2.5e-3, At: 2 * time.Second},
			{Index: 4, Phase: "extract", Nodes: 4200, Classes: 1500, Best: 1.1e-3, At: 5 * time.Second},
			{Index: 5, Phase: "measure", Nodes: 4200, Classes: 1500, Best: 0.98e-3, At: 12 * time.Second},
		},
		Categories: []Category{
			{Name: "matmul", Launches: 8, NaiveLaunches: 8, Predicted: 6.1e-4, NaivePredicted: 9.0e-4, Measured: 2.2e-2},
			{Name: "attention", Launches: 2, NaiveLaunches: 12, Predicted: 2.0e-4, NaivePredicted: 1.5e-3, Measured: 8.0e-3, MeasuredWhere: "emulated"},
			{Name: "elementwise", Launches: 3, NaiveLaunches: 40, Predicted: 1.7e-4, NaivePredicted: 1.9e-3},
		},
		Kernels: []Kernel{
			{Launch: "l0.qkv", Kernel: "matmul_64x128_k32", Form: "matmul", Schedule: "tile=64x128 k=32", Predicted: 8.0e-5, Measured: 2.9e-3, Where: "emulated"},
			{Launch: "l0.attn", Kernel: "flash_attn_d64", Form: "attention", Schedule: "block=64", Predicted: 1.0e-4, Measured: 4.0e-3, Where: "emulated"},
			{Launch: "l0.norm", Kernel: "rmsnorm_row", Form: "row", Schedule: "threads=256", Predicted: 9.5e-6},
			{Launch: "l0.act", Kernel: "silu_mul", Form: "elementwise", Schedule: "vec=4", Predicted: 5.2e-6, Measured: 3.1e-4, Where: "emulated"},
		},
		RuleSets: []RuleSet{
			{Name: "fuse", Rules: 24, Fired: 17, Matches: 3120, Without: 3.9e-3},
			{Name: "schedule", Rules: 9, Fired: 9, Matches: 880, Without: 1.6e-3},
			{Name: "algebra", Rules: 31, Fired: 4, Matches: 12},
		},
		Summary: Summary{
			Launches: 13, NaiveLaunches: 60, Prep: 3, Layers: 2,
			Predicted: 0.98e-3, Naive: 4.3e-3, Floor: 0.41e-3,
			FloorBytes: 1.97e9, FloorFLOPs: 3.3e11,
			Verified: "outputs match the naive program within 1e-3 on 3 random inputs",
		},
		Measured: "emulated",
		Notes: []string{
			"attention was not tuned: no tune database for H200",
			"2 kernels were not measured (row form has no emulation)",
		},
	}
}

// specialReport puts XML and Markdown specials in every name.
func specialReport() *Report {
	r := fullReport()
	r.Model = `a&b <c> "d" 'e' | x`
	r.Categories[0].Name = "mat<mul>&co"
	r.Kernels[0].Kernel = "k|`odd`<k>"
	r.Kernels[0].Form = "f&<g>"
	r.RuleSets[0].Name = "*fuse*_[x]"
	r.Notes = append(r.Notes, "line one\nline <two> & three")
	r.Steps[1].Stage = "st<age>&"
	return r
}

// goldenDir compares the files under dir with testdata/<name>.*.golden,
// or rewrites those under -update.
func goldenDir(t *testing.T, name, dir string) {
	t.Helper()
	got := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got[name+"."+filepath.Base(p)+".golden"] = data
		return nil
	}))
	gdir := "testdata"
	old, _ := filepath.Glob(filepath.Join(gdir, name+".*.golden"))
	if *update {
		require.NoError(t, os.MkdirAll(gdir, 0o755))
		for _, p := range old {
			require.NoError(t, os.Remove(p))
		}
		for f, data := range got {
			require.NoError(t, os.WriteFile(filepath.Join(gdir, f), data, 0o644))
		}
		return
	}
	var want []string
	for _, p := range old {
		want = append(want, filepath.Base(p))
	}
	var have []string
	for f := range got {
		have = append(have, f)
	}
	sort.Strings(have)
	require.Equal(t, want, have, "written files differ from the golden set (go test -update rewrites it)")
	for _, f := range have {
		w, err := os.ReadFile(filepath.Join(gdir, f))
		require.NoError(t, err)
		assert.Equal(t, string(w), string(got[f]), "%s differs (go test -update rewrites it)", f)
	}
}

func TestReportGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *Report
	}{
		{"full", fullReport()},
		{"empty", &Report{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, tc.r.WriteFiles(dir))
			goldenDir(t, tc.name, dir)
		})
	}
}

func TestReportDeterministic(t *testing.T) {
	for _, mk := range []func() *Report{fullReport, specialReport, func() *Report { return &Report{} }} {
		a, b := mk(), mk()
		require.Equal(t, a.Markdown(), b.Markdown())
		require.Equal(t, a.Markdown(), a.Markdown())
		for _, c := range a.charts() {
			require.Equal(t, c.svg(a), c.svg(b), c.file)
		}
		d1, d2 := t.TempDir(), t.TempDir()
		require.NoError(t, a.WriteFiles(d1))
		require.NoError(t, b.WriteFiles(d2))
		for _, f := range []string{FileName, filepath.Join(AssetsDir, bestSVG), filepath.Join(AssetsDir, categoriesSVG)} {
			x, err := os.ReadFile(filepath.Join(d1, f))
			require.NoError(t, err)
			y, err := os.ReadFile(filepath.Join(d2, f))
			require.NoError(t, err)
			require.Equal(t, x, y, f)
		}
	}
}

func TestReportWallClockOmitted(t *testing.T) {
	r := fullReport()
	md := string(r.Markdown())
	assert.Contains(t, md, "| Elapsed | 12.3 s |")
	assert.Contains(t, md, " At |")

	r.Elapsed = 0
	for i := range r.Steps {
		r.Steps[i].At = 0
	}
	md = string(r.Markdown())
	assert.NotContains(t, md, "Elapsed")
	assert.NotContains(t, md, " At |")
}

func TestReportWriteFilesRemovesStaleChart(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, fullReport().WriteFiles(dir))
	require.FileExists(t, filepath.Join(dir, AssetsDir, measuredSVG))

	r := fullReport()
	for i := range r.Kernels {
		r.Kernels[i].Measured = 0
	}
	require.NoError(t, r.WriteFiles(dir))
	require.NoFileExists(t, filepath.Join(dir, AssetsDir, measuredSVG))
	assert.NotContains(t, string(r.Markdown()), measuredSVG)
}

// svgCases are charts from many shapes of data, for the well-formedness
// checks.
func svgCases() map[string][]byte {
	nan, inf := math.NaN(), math.Inf(1)
	out := map[string][]byte{}
	add := func(name string, r *Report) {
		for _, c := range r.charts() {
			out[name+"/"+c.file] = c.svg(r)
		}
		out[name+"/measured-direct"] = r.MeasuredChart()
	}
	add("full", fullReport())
	add("empty", &Report{})
	add("special", specialReport())

	weird := fullReport()
	weird.Steps = []Step{{Index: 3, Best: nan, Nodes: 0}, {Index: 4, Best: inf}, {Index: 5, Best: 1e-3}}
	weird.Categories = []Category{{Name: "x", Predicted: nan, NaivePredicted: inf, Measured: -1}}
	weird.Kernels = []Kernel{{Predicted: nan, Measured: 1e-3}, {Predicted: 0, Measured: 5}, {Predicted: 1e-9, Measured: 1e-9}}
	weird.Summary.Floor, weird.Summary.Naive = inf, nan
	add("weird", weird)

	zero := &Report{
		Steps:      []Step{{Index: 0}, {Index: 0}},
		Categories: []Category{{Name: "a"}, {Name: "b"}},
		Kernels:    []Kernel{{Predicted: 2e-3, Measured: 2e-3}},
	}
	add("zero", zero)

	wide := fullReport()
	wide.Steps = nil
	for i := range 500 {
		wide.Steps = append(wide.Steps, Step{Index: i, Nodes: i * 4000, Best: 1 / float64(i+1)})
	}
	for i := range 30 {
		wide.Categories = append(wide.Categories, Category{Name: strings.Repeat("long category name ", 3), Predicted: float64(i)})
	}
	add("wide", wide)

	out["line-nan-only"] = LineChart("t", Axis{}, Axis{Log: true}, []XYSeries{{X: []float64{nan, 1}, Y: []float64{1, -1}}})
	out["bar-empty-groups"] = BarChart("t", Axis{}, Axis{}, nil, []BarSeries{{Values: []float64{1}}})
	out["scatter-log"] = ScatterChart("t", Axis{Log: true, Seconds: true}, Axis{Log: true, Seconds: true},
		[]XYSeries{{Name: "a", X: []float64{1e-7, 3}, Y: []float64{2e-7, 1e-2}}, {Name: "b", X: []float64{1}, Y: []float64{1}}}, true)
	out["scatter-single"] = ScatterChart("t", Axis{}, Axis{}, []XYSeries{{X: []float64{5}, Y: []float64{5}}}, false)
	out["line-negative"] = LineChart("t", Axis{}, Axis{Seconds: true}, []XYSeries{{X: []float64{-3, 2}, Y: []float64{-1e-3, 2e-3}}})
	return out
}

func TestSVGWellFormed(t *testing.T) {
	cases := svgCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		data := cases[name]
		if strings.HasSuffix(name, "/measured-direct") && data == nil { // nothing measured: no chart
			continue
		}
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, data)
			s := string(data)
			assert.NotContains(t, s, "NaN")
			assert.NotContains(t, s, "Inf")
			dec := xml.NewDecoder(bytes.NewReader(data))
			root := ""
			for {
				tok, err := dec.Token()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				if se, ok := tok.(xml.StartElement); ok && root == "" {
					root = se.Name.Local
				}
			}
			assert.Equal(t, "svg", root)
		})
	}
}

func TestSVGNoData(t *testing.T) {
	r := &Report{}
	for _, svg := range [][]byte{r.BestChart(), r.EGraphChart(), r.CategoryChart()} {
		assert.Contains(t, string(svg), ">no data<")
	}
	assert.Nil(t, r.MeasuredChart())
	assert.NotContains(t, string(r.Markdown()), measuredSVG)
}

func TestReportSpecialCharacters(t *testing.T) {
	r := specialReport()
	md := string(r.Markdown())
	assert.Contains(t, md, "# lumsearch optimize: a&amp;b &lt;c&gt; \"d\" 'e' \\| x\n")
	assert.Contains(t, md, "| mat&lt;mul&gt;&amp;co |")
	assert.Contains(t, md, "``k\\|`odd`<k>``")
	assert.Contains(t, md, "| \\*fuse\\*\\_\\[x\\] |")
	assert.Contains(t, md, "- line one line &lt;two&gt; &amp; three\n")
	assert.NotContains(t, md, "<c>")

	// The SVG text decodes back to the original names.
	for _, c := range []struct {
		svg  []byte
		want string
	}{
		{r.CategoryChart(), "mat<mul>&co"},
		{r.MeasuredChart(), "f&<g>"},
	} {
		var texts []string
		dec := xml.NewDecoder(bytes.NewReader(c.svg))
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if cd, ok := tok.(xml.CharData); ok {
				texts = append(texts, string(cd))
			}
		}
		assert.Contains(t, texts, c.want)
	}
}

func TestFormatSig(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0 s"},
		{1.234e-3, "1.23 ms"},
		{45.6e-6, "45.6 µs"},
		{999.7e-6, "1.00 ms"},
		{9.996e-3, "10.0 ms"},
		{123.4e-9, "123 ns"},
		{5e-10, "0.500 ns"},
		{12.345, "12.3 s"},
		{4000, "4000 s"},
		{-2e-3, "-2.00 ms"},
		{math.NaN(), "n/a"},
		{math.Inf(-1), "n/a"},
	} {
		assert.Equal(t, tc.want, fmtSeconds(tc.v), "%g", tc.v)
	}
	assert.Equal(t, "3.71×", fmtRatio(3.7123))
	assert.Equal(t, "1.97 GB", formatSig(1.97e9, byteUnits, false))
	assert.Equal(t, "1 ms", formatSig(1e-3, secondUnits, true))
}

func TestLinearAxisTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi  float64
		seconds bool
		integer bool
		want    []string
	}{
		{0, 2.5e-3, true, false, []string{"0", "0.5 ms", "1.0 ms", "1.5 ms", "2.0 ms", "2.5 ms"}},
		{0, 4200, false, true, []string{"0", "1k", "2k", "3k", "4k", "5k"}},
		{3, 3, false, true, []string{"2", "3", "4"}},
		{0, 0, false, true, []string{"0", "1"}},
		{0, 3, false, true, []string{"0", "1", "2", "3"}},
	} {
		a := svgLinearAxis(tc.lo, tc.hi, Axis{Seconds: tc.seconds}, tc.integer)
		assert.Equal(t, tc.want, a.labels, "%g..%g", tc.lo, tc.hi)
	}
}

// TestReportBuckets: a program with a runtime extent shows its predicted
// time at each bucket; one without shows no such section.
func TestReportBuckets(t *testing.T) {
	r := &Report{Model: "tiny-llama:decode", Buckets: []BucketTime{{"past", 0, 41e-6, 20.5e-6}, {"past", 127, 52.5e-6, 0}}}
	md := string(r.Markdown())
	assert.Contains(t, md, "## Predicted time per bucket")
	assert.Contains(t, md, "| past=0 | 41.0 µs | 20.5 µs | 2.00× |")
	assert.Contains(t, md, "| past=127 | 52.5 µs | 0 s | — |")
	assert.NotContains(t, string((&Report{Model: "m"}).Markdown()), "per bucket")
}

// TestReportKernelBuckets: a step's kernels that change with the rows
// present list each run of buckets sharing a kernel once, with its
// schedule, each kernel once however many launches run it; kernels
// without buckets are left out of that table.
func TestReportKernelBuckets(t *testing.T) {
	buckets := []KernelBucket{{1, "k3_r8", "bm=8,gemv"}, {2, "k3_r8", "bm=8,gemv"}, {4, "k3_r8", "bm=8,gemv"}, {8, "k3_r8", "bm=8,gemv"}, {16, "k3", "bm=64,mma"}}
	r := &Report{Model: "m:step", Kernels: []Kernel{
		{Launch: "k3", Kernel: "k3", Form: "matmul", Buckets: buckets},
		{Launch: "k9", Kernel: "k3", Form: "matmul", Buckets: buckets},
		{Launch: "k4", Kernel: "k4", Form: "elementwise"},
		{Launch: "k5", Kernel: "k5", Form: "row", Buckets: []KernelBucket{{1, "k5_r1", "threads=32"}, {2, "k5", "threads=64"}}},
	}}
	md := string(r.Markdown())
	assert.Contains(t, md, "### Kernels by rows present")
	assert.Contains(t, md, "| `k3` | 1–8 | `k3_r8` | `bm=8,gemv` |\n| `k3` | 9–16 | `k3` | `bm=64,mma` |\n| `k5` | 1 | `k5_r1` | `threads=32` |\n| `k5` | 2 | `k5` | `threads=64` |\n")
	_, section, _ := strings.Cut(md, "### Kernels by rows present")
	section, _, _ = strings.Cut(section, "\n## ")
	assert.Equal(t, 2, strings.Count(section, "\n| `k3` | "), "each kernel once: %s", section)
	assert.NotContains(t, section, "`k4`")
	assert.NotContains(t, string((&Report{Model: "m", Kernels: []Kernel{{Kernel: "k0"}}}).Markdown()), "Kernels by rows present")
}

// TestCategories: launches group by their form's category (the form
// without prologue or epilogue), in name order, and a category's
// measured time is given only when every one of its launches was
// measured. The times are whole numbers so that the sums are exact.
func TestCategories(t *testing.T) {
	for _, tc := range []struct {
		name           string
		kernels, naive []Kernel
		want           []Category
	}{
		{name: "empty"},
		{
			name: "grouped by form without prologue or epilogue",
			kernels: []Kernel{
				{Form: "matmul, prologue [rmsnorm]", Predicted: 2},
				{Form: "elementwise", Predicted: 1},
				{Form: "matmul", Predicted: 3},
			},
			naive: []Kernel{
				{Form: "matmul", Predicted: 4},
				{Form: "row", Predicted: 5},
				{Form: "elementwise, epilogue [add]", Predicted: 6},
				{Form: "elementwise", Predicted: 7},
			},
			want: []Category{
				{Name: "elementwise", Launches: 1, NaiveLaunches: 2, Predicted: 1, NaivePredicted: 6 + 7},
				{Name: "matmul", Launches: 2, NaiveLaunches: 1, Predicted: 2 + 3, NaivePredicted: 4},
				{Name: "row", NaiveLaunches: 1, NaivePredicted: 5},
			},
		},
		{
			name: "measured only when every launch was",
			kernels: []Kernel{
				{Form: "matmul", Predicted: 1, Measured: 2},
				{Form: "matmul, epilogue [silu]", Predicted: 1, Measured: 3},
				{Form: "attention", Predicted: 1, Measured: 4},
				{Form: "attention", Predicted: 1},
			},
			want: []Category{
				{Name: "attention", Launches: 2, Predicted: 2},
				{Name: "matmul", Launches: 2, Predicted: 2, Measured: 5},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Categories(tc.kernels, tc.naive))
		})
	}
}
