package egraph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunnerLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		runner Runner[NoData]
		ctx    func() context.Context
		want   StopReason
		check  func(t *testing.T, g *EGraph[NoData], rep *Report)
	}{
		{
			name:   "iterations",
			runner: Runner[NoData]{IterLimit: 3, Scheduler: SimpleScheduler{}},
			want:   IterationLimit,
			check: func(t *testing.T, _ *EGraph[NoData], rep *Report) {
				require.Len(t, rep.Iterations, 3)
			},
		},
		{
			name:   "nodes",
			runner: Runner[NoData]{NodeLimit: 500, Scheduler: SimpleScheduler{}},
			want:   NodeLimit,
			check: func(t *testing.T, g *EGraph[NoData], _ *Report) {
				// The limit is checked after every match, so the overshoot
				// is at most one right side's nodes (and the final rebuild
				// may merge some away).
				require.LessOrEqual(t, g.NumNodes(), 502)
			},
		},
		{
			name:   "time",
			runner: Runner[NoData]{TimeLimit: 30 * time.Millisecond, IterLimit: 1000, NodeLimit: 1 << 30, Scheduler: SimpleScheduler{}},
			want:   TimeLimit,
			check: func(t *testing.T, _ *EGraph[NoData], rep *Report) {
				require.Less(t, rep.Time, 5*time.Second)
			},
		},
		{
			name:   "canceled before start",
			runner: Runner[NoData]{},
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			want: Canceled,
			check: func(t *testing.T, _ *EGraph[NoData], rep *Report) {
				require.Empty(t, rep.Iterations)
			},
		},
		{
			name: "hook stops",
			runner: Runner[NoData]{Scheduler: SimpleScheduler{}, Hooks: []Hook[NoData]{func(_ *EGraph[NoData], it *Iteration) error {
				if it.Index == 1 {
					return ErrStop
				}
				return nil
			}}},
			want: HookStopped,
			check: func(t *testing.T, _ *EGraph[NoData], rep *Report) {
				require.Len(t, rep.Iterations, 2)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewPlain()
			_, err := g.AddExpr(acTerm(12))
			require.NoError(t, err)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			rep, err := tc.runner.Run(ctx, g, acRules(t))
			require.NoError(t, err)
			require.Equal(t, tc.want, rep.Stop, "stop reason")
			tc.check(t, g, rep)
			checkInvariants(t, g)
		})
	}
}

func TestRunnerCancelMidRun(t *testing.T) {
	g := NewPlain()
	_, err := g.AddExpr(acTerm(12))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := Runner[NoData]{IterLimit: 1000, NodeLimit: 1 << 30, TimeLimit: time.Hour, Scheduler: SimpleScheduler{},
		Hooks: []Hook[NoData]{func(_ *EGraph[NoData], it *Iteration) error {
			if it.Index == 2 {
				cancel()
			}
			return nil
		}}}
	rep, err := r.Run(ctx, g, acRules(t))
	require.NoError(t, err)
	require.Equal(t, Canceled, rep.Stop)
	require.Len(t, rep.Iterations, 3)
	checkInvariants(t, g)
}

func TestRunnerHookError(t *testing.T) {
	g := NewPlain()
	_, err := g.AddExpr(acTerm(5))
	require.NoError(t, err)
	boom := errors.New("boom")
	r := Runner[NoData]{Hooks: []Hook[NoData]{func(*EGraph[NoData], *Iteration) error { return boom }}}
	rep, err := r.Run(context.Background(), g, acRules(t))
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "hook after iteration 0")
	require.Equal(t, Failed, rep.Stop)
}

func TestBackoffBansAndStillSaturates(t *testing.T) {
	sched := &BackoffScheduler{MatchLimit: 20, BanLength: 2}
	g, rep := saturateAC(t, 7, sched)
	require.Equal(t, Saturated, rep.Stop)
	require.Equal(t, 127, g.NumClasses())
	banned := 0
	for _, it := range rep.Iterations {
		for _, r := range it.Rules {
			if r.Banned {
				banned++
			}
		}
	}
	require.Positive(t, banned, "a match limit of 20 must ban the AC rules")
}

func TestReportCounts(t *testing.T) {
	g, rep := saturateAC(t, 4, SimpleScheduler{})
	last := rep.Iterations[len(rep.Iterations)-1]
	require.Equal(t, g.NumNodes(), last.Nodes)
	require.Equal(t, g.NumClasses(), last.Classes)
	applied := 0
	for _, it := range rep.Iterations {
		require.Len(t, it.Rules, 4)
		require.Equal(t, "comm", it.Rules[0].Name)
		for _, r := range it.Rules {
			require.LessOrEqual(t, r.Applied, r.Matches*1)
			applied += r.Applied
		}
		require.Positive(t, it.Search+it.Apply+it.Rebuild)
	}
	for _, r := range last.Rules {
		require.Zero(t, r.Applied, "the saturating iteration applies nothing")
	}
	congruences := 0
	for _, it := range rep.Iterations {
		congruences += it.Congruences
	}
	require.Equal(t, g.NumUnions(), applied+congruences, "every merge is a rule application or a congruence")
}

// fingerprint is everything about an e-graph that must be reproducible:
// its serialized form, with class ids, and its union log.
func fingerprint(t *testing.T, g *Graph) []byte {
	var b bytes.Buffer
	require.NoError(t, ToSerialized(g, nil, SerializeOptions{}).Write(&b))
	for i := range g.NumUnions() {
		fmt.Fprintln(&b, g.UnionAt(i))
	}
	return b.Bytes()
}

