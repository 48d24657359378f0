package lower

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/extract"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shortIters is a search's iteration limit: n, or 3 under -short. The
// short tests' fused programs (the tiny decode steps of
// TestInPlaceStateUpdates, the tiny steps of
// TestStepLaunchesWorkOnTheTokensPresent, the models and decode step of
// TestPrepareWeights) are byte for byte those of 6 and 8 iterations, which
// cost three to five times as much under the race detector; the long test
// command searches n.
func shortIters(n int) int {
	if testing.Short() {
		return 3
	}
	return n
}

func allRewrites(t *testing.T) []*egraph.Rewrite[rules.Data] {
	t.Helper()
	var rws []*egraph.Rewrite[rules.Data]
	for _, s := range rules.Sets() {
		r, err := rules.SetRewrites(s)
		require.NoError(t, err)
		rws = append(rws, r...)
	}
	return rws
}

// checkPlan checks the memory plan: aligned offsets, and no two Temp
// buffers live at the same time overlapping.
func checkPlan(t *testing.T, prog *Program) {
	t.Helper()
	first, last := map[int]int{}, map[int]int{}
	for i, l := range prog.Run {
		for _, o := range l.Outs {
			if _, ok := first[o]; !ok {
				first[o] = i
			}
			last[o] = max(last[o], i)
		}
		for _, a := range l.Args {
			last[a] = max(last[a], i)
		}
	}
	var temps []*Buffer
	for _, b := range prog.Buffers {
		if b.Kind == Temp {
			temps = append(temps, b)
			require.Zero(t, b.Offset%Alignment, "%s misaligned", b.Name)
			require.LessOrEqual(t, b.Offset+b.Bytes, prog.ArenaBytes)
		}
	}
	for i, x := range temps {
		for _, y := range temps[i+1:] {
			liveTogether := first[x.ID] <= last[y.ID] && first[y.ID] <= last[x.ID]
			overlap := x.Offset < y.Offset+y.Bytes && y.Offset < x.Offset+x.Bytes
			require.False(t, liveTogether && overlap, "%s and %s are live together and overlap", x.Name, y.Name)
		}
	}
	require.LessOrEqual(t, prog.ArenaBytes, prog.TempBytes)
}

// TestLowerCorpus lowers the programs extracted from tiny corpus graphs
// (random extractions too) and executes them launch by launch in the
// reference interpreter, with the arena simulated: they must compute what
// the graphs do.
func TestLowerCorpus(t *testing.T) {
	skipLong(t)
	for _, name := range []string{"tiny-llama:layer", "tiny-llama:decode", "tiny-gpt2:block", "tiny-llama:model", "tiny-gpt2:model"} {
		t.Run(name, func(t *testing.T) {
			g, err := corpus.Build(name, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			prog, err := rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: 6, NodeLimit: 40_000})
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			sols := []*extract.Solution{prog.Solution}
			for seed := range uint64(4) {
				sol, err := extract.Random(prog.Problem, seed)
				require.NoError(t, err)
				sols = append(sols, sol)
			}
			for i, sol := range sols {
				lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, sol)
				require.NoError(t, err)
				checkPlan(t, lp)
				if i == 0 {
					t.Logf("%s: %d launches per run, %d at load, %d buffers; arena %d bytes for %d bytes of intermediates",
						name, len(lp.Run), len(lp.Prep), len(lp.Buffers), lp.ArenaBytes, lp.TempBytes)
				}
				outs, states, err := Execute(context.Background(), lp, feeds)
				require.NoError(t, err, "extraction %d", i)
				for out, w := range want.Outputs {
					mm, err := ir.Compare(outs[out], w, want.Magnitudes[out], 256)
					require.NoError(t, err)
					assert.Nil(t, mm, "extraction %d, output %s: %v", i, out, mm)
				}
				for st, w := range want.States {
					mm, err := ir.Compare(states[st], w, want.Magnitudes[st], 256)
					require.NoError(t, err)
					assert.Nil(t, mm, "extraction %d, state %s: %v", i, st, mm)
				}
			}
		})
	}
}

