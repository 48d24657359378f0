package extract

import (
	"context"
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exactNeedCBC skips a test that needs the CBC solver when it is not installed,
// or fails it where CI asks for every test to run.
func exactNeedCBC(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(cbcName); err != nil {
		if os.Getenv(shareddata.RequireEnv) == "1" {
			t.Fatalf("%v; failing because %s=1", ErrNoCBC, shareddata.RequireEnv)
		}
		t.Skipf("%v; skipping", ErrNoCBC)
	}
}

// exactOpCosts is a cost function by operator name; operators not listed cost 1.
func exactOpCosts(costs map[string]float64) CostFunc {
	return func(g *egraph.Graph, n egraph.NodeID) float64 {
		if c, ok := costs[g.Node(n).Op.String()]; ok {
			return c
		}
		return 1
	}
}

func exactAdd(t *testing.T, g *egraph.EGraph[egraph.NoData], src string) egraph.ClassID {
	t.Helper()
	c, err := g.AddExpr(src)
	require.NoError(t, err)
	return c
}

// checkExact checks what every result must satisfy.
func checkExact(t testing.TB, p *Problem, r *ExactResult) {
	t.Helper()
	require.NotNil(t, r)
	require.NoError(t, r.Solution.Check(p))
	cost, err := r.Solution.DAGCost(p)
	require.NoError(t, err)
	assert.InDelta(t, cost, r.Cost, 1e-12*math.Max(1, cost))
	assert.LessOrEqual(t, r.LowerBound, r.Cost)
	assert.Equal(t, r.Optimal, r.LowerBound >= r.Cost*(1-exactTol))
}

// exactShared is the classic case where choosing each class by its own
// tree cost is wrong: x = (f s) or the leaf a, y = (g s) or the leaf b,
// with s costly. Alone, a and b are cheaper than (f s) and (g s); together
// (f s) and (g s) share s and win: 1+1+1+10 = 13 against 1+7+7 = 15.
func exactShared(t *testing.T) *Problem {
	p, _ := exactSharedGraph(t)
	return p
}

func exactSharedGraph(t *testing.T) (*Problem, *egraph.EGraph[egraph.NoData]) {
	g := egraph.NewPlain()
	root := exactAdd(t, g, "(pair (f s) (g s))")
	g.Union(exactAdd(t, g, "(f s)"), exactAdd(t, g, "a"), "x")
	g.Union(exactAdd(t, g, "(g s)"), exactAdd(t, g, "b"), "y")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{root}, exactOpCosts(map[string]float64{"s": 10, "a": 7, "b": 7}), nil)
	require.NoError(t, err)
	return p, g
}

func TestExactSharedSubterm(t *testing.T) {
	exactNeedCBC(t)
	p := exactShared(t)
	m := newExactModel(p)
	start := m.bottomUp(func(n int32) float64 { return p.Nodes[n].Cost })
	sc, err := start.DAGCost(p)
	require.NoError(t, err)
	require.Equal(t, 15.0, sc, "the bottom-up start takes the leaves")

	r, err := Exact(context.Background(), p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.Equal(t, 13.0, r.Cost)
	assert.Equal(t, 13.0, r.LowerBound)
	assert.True(t, r.Optimal)
	// The optimum shares s: four classes (pair, x, y, s) are computed.
	order, err := r.Solution.Needed(p)
	require.NoError(t, err)
	assert.Len(t, order, 4)

	// A worse start changes nothing.
	r2, err := Exact(context.Background(), p, ExactOptions{Start: start})
	require.NoError(t, err)
	assert.Equal(t, r.Solution.Choice, r2.Solution.Choice)
}

// exactThreeCycle builds, under the root (r A D):
//
//	A = {a, (f B)}   B = {b, (g C)}   C = {(h A), (k S)}   D = {d, (m S)}   S = {s}
//
// with s = 4, a = b = 6, d = 4 and every other node 1. Each class alone
// is cheapest through its leaf, so both bottom-up starts take r, a, d
// (11). The optimum shares s: r, f, g, k, m, s (9). The integer program
// without cycle rows takes r, f, g, h, d (8), where A reads itself through
// B and C; no pair row covers that 3-cycle, so it is found and cut after
// the first solve. The bounds that need no solver stop at 7.
func exactThreeCycle(t *testing.T) *Problem {
	g := egraph.NewPlain()
	a := exactAdd(t, g, "a")
	g.Union(exactAdd(t, g, "(f (g (k s)))"), a, "A")
	g.Union(exactAdd(t, g, "(g (k s))"), exactAdd(t, g, "b"), "B")
	g.Union(exactAdd(t, g, "(k s)"), exactAdd(t, g, "(h a)"), "C")
	g.Union(exactAdd(t, g, "(m s)"), exactAdd(t, g, "d"), "D")
	g.Rebuild()
	root := exactAdd(t, g, "(r a d)")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{root}, exactOpCosts(map[string]float64{"s": 4, "a": 6, "b": 6, "d": 4}), nil)
	require.NoError(t, err)
	return p
}

