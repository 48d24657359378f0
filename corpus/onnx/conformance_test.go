package onnx

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
)

var update = flag.Bool("update", false, "rewrite golden files (testdata/conformance-pass.txt) from this run")

// passFile lists the conformance cases known to pass, one a line.
const passFile = "testdata/conformance-pass.txt"

// caseStatus is how one conformance case ended.
type caseStatus int

const (
	casePass        caseStatus = iota
	caseFail                   // a mismatch or an error that is not ErrUnsupported: a bug
	caseUnsupported            // the import refused the model with an ErrUnsupported error
)

// caseResult is one conformance case's outcome.
type caseResult struct {
	name   string
	op     string
	status caseStatus
	detail string
	err    error // the import error of an unsupported case
	took   time.Duration
}

// TestConformance imports and evaluates every ONNX backend test case of
// the shared data (onnx-node/), comparing each output with the expected
// one through ir.Compare. The reduction length given to the tolerance is
// the largest extent of any input's axis: an upper bound on how many
// terms any output element of these small cases combines.
//
// A case passes when every output of every data set matches; it fails on
// a mismatch, an evaluation error or an import error that is not
// ErrUnsupported (all bugs); it is unsupported when the import refuses it
// with ErrUnsupported, whose message must name the node, operator and
// opset. The per-operator table is logged. The set of passing cases is
// compared with testdata/conformance-pass.txt: a listed case that no
// longer passes fails the test; newly passing cases are reported (-update
// rewrites the file).
func TestConformance(t *testing.T) {
	dir := nodeDir(t)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	require.NotEmpty(t, names)

	results := make([]caseResult, len(names))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range work {
				start := time.Now()
				results[i] = runCase(filepath.Join(dir, names[i]))
				results[i].took = time.Since(start)
			}
		})
	}
	for i := range names {
		work <- i
	}
	close(work)
	wg.Wait()
	opsOfCases(results, dir)

	// Unsupported cases must say where.
	nodeRef := regexp.MustCompile(`node "[^"]*" \([A-Za-z0-9_.]+, opset [0-9]+\): `)
	for _, r := range results {
		if r.status != caseUnsupported {
			continue
		}
		var ne *NodeError
		if assert.True(t, errors.As(r.err, &ne), "%s: unsupported error names no node: %v", r.name, r.err) {
			assert.Regexp(t, nodeRef, r.err.Error(), r.name)
			assert.NotEmpty(t, ne.Op, r.name)
			assert.Positive(t, ne.Opset, r.name)
		}
	}

	logTable(t, results)

	var passing []string
	for _, r := range results {
		if r.status == casePass {
			passing = append(passing, r.name)
		}
		if r.took > 10*time.Second {
			t.Logf("slow case: %s took %v", r.name, r.took.Round(time.Millisecond))
		}
	}
	if *update {
		var b strings.Builder
		b.WriteString("# ONNX backend test cases that TestConformance passes (go test ./corpus/onnx -run TestConformance -update).\n")
		for _, n := range passing {
			b.WriteString(n + "\n")
		}
		require.NoError(t, os.WriteFile(passFile, []byte(b.String()), 0o644))
		t.Logf("wrote %s: %d passing cases", passFile, len(passing))
		return
	}
	want := readPassFile(t)
	byName := map[string]caseResult{}
	for _, r := range results {
		byName[r.name] = r
	}
	for _, n := range want {
		r, ok := byName[n]
		switch {
		case !ok:
			t.Errorf("regression: %s is listed in %s but is not in the data", n, passFile)
		case r.status != casePass:
			t.Errorf("regression: %s passed before and now does not: %s", n, r.detail)
		}
	}
	var fresh []string
	for _, n := range passing {
		if !slices.Contains(want, n) {
			fresh = append(fresh, n)
		}
	}
	if len(fresh) > 0 {
		t.Logf("%d cases pass that %s does not list (run with -update): %s", len(fresh), passFile, strings.Join(fresh, " "))
	}
}