// TestExecuteCatchesOverlap breaks a plan (every intermediate at offset
// 0) and checks that executing it fails, naming the overwritten buffer.
func TestExecuteCatchesOverlap(t *testing.T) {
	g, err := corpus.Build("tiny-gpt2:block", corpus.Options{Seq: 4})
	require.NoError(t, err)
	prog, err := rules.Saturate(context.Background(), g, rules.LowerRewrites(), rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
	require.NoError(t, err)
	feeds, err := ir.RandomFeeds(g, 3, ir.Typical)
	require.NoError(t, err)
	_, _, err = Execute(context.Background(), lp, feeds)
	require.NoError(t, err)
	for _, b := range lp.Buffers {
		if b.Kind == Temp {
			b.Offset = 0
		}
	}
	_, _, err = Execute(context.Background(), lp, feeds)
	require.ErrorContains(t, err, "overwrote it in the arena")
}

// lowerNaive lowers g's naive program (every op its own kernel), with
// state updates in place where safe or, without inPlace, all copied.
func lowerNaive(t *testing.T, g *ir.Graph, inPlace bool) *Program {
	t.Helper()
	prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
	require.NoError(t, err)
	lp, err := fromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution, inPlace)
	require.NoError(t, err)
	return lp
}

// checkExecute executes lp on seeded random feeds and compares its outputs
// and new states with the graph's reference evaluation; the feeds must
// come back unchanged.
func checkExecute(t *testing.T, g *ir.Graph, lp *Program) {
	t.Helper()
	feeds, err := ir.RandomFeeds(g, 7, ir.Typical)
	require.NoError(t, err)
	before := map[string][]float64{}
	for name, f := range feeds {
		before[name] = slices.Clone(f.Float64s())
	}
	want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	outs, states, err := Execute(context.Background(), lp, feeds)
	require.NoError(t, err)
	require.Len(t, states, len(want.States))
	for name, w := range want.Outputs {
		mm, err := ir.Compare(outs[name], w, want.Magnitudes[name], 256)
		require.NoError(t, err)
		assert.Nil(t, mm, "output %s: %v", name, mm)
	}
	for name, w := range want.States {
		mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 256)
		require.NoError(t, err)
		assert.Nil(t, mm, "state %s: %v", name, mm)
	}
	for name, f := range feeds {
		assert.Equal(t, before[name], f.Float64s(), "feed %s was modified", name)
	}
}

// stateWriters maps each State buffer to the launches of a run that write
// it.
func stateWriters(lp *Program) map[int][]*Launch {
	w := map[int][]*Launch{}
	for _, l := range lp.Run {
		for _, o := range l.Outs {
			if lp.Buffers[o].Kind == State {
				w[o] = append(w[o], l)
			}
		}
	}
	return w
}