func TestExactCutsCycles(t *testing.T) {
	exactNeedCBC(t)
	p := exactThreeCycle(t)
	require.Len(t, p.Nodes, 10)
	m := newExactModel(p)
	assert.Empty(t, m.twoCycles())
	assert.Equal(t, 7.0, m.pathBound())
	for _, chain := range []bool{false, true} {
		c, err := m.bottomUpAgg(func(n int32) float64 { return p.Nodes[n].Cost }, chain).DAGCost(p)
		require.NoError(t, err)
		assert.Equal(t, 11.0, c)
	}

	var runs int
	sawCycle := false
	debugCBC = func(dir, log string) { runs++ }
	defer func() { debugCBC = nil }()

	// The relaxation alone picks the cycle.
	cm := newCBCModel(m)
	bin, err := exec.LookPath(cbcName)
	require.NoError(t, err)
	res, err := cm.runCBC(context.Background(), bin, t.TempDir(), nil, 0)
	require.NoError(t, err)
	require.True(t, res.optimal)
	s := NewSolution(p)
	for _, n := range res.chosen {
		s.Choice[p.Nodes[n].Class] = n
	}
	if cyc := exactCycles(p, s); len(cyc) > 0 {
		sawCycle = true
		assert.Len(t, cyc[0], 3)
	}
	assert.True(t, sawCycle, "the relaxation without cycle rows should choose the 3-cycle")

	runs = 0
	r, err := Exact(context.Background(), p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.Equal(t, 9.0, r.Cost)
	assert.True(t, r.Optimal)
	assert.GreaterOrEqual(t, runs, 2, "one solve finds the cycle, a second one the optimum")
}

func TestExactTwoCycleRows(t *testing.T) {
	exactNeedCBC(t)
	// A = {a, (f B)}, B = {b, (g A)} under (r A), with a = 5, b = 3: the
	// program without pair rows takes r, f, g (3), a 2-cycle; the pair row
	// forbids f and g together before any solve, leaving r, f, b (5).
	g := egraph.NewPlain()
	a := exactAdd(t, g, "a")
	g.Union(exactAdd(t, g, "(g a)"), exactAdd(t, g, "b"), "B")
	g.Union(exactAdd(t, g, "(f (g a))"), a, "A")
	g.Rebuild()
	root := exactAdd(t, g, "(r a)")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{root}, exactOpCosts(map[string]float64{"a": 5, "b": 3}), nil)
	require.NoError(t, err)
	m := newExactModel(p)
	cm := newCBCModel(m)
	require.Len(t, cm.pairs, 1)
	bin, err := exec.LookPath(cbcName)
	require.NoError(t, err)
	solve := func() (float64, int) {
		res, err := cm.runCBC(context.Background(), bin, t.TempDir(), nil, 0)
		require.NoError(t, err)
		require.True(t, res.optimal)
		s := NewSolution(p)
		sum := 0.0
		for _, n := range res.chosen {
			s.Choice[p.Nodes[n].Class] = n
			sum += p.Nodes[n].Cost
		}
		return sum, len(exactCycles(p, s))
	}
	cost, cycles := solve()
	assert.Equal(t, 5.0, cost)
	assert.Zero(t, cycles)
	cm.pairs = nil
	cost, cycles = solve()
	assert.Equal(t, 3.0, cost)
	assert.Equal(t, 1, cycles)

	r, err := Exact(context.Background(), p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.Equal(t, 5.0, r.Cost)
	assert.True(t, r.Optimal)
}

func TestExactReductions(t *testing.T) {
	// x = {(f s t), (f s), (k x)}: (f s t) is dominated by (f s) (same cost,
	// fewer children), (k x) reads its own class; t is then unreachable.
	g := egraph.NewPlain()
	x := exactAdd(t, g, "(f s t)")
	g.Union(x, exactAdd(t, g, "(f s)"), "x")
	g.Rebuild()
	g.Union(x, exactAdd(t, g, "(k (f s))"), "x")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{x}, exactOpCosts(nil), nil)
	require.NoError(t, err)
	m := newExactModel(p)
	var alive []string
	for i, ok := range m.alive {
		if ok {
			alive = append(alive, g.Node(p.NodeIDs[i]).Op.String())
		}
	}
	assert.ElementsMatch(t, []string{"f", "s"}, alive)
	assert.Len(t, m.classes, 2)
	// Every needed class here is forced, so the bound proves the start
	// without the solver.
	assert.Equal(t, 2.0, m.lowerBound())
	r, err := Exact(context.Background(), p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.True(t, r.Optimal)
	assert.Equal(t, 2.0, r.Cost)
}

func TestExactNoSolver(t *testing.T) {
	defer func(name string) { cbcName = name }(cbcName)
	cbcName = "cbc-not-installed-here"
	_, err := Exact(context.Background(), exactShared(t), ExactOptions{})
	require.ErrorIs(t, err, ErrNoCBC)
	assert.Contains(t, err.Error(), "apt-get install coinor-cbc")

	// A problem the bound settles never needs the solver.
	g := egraph.NewPlain()
	root := exactAdd(t, g, "(f a b)")
	g.Rebuild()
	p, err := NewProblem(&g.Graph, []egraph.ClassID{root}, exactOpCosts(nil), nil)
	require.NoError(t, err)
	r, err := Exact(context.Background(), p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.True(t, r.Optimal)
}

func TestExactStart(t *testing.T) {
	_, err := Exact(context.Background(), exactShared(t), ExactOptions{Start: NewSolution(exactShared(t))})
	require.Error(t, err, "a start that fails Check")

	// With no time to search, a good start is the answer and the bound
	// still holds.
	p, g := exactSharedGraph(t)
	shared := NewSolution(p)
	for i, id := range p.NodeIDs {
		switch g.Node(id).Op.String() {
		case "pair", "f", "g", "s":
			shared.Choice[p.Nodes[i].Class] = int32(i)
		}
	}
	cost, err := shared.DAGCost(p)
	require.NoError(t, err)
	require.Equal(t, 13.0, cost)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := Exact(ctx, p, ExactOptions{Start: shared})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.Equal(t, 13.0, r.Cost)
	assert.False(t, r.Optimal)
}

func TestExactStopsEarly(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		opt  ExactOptions
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, ExactOptions{}},
		{"tiny timeout", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, ExactOptions{Timeout: time.Nanosecond}},
		{"past deadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, ExactOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []*Problem{exactShared(t), exactThreeCycle(t)} {
				ctx, cancel := tc.ctx()
				r, err := Exact(ctx, p, tc.opt)
				cancel()
				require.NoError(t, err)
				checkExact(t, p, r)
				assert.False(t, r.Optimal)
			}
		})
	}
}