// requireSameFingerprint reports the first differing line, not both
// e-graphs in full.
func requireSameFingerprint(t *testing.T, want, got []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := range min(len(w), len(g)) {
		if !bytes.Equal(w[i], g[i]) {
			t.Fatalf("e-graphs differ at line %d: want %q, got %q", i+1, w[i], g[i])
		}
	}
	t.Fatalf("e-graphs differ in length: %d lines, want %d", len(g), len(w))
}

// TestDeterminism runs the math workload at GOMAXPROCS 1 and 2, with
// sequential and parallel search: every run must give the same e-graph,
// class ids and union log included. Under -short it runs the sequential
// search on one processor, four workers on one and two on two (the long
// test command runs every combination).
func TestDeterminism(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var want []byte
	short := map[[2]int]bool{{1, 1}: true, {1, 4}: true, {2, 2}: true}
	for _, procs := range []int{1, 2} {
		for _, workers := range []int{1, 2, 4} {
			if testing.Short() && !short[[2]int{procs, workers}] {
				continue
			}
			t.Run(fmt.Sprintf("procs%d/workers%d", procs, workers), func(t *testing.T) {
				runtime.GOMAXPROCS(procs)
				g := New[constant](constFold{})
				for _, s := range mathStarts {
					_, err := AddInstance(g, mathPattern(t, s), nil)
					require.NoError(t, err)
				}
				r := Runner[constant]{IterLimit: 60, NodeLimit: 20_000, TimeLimit: time.Hour, Workers: workers}
				_, err := r.Run(context.Background(), g, mathRules(t))
				require.NoError(t, err)
				got := fingerprint(t, &g.Graph)
				if want == nil {
					want = got
				}
				requireSameFingerprint(t, want, got)
			})
		}
	}
}

// shape describes an e-graph up to the numbering of its ids: the sorted
// Weisfeiler-Leman colours of its classes after a few rounds of refinement
// over operators, payloads and children's colours.
func shape(g *Graph) []uint64 {
	colour := map[ClassID]uint64{}
	for range 6 {
		next := map[ClassID]uint64{}
		for _, c := range g.Classes() {
			var hs []uint64
			for _, nid := range g.ClassNodes(c) {
				n := g.Node(nid)
				kids := make([]ClassID, len(n.Children))
				for i, k := range n.Children {
					kids[i] = ClassID(colour[k])
				}
				hs = append(hs, hashNode(n.Op, n.Payload, kids))
			}
			slices.Sort(hs)
			h := uint64(len(hs))
			for _, x := range hs {
				h = (h ^ x) * 0x100000001B3
			}
			next[c] = h & 0xFFFFFFFF
		}
		colour = next
	}
	out := make([]uint64, 0, len(colour))
	for _, v := range colour {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// TestIncrementalMatchesFull checks incremental matching against full
// matching. Full matching re-applies old matches between rebuilds, when the
// hash-cons is not congruence-closed, so it can add nodes that the rebuild
// then finds congruent to existing ones: the e-graphs agree up to the
// numbering of ids, iteration by iteration.
func TestIncrementalMatchesFull(t *testing.T) {
	run := func(full bool, g *EGraph[constant], rules []*Rewrite[constant]) ([][2]int, []uint64) {
		var sizes [][2]int
		r := Runner[constant]{IterLimit: 100, NodeLimit: 20_000, TimeLimit: time.Hour, Scheduler: SimpleScheduler{}, FullMatching: full,
			Hooks: []Hook[constant]{func(g *EGraph[constant], it *Iteration) error {
				sizes = append(sizes, [2]int{it.Nodes, it.Classes})
				return nil
			}}}
		_, err := r.Run(context.Background(), g, rules)
		require.NoError(t, err)
		return sizes, shape(&g.Graph)
	}
	for _, tc := range []struct {
		name  string
		start []string
	}{
		{"ac7", []string{"(+ a (+ b (+ c (+ d (+ e (+ f g))))))"}},
		{"math", mathStarts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sizes [2][][2]int
			var shapes [2][]uint64
			for i, full := range []bool{false, true} {
				g := New[constant](constFold{})
				for _, s := range tc.start {
					_, err := AddInstance(g, mathPattern(t, s), nil)
					require.NoError(t, err)
				}
				sizes[i], shapes[i] = run(full, g, mathRules(t))
			}
			require.Equal(t, sizes[1], sizes[0], "nodes and classes per iteration")
			require.Equal(t, shapes[1], shapes[0])
		})
	}
}

// TestHookMayMutate checks that a hook's additions are rebuilt before the
// next search and take part in it.
func TestHookMayMutate(t *testing.T) {
	g := NewPlain()
	_, err := g.AddExpr("(* a 2)")
	require.NoError(t, err)
	shift := MustParseRewrite[NoData]("mul2-to-shift", "(* ?x 2)", "(<< ?x 1)")
	var late ClassID
	r := Runner[NoData]{Scheduler: SimpleScheduler{}, Hooks: []Hook[NoData]{func(g *EGraph[NoData], it *Iteration) error {
		if it.Index == 0 {
			var err error
			late, err = g.AddExpr("(* b 2)")
			return err
		}
		return nil
	}}}
	rep, err := r.Run(t.Context(), g, []*Rewrite[NoData]{shift})
	require.NoError(t, err)
	require.Equal(t, Saturated, rep.Stop)
	want, err := g.AddExpr("(<< b 1)")
	require.NoError(t, err)
	g.Rebuild()
	require.Equal(t, g.Find(late), g.Find(want))
	checkInvariants(t, g)
}