// TestInPlaceStateUpdates lowers decode steps and checks that every KV
// cache is updated in place: one launch writes each state buffer, through
// a window at the step's position holding the new token's rows only, a
// layer's key and value rows by one launch where the order allows, no
// copy launch is left, no Temp of the cache's size remains, and the
// program still computes what the graph does.
func TestInPlaceStateUpdates(t *testing.T) {
	tests := []struct {
		name  string
		past  int
		fused bool
		// paired counts the launches writing two states: a layer's key
		// and value rows. The naive llama program reads the new keys
		// (attention scores) before it computes the value rows.
		paired int
	}{
		{"tiny-llama:decode", 0, false, 0},
		{"tiny-llama:decode", 3, false, 0},
		{"tiny-llama:decode", 7, false, 0},
		{"tiny-llama:decode", 3, true, 2},
		{"tiny-gpt2:decode", 3, false, 2},
		{"tiny-gpt2:decode", 7, true, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/past=%d/fused=%t", tt.name, tt.past, tt.fused), func(t *testing.T) {
			const capacity = 8
			g, err := corpus.Build(tt.name, corpus.Options{Seq: capacity, Past: tt.past})
			require.NoError(t, err)
			var prog *rules.Program
			if tt.fused {
				prog, err = rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: shortIters(8)})
			} else {
				prog, err = rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
			}
			require.NoError(t, err)
			lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
			require.NoError(t, err)
			checkPlan(t, lp)
			for i, b := range lp.Buffers {
				require.Equal(t, i, b.ID)
			}
			writers := stateWriters(lp)
			require.Len(t, lp.Updates, len(g.States()))
			for name, id := range lp.Updates {
				st := lp.Buffers[id]
				require.Equal(t, State, st.Kind, "state %s is updated through %s %s", name, st.Kind, st.Name)
				require.Equal(t, name, st.Name)
				require.Len(t, writers[id], 1, "state %s", name)
				l := writers[id][0]
				j := slices.Index(l.Outs, id)
				w, ok, err := l.Window(j)
				require.NoError(t, err)
				require.True(t, ok, "launch %s writes state %s whole", l.Name, name)
				assert.Equal(t, Window{Axis: 2, Offset: int64(tt.past), Shape: st.Shape}, w)
				rows := l.Body.Node(l.Body.Outputs[j].Value)
				want := st.Shape.Clone()
				want[2] = 1
				assert.Equal(t, want, rows.Shape, "launch %s writes more than the new rows", l.Name)
				assert.NotContains(t, l.Args, id, "launch %s still reads the state it writes", l.Name)
				// The new rows come from an elementwise launch, or from the
				// projection's own epilogue (mergeEpilogues).
				assert.Contains(t, []string{"elementwise", "matmul"}, l.Form.Kind)
			}
			written := map[int]bool{}
			paired := 0
			for _, l := range lp.Run {
				for _, o := range l.Outs {
					written[o] = true
				}
				states := 0
				for _, o := range l.Outs {
					if lp.Buffers[o].Kind == State {
						states++
					}
				}
				if states == 2 {
					paired++
				}
			}
			assert.Equal(t, tt.paired, paired, "launches writing a key and a value cache")
			for _, b := range lp.Buffers {
				if b.Kind == Temp {
					assert.True(t, written[b.ID], "temp %s is never written", b.Name)
				}
			}
			checkExecute(t, g, lp)
		})
	}
}