// TestExactCancelMidRun cancels while CBC works on a problem it cannot
// finish at once (it needs minutes), and expects the start back with a
// bound, the solver run ended before it reported.
func TestExactCancelMidRun(t *testing.T) {
	exactNeedCBC(t)
	p := exactLoadGym(t, "tensat/resnet50.json")
	var logs []string
	debugCBC = func(dir, log string) { logs = append(logs, log) }
	defer func() { debugCBC = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	t0 := time.Now()
	r, err := Exact(ctx, p, ExactOptions{})
	require.NoError(t, err)
	checkExact(t, p, r)
	assert.False(t, r.Optimal)
	// One run, stopped (none if a slow machine cancels before it starts).
	require.LessOrEqual(t, len(logs), 1)
	for _, log := range logs {
		assert.NotContains(t, log, "Result -", "CBC finished instead of being stopped")
	}
	t.Logf("cancelled after %v: cost %v, bound %v", time.Since(t0), r.Cost, r.LowerBound)
}

func TestCBCLogBound(t *testing.T) {
	log := `Continuous objective value is 0.372287 - 4.00 seconds
Cbc0010I After 0 nodes, 1 on tree, 1e+50 best solution, best possible 0.5 (2.05 seconds)
Cbc0010I After 100 nodes, 1 on tree, 0.824704 best solution, best possible 0.58414184 (9.05 seconds)
Cbc0005I Partial search - best objective 0.824704 (best possible 0.58414184), took 0 iterations and 0 nodes (9.57 seconds)

Result - Stopped on time limit

Objective value:                0.82470400
Lower bound:                    0.584
`
	// The last best possible wins (less its last digit's unit), not the
	// "Lower bound:" line rounded up to 0.584, nor the root LP.
	assert.InDelta(t, 0.58414183, cbcLogBound(log), 1e-15)
	assert.InDelta(t, 0.372286, cbcLogBound("Continuous objective value is 0.372287 - 4.00 seconds\n"), 1e-15)
	assert.InDelta(t, 0.586, cbcLogBound("Lower bound:                    0.587\n"), 1e-15)
	assert.InDelta(t, 12.0, cbcLogBound("Cbc0010I After 9 nodes, best possible 1.3e+01 (2 seconds)\n"), 1e-12)
	assert.Equal(t, math.Inf(-1), cbcLogBound("Cbc0010I After 0 nodes, 1 on tree, 1e+50 best solution, best possible -1e+50 (2.05 seconds)\n"))
	assert.Equal(t, math.Inf(-1), cbcLogBound(""))
}