func readPassFile(t *testing.T) []string {
	f, err := os.Open(passFile)
	require.NoError(t, err, "run with -update to create it")
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// runCase imports one case and checks each of its data sets.
func runCase(dir string) caseResult {
	res := caseResult{name: filepath.Base(dir)}
	fail := func(format string, args ...any) caseResult {
		res.status = caseFail
		res.detail = fmt.Sprintf(format, args...)
		return res
	}
	m, err := Load(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return fail("load: %v", err)
	}
	defer m.Close()
	res.op = caseOp(m)
	imported := func(opt ImportOptions) (*Imported, bool) {
		imp, err := Import(m, opt)
		switch {
		case err == nil:
			return imp, true
		case errors.Is(err, ErrUnsupported):
			res.status = caseUnsupported
			res.err = err
			res.detail = err.Error()
		default:
			res.status = caseFail
			res.detail = err.Error()
		}
		return nil, false
	}
	// Inputs that give shapes, axes or bounds must be known at import
	// time; when the import asks for that, the integer and scalar inputs
	// are bound to each data set's values.
	imp, err := Import(m, ImportOptions{})
	bind := errors.Is(err, ErrNotConstant)
	if !bind {
		var ok bool
		if imp, ok = imported(ImportOptions{}); !ok {
			return res
		}
	}
	var inputs []string
	for _, vi := range m.Proto.GetGraph().GetInput() {
		if _, init := m.Tensors[vi.GetName()]; !init {
			inputs = append(inputs, vi.GetName())
		}
	}
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if len(sets) == 0 {
		return fail("no test data sets")
	}
	for _, set := range sets {
		xs := map[string]*ir.Tensor{}
		reduction := 1
		for i, name := range inputs {
			tt, err := LoadTensorProto(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
			if err != nil {
				return fail("%s: %v", filepath.Base(set), err)
			}
			x, err := tt.IRTensor()
			if err != nil {
				return fail("%s: input %q: %v", filepath.Base(set), name, err)
			}
			xs[name] = x
			for _, d := range x.Shape {
				reduction = max(reduction, int(d))
			}
		}
		feeds := map[string]*ir.Tensor{}
		if bind {
			consts := map[string]*ir.Tensor{}
			for name, x := range xs {
				if x.DType.IsInt() || len(x.Shape) == 0 {
					consts[name] = x
				}
			}
			var ok bool
			if imp, ok = imported(ImportOptions{Constants: consts}); !ok {
				return res
			}
		}
		g := imp.Graph
		for name, w := range imp.Weights {
			feeds[name] = w
		}
		for name, x := range xs {
			feeds[name] = x
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := ir.Eval(ctx, g, feeds, ir.EvalOptions{Magnitude: true})
		cancel()
		if err != nil {
			return fail("%s: eval: %v", filepath.Base(set), err)
		}
		for i, o := range g.Outputs {
			tt, err := LoadTensorProto(filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
			if err != nil {
				return fail("%s: %v", filepath.Base(set), err)
			}
			want, err := tt.IRTensor()
			if err != nil {
				return fail("%s: output %q: %v", filepath.Base(set), o.Name, err)
			}
			got := out.Outputs[o.Name]
			if got.DType != want.DType || !got.Shape.Equal(want.Shape) {
				return fail("%s: output %q is %s%v, want %s%v", filepath.Base(set), o.Name, got.DType, got.Shape, want.DType, want.Shape)
			}
			// The expected values are a program's result (numpy's); the
			// float64 evaluation is the truth with its magnitudes.
			mm, err := ir.Compare(want, got, out.Magnitudes[o.Name], reduction)
			if err != nil {
				return fail("%s: output %q: %v", filepath.Base(set), o.Name, err)
			}
			if mm != nil {
				return fail("%s: output %q: %v", filepath.Base(set), o.Name, mm)
			}
		}
	}
	res.status = casePass
	return res
}

// caseOp is the operator a single-operator case tests: its one node that
// is not a Constant. Cases with several nodes (the _expanded ones) are
// named by opsOfCases.
func caseOp(m *Model) string {
	var ops []string
	for _, n := range m.Proto.GetGraph().GetNode() {
		if n.GetOpType() != "Constant" {
			ops = append(ops, n.GetOpType())
		}
	}
	if len(ops) == 1 {
		return ops[0]
	}
	if len(ops) == 0 {
		return "Constant"
	}
	return ""
}

// opsOfCases names the operator of every case whose model has several
// nodes from the case's name: the longest known operator whose lower-case
// name starts the case name with underscores removed.
func opsOfCases(results []caseResult, dir string) {
	known := map[string]string{"lessequal": "LessOrEqual", "greaterequal": "GreaterOrEqual"}
	for op := range sinceVersions {
		known[strings.ToLower(op)] = op
	}
	for _, r := range results {
		if r.op != "" {
			known[strings.ToLower(r.op)] = r.op
		}
	}
	for i := range results {
		if results[i].op != "" {
			continue
		}
		key := strings.ReplaceAll(strings.TrimPrefix(results[i].name, "test_"), "_", "")
		best := ""
		for k, op := range known {
			if strings.HasPrefix(key, k) && len(k) > len(strings.ToLower(best)) {
				best = op
			}
		}
		if best == "" {
			best = strings.SplitN(strings.TrimPrefix(results[i].name, "test_"), "_", 2)[0]
		}
		results[i].op = best
	}
}

// logTable logs passed, failed and unsupported counts per operator, then
// the failures and the reasons for unsupported cases.
func logTable(t *testing.T, results []caseResult) {
	type counts struct{ pass, fail, unsup int }
	per := map[string]*counts{}
	var total counts
	for _, r := range results {
		c := per[r.op]
		if c == nil {
			c = &counts{}
			per[r.op] = c
		}
		switch r.status {
		case casePass:
			c.pass++
			total.pass++
		case caseFail:
			c.fail++
			total.fail++
		case caseUnsupported:
			c.unsup++
			total.unsup++
		}
	}
	ops := make([]string, 0, len(per))
	for op := range per {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-24s %6s %6s %12s\n", "op", "passed", "failed", "unsupported")
	for _, op := range ops {
		c := per[op]
		fmt.Fprintf(&b, "%-24s %6d %6d %12d\n", op, c.pass, c.fail, c.unsup)
	}
	fmt.Fprintf(&b, "%-24s %6d %6d %12d   (%d cases)\n", "total", total.pass, total.fail, total.unsup, len(results))
	t.Log(b.String())
	for _, r := range results {
		if r.status == caseFail {
			t.Logf("FAIL %s (%s): %s", r.name, r.op, r.detail)
		}
	}
	for _, r := range results {
		if r.status == caseUnsupported {
			t.Logf("unsupported %s: %s", r.name, r.detail)
		}
	}
}