// TestInPlaceKeepsCopyWhenOldStateIsRead builds small graphs by hand: a
// state read (its old content) by a launch after its update keeps the copy
// at the end of the run; one read only before the update, and the new
// content read after it, is updated in place.
func TestInPlaceKeepsCopyWhenOldStateIsRead(t *testing.T) {
	tests := []struct {
		name    string
		inPlace bool
		build   func(b *ir.Builder, s, x ir.Value) (rows ir.Value, out func(upd ir.Value) ir.Value)
	}{
		{"old state read after the update", false, func(b *ir.Builder, s, x ir.Value) (ir.Value, func(ir.Value) ir.Value) {
			return x, func(upd ir.Value) ir.Value {
				return b.Add(b.Slice(upd, 2, 0, 4, 1), b.Slice(s, 2, 0, 4, 1))
			}
		}},
		{"old state read before the update", true, func(b *ir.Builder, s, x ir.Value) (ir.Value, func(ir.Value) ir.Value) {
			return b.Add(x, b.Slice(s, 2, 0, 1, 1)), func(upd ir.Value) ir.Value {
				return b.Neg(b.Slice(upd, 2, 0, 4, 1))
			}
		}},
		{"new content read whole after the update", true, func(b *ir.Builder, s, x ir.Value) (ir.Value, func(ir.Value) ir.Value) {
			return b.Neg(x), func(upd ir.Value) ir.Value { return b.Exp(upd) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("cache")
			s := b.State("cache", ir.F32, 1, 2, 8, 4)
			x := b.Input("x", ir.F32, 1, 2, 1, 4)
			rows, out := tt.build(b, s, x)
			upd := b.SliceUpdate(s, rows, 2, 3)
			b.UpdateState(s, upd)
			b.Output("y", out(upd))
			g, err := b.Build()
			require.NoError(t, err)
			lp := lowerNaive(t, g, true)
			checkPlan(t, lp)
			st := lp.Buffers[slices.IndexFunc(lp.Buffers, func(b *Buffer) bool { return b.Kind == State })]
			writers := stateWriters(lp)[st.ID]
			require.Len(t, writers, 1)
			_, windowed, err := writers[0].Window(0)
			require.NoError(t, err)
			if tt.inPlace {
				assert.True(t, windowed, "the update is not in place")
				assert.Equal(t, st.ID, lp.Updates["cache"])
			} else {
				assert.False(t, windowed, "the update is in place though a later launch reads the old state")
				assert.NotEqual(t, st.ID, lp.Updates["cache"])
				assert.Same(t, lp.Run[len(lp.Run)-1], writers[0], "the copy is not the run's last launch")
			}
			checkExecute(t, g, lp)
		})
	}
}

// TestRowsBody checks which state-update bodies become in-place writes of
// their rows: the state read whole as the slice_update's base (possibly
// through casts that change nothing) and nowhere else, the rows
// elementwise work.
func TestRowsBody(t *testing.T) {
	state := []ir.Dim{1, 2, 8, 4}
	tests := []struct {
		name string
		ok   bool
		// body builds a kernel body over the state $0 and rows input $1.
		body func(b *ir.Builder, s, x ir.Value) ir.Value
	}{
		{"plain", true, func(b *ir.Builder, s, x ir.Value) ir.Value { return b.SliceUpdate(s, x, 2, 5) }},
		{"elementwise rows", true, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.Mul(b.Neg(x), x), 2, 5)
		}},
		{"no-op casts", true, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.Cast(b.SliceUpdate(b.Cast(s, ir.F32), x, 2, 5), ir.F32)
		}},
		{"rows read the state", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.Add(x, b.Slice(s, 2, 0, 1, 1)), 2, 5)
		}},
		{"state through a view", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(b.Slice(s, 2, 0, 8, 1), x, 2, 5)
		}},
		{"state through elementwise work", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(b.Neg(s), x, 2, 5)
		}},
		{"rows of a matmul", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.MatMul(x, b.Expand(b.Reshape(x, 1, 2, 4, 1), 1, 2, 4, 4)), 2, 5)
		}},
		{"a cast that rounds", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.Cast(b.SliceUpdate(s, x, 2, 5), ir.F16)
		}},
		{"not a slice_update", false, func(b *ir.Builder, s, x ir.Value) ir.Value { return b.Neg(s) }},
		{"rows of a row reduction", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.Expand(b.Sum(x, 3), 1, 2, 1, 4), 2, 5)
		}},
		{"rows of a long reduction across rows", false, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.Sum(b.Expand(x, 1, 2, 32, 4), 2), 2, 5)
		}},
		{"rows summed from split-K partials", true, func(b *ir.Builder, s, x ir.Value) ir.Value {
			return b.SliceUpdate(s, b.Sum(b.Expand(x, 1, 2, 3, 4), 2), 2, 5)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			s := b.Input("$0", ir.F32, state...)
			x := b.Input("$1", ir.F32, 1, 2, 1, 4)
			b.Output("out0", tt.body(b, s, x))
			body, err := b.Build()
			require.NoError(t, err)
			l := &Launch{Name: "k0", Body: body, Args: []int{10, 11}, Outs: []int{12}}
			got, args, ok := rowsBody(l, 10)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			assert.Equal(t, []int{11}, args)
			w, windowed, err := OutputWindow(got, 0)
			require.NoError(t, err)
			require.True(t, windowed)
			assert.Equal(t, Window{Axis: 2, Offset: 5, Shape: state}, w)
			// The rows body computes what the update writes.
			feeds, err := ir.RandomFeeds(body, 3, ir.Typical)
			require.NoError(t, err)
			full, err := ir.EvalKernel(context.Background(), body, feeds["$0"], feeds["$1"])
			require.NoError(t, err)
			rows, err := ir.EvalKernel(context.Background(), got, feeds["$1"])
			require.NoError(t, err)
			merged, err := writeWindow(context.Background(), feeds["$0"], rows[0], w, nil)
			require.NoError(t, err)
			assert.Equal(t, full[0].Float64s(), merged.Float64s())
		})
	}
}

// TestOutputWindow reads windows back from output names and refuses the
// malformed ones.
func TestOutputWindow(t *testing.T) {
	w := Window{Axis: 2, Offset: 3, Shape: ir.Shape{1, 2, 8, 4}}
	tests := []struct {
		name     string
		out      string
		rows     []ir.Dim
		windowed bool
		err      string
	}{
		{"whole", "out0", []ir.Dim{1, 2, 1, 4}, false, ""},
		{"window", w.OutputName(0), []ir.Dim{1, 2, 1, 4}, true, ""},
		{"to the end", w.OutputName(0), []ir.Dim{1, 2, 5, 4}, true, ""},
		{"past the end", w.OutputName(0), []ir.Dim{1, 2, 6, 4}, false, "do not fit"},
		{"another extent", w.OutputName(0), []ir.Dim{1, 3, 1, 4}, false, "does not fit"},
		{"another rank", w.OutputName(0), []ir.Dim{2, 1, 4}, false, "axis 2"},
		{"another output", w.OutputName(1), []ir.Dim{1, 2, 1, 4}, false, "names output 1"},
		{"garbled", "out0 into [1,2,x] at 3 along axis 2", []ir.Dim{1, 2, 1, 4}, false, "invalid syntax"},
		{"not canonical", "out0 into [1,2,8,4] at 3 along axis 2 ", []ir.Dim{1, 2, 1, 4}, false, "not a window as"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			b.Output(tt.out, b.Input("$0", ir.F32, tt.rows...))
			body, err := b.Build()
			require.NoError(t, err)
			got, ok, err := OutputWindow(body, 0)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.windowed, ok)
			if !ok {
				return
			}
			assert.Equal(t, w, got)
			// Offsets places the rows where writeWindow does.
			rows := ir.NewTensor(ir.F32, tt.rows)
			for i := range rows.F64 {
				rows.F64[i] = float64(i + 1)
			}
			merged, err := writeWindow(context.Background(), ir.NewTensor(ir.F32, w.Shape), rows, w, nil)
			require.NoError(t, err)
			want := make([]float64, w.Shape.NumElements())
			for e, at := range w.Offsets(tt.rows, nil) {
				want[at] = float64(e + 1)
			}
			assert.Equal(t, want, merged.Float64s())
		})
	}
}

// TestInPlaceBytesSaved reports what writing llama-3-8b's KV caches in
// place saves per decode step with 4095 tokens in its 4096-position cache,
// from the launch bodies: the bytes the state-writing launches write, and
// all the bytes the launches that update states move (the update kernels'
// reads and writes, and the copies'), with copies and in place.
func TestInPlaceBytesSaved(t *testing.T) {
	if testing.Short() {
		t.Skip("lowers llama-3-8b")
	}
	g, err := corpus.Build("llama-3-8b:decode", corpus.Options{Seq: 4096, Past: 4095})
	require.NoError(t, err)
	type traffic struct{ written, moved int64 }
	measure := func(lp *Program) traffic {
		// The launches writing the buffers that hold the new states, and
		// the copies into the state buffers.
		upd := map[int]bool{}
		for _, id := range lp.Updates {
			upd[id] = true
		}
		var tr traffic
		for _, l := range lp.Run {
			touches := false
			for _, o := range l.Outs {
				touches = touches || upd[o] || lp.Buffers[o].Kind == State
			}
			if !touches {
				continue
			}
			for _, a := range l.Args {
				tr.moved += lp.Buffers[a].Bytes
			}
			for j := range l.Outs {
				n := l.Body.Node(l.Body.Outputs[j].Value)
				bytes := n.Shape.NumElements() * int64(n.DType.Size())
				tr.moved += bytes
				if upd[l.Outs[j]] {
					tr.written += bytes
				}
			}
		}
		return tr
	}
	copied, inPlace := measure(lowerNaive(t, g, false)), measure(lowerNaive(t, g, true))
	t.Logf("llama-3-8b decode step, 4095 of 4096 cache positions filled, %d states: state-writing launches write %d bytes with copies, %d in place (%d saved); the launches updating states move %d bytes with copies, %d in place (%d saved)",
		len(g.States()), copied.written, inPlace.written, copied.written-inPlace.written, copied.moved, inPlace.moved, copied.moved-inPlace.moved)
	require.Less(t, inPlace.written, copied.written)
}

// TestPairUpdates builds a key and a value cache updated from one input:
// the two in-place row writes become one launch with two windowed outputs
// when neither reads what the other writes, stay two launches when the
// value rows read the new key cache, and either way the program computes
// what the graph does.
func TestPairUpdates(t *testing.T) {
	tests := []struct {
		name   string
		merged bool
		vRows  func(b *ir.Builder, x, updK ir.Value) ir.Value
	}{
		{"independent rows", true, func(b *ir.Builder, x, _ ir.Value) ir.Value { return b.Exp(x) }},
		{"value rows read the new key cache", false, func(b *ir.Builder, x, updK ir.Value) ir.Value {
			return b.Add(x, b.Slice(updK, 2, 3, 4, 1))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kv")
			k := b.State("k", ir.F32, 1, 2, 8, 4)
			v := b.State("v", ir.F32, 1, 2, 8, 4)
			x := b.Input("x", ir.F32, 1, 2, 1, 4)
			updK := b.SliceUpdate(k, b.Neg(x), 2, 3)
			updV := b.SliceUpdate(v, tt.vRows(b, x, updK), 2, 3)
			b.UpdateState(k, updK)
			b.UpdateState(v, updV)
			b.Output("y", b.Add(b.Slice(updK, 2, 0, 4, 1), b.Slice(updV, 2, 0, 4, 1)))
			g, err := b.Build()
			require.NoError(t, err)
			lp := lowerNaive(t, g, true)
			checkPlan(t, lp)
			writers := stateWriters(lp)
			kw, vw := writers[lp.Updates["k"]], writers[lp.Updates["v"]]
			require.Len(t, kw, 1)
			require.Len(t, vw, 1)
			if tt.merged {
				require.Same(t, kw[0], vw[0], "the key and value rows are written by two launches")
				require.Len(t, kw[0].Outs, 2)
				for j := range kw[0].Outs {
					_, windowed, err := kw[0].Window(j)
					require.NoError(t, err)
					assert.True(t, windowed)
				}
				assert.Equal(t, len(lowerNaive(t, g, false).Run)-3, len(lp.Run),
					"in place: no copy launch for either state, and one launch for the pair")
			} else {
				require.NotSame(t, kw[0], vw[0])
			}
			checkExecute(t, g, lp)
		})
	}
}

// TestMergeProducer merges an elementwise launch into the row launch after
// it, when the row launch reads what it writes (producer) or all it reads
// (sibling): the merged launch is one row kernel writing the row
// launch's outputs and, when kept, the elementwise result, and it computes
// what the two launches did.
func TestMergeProducer(t *testing.T) {
	kernel := func(t *testing.T, ins [][]ir.Dim, body func(b *ir.Builder, in []ir.Value) ir.Value) *ir.Graph {
		b := ir.NewBuilder("kernel")
		vals := make([]ir.Value, len(ins))
		for i, s := range ins {
			vals[i] = b.Input(fmt.Sprintf("$%d", i), ir.F32, s...)
		}
		b.Output("out0", body(b, vals))
		g, err := b.Build()
		require.NoError(t, err)
		return g
	}
	// Buffers: 0 and 1 the elementwise launch's inputs, 2 its output, 3 a
	// weight, 4 the row launch's output.
	residual := kernel(t, [][]ir.Dim{{4, 64}, {4, 64}}, func(b *ir.Builder, in []ir.Value) ir.Value {
		return b.Add(b.Mul(in[0], in[1]), in[1])
	})
	stats := func(x func(b *ir.Builder, in []ir.Value) ir.Value) *ir.Graph {
		return kernel(t, [][]ir.Dim{{4, 64}, {4, 64}, {64}}, func(b *ir.Builder, in []ir.Value) ir.Value {
			v := b.Mul(x(b, in), b.BroadcastTo(in[2], ir.Shape{4, 64}))
			return b.Rsqrt(b.Sum(b.Mul(v, v), 1))
		})
	}
	tests := []struct {
		name string
		keep bool
		// row is the row launch's body and args.
		row  *ir.Graph
		args []int
	}{
		{"producer, the value kept", true, kernel(t, [][]ir.Dim{{4, 64}, {64}}, func(b *ir.Builder, in []ir.Value) ir.Value {
			v := b.Mul(in[0], b.BroadcastTo(in[1], ir.Shape{4, 64}))
			return b.Rsqrt(b.Sum(b.Mul(v, v), 1))
		}), []int{2, 3}},
		{"producer, the value dropped", false, kernel(t, [][]ir.Dim{{4, 64}, {64}}, func(b *ir.Builder, in []ir.Value) ir.Value {
			return b.Exp(b.Sum(b.Mul(in[0], b.BroadcastTo(in[1], ir.Shape{4, 64})), 1))
		}), []int{2, 3}},
		{"sibling", true, stats(func(b *ir.Builder, in []ir.Value) ir.Value { return b.Add(b.Mul(in[0], in[1]), in[1]) }), []int{0, 1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Launch{Name: "k0", Body: residual, Form: rules.FormOf(residual), Args: []int{0, 1}, Outs: []int{2}}
			c := &Launch{Name: "k1", Body: tt.row, Form: rules.FormOf(tt.row), Args: tt.args, Outs: []int{4}}
			require.Equal(t, "row", c.Form.Kind)
			m, ok := mergeProducer(a, c, 2, tt.keep)
			require.True(t, ok)
			assert.Equal(t, "row", m.Form.Kind)
			want := []int{4}
			if tt.keep {
				want = append(want, 2)
			}
			assert.Equal(t, want, m.Outs)
			assert.Equal(t, []int{0, 1, 3}, m.Args, "each buffer is read through one parameter")

			feeds, err := ir.RandomFeeds(residual, 5, ir.Typical)
			require.NoError(t, err)
			wFeeds, err := ir.RandomFeeds(kernel(t, [][]ir.Dim{{64}}, func(b *ir.Builder, in []ir.Value) ir.Value { return b.Neg(in[0]) }), 6, ir.Typical)
			require.NoError(t, err)
			bufs := map[int]*ir.Tensor{0: feeds["$0"], 1: feeds["$1"], 3: wFeeds["$0"]}
			x, err := ir.EvalKernel(context.Background(), residual, bufs[0], bufs[1])
			require.NoError(t, err)
			bufs[2] = x[0]
			run := func(l *Launch) []*ir.Tensor {
				args := make([]*ir.Tensor, len(l.Args))
				for k, id := range l.Args {
					args[k] = bufs[id]
				}
				out, err := ir.EvalKernel(context.Background(), l.Body, args...)
				require.NoError(t, err)
				return out
			}
			sep := run(c)
			merged := run(m)
			assert.Equal(t, sep[0].Float64s(), merged[0].Float64s())
			if tt.keep {
				assert.Equal(t, x[0].Float64s(), merged[1].Float64s())
			}
		})
	}
}
