package lower

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// stepPool builds a serving step's pool write in small: a state pool
// [slots, heads, dim] of dt, the step's rows computed from x [tokens,
// heads, dim] by elementwise work (a rotary-like product, a cast to the
// pool's dtype), written at the slots (i32, -1 for a token of no
// sequence) and read back whole by a consumer.
func stepPool(t *testing.T, dt ir.DType, slots, tokens int) *ir.Graph {
	t.Helper()
	b := ir.NewBuilder("step")
	pool := b.State("kpool", dt, ir.Dim(slots), 2, 4)
	x := b.Input("x", ir.F32, ir.Dim(tokens), 2, 4)
	rows := b.Cast(b.Add(b.Mul(x, b.Input("cos", ir.F32, ir.Dim(tokens), 2, 4)), b.Neg(x)), dt)
	upd := b.Scatter(pool, rows, b.Input("slot_mapping", ir.I32, ir.Dim(tokens)), 0)
	b.UpdateState(pool, upd)
	b.Output("y", b.Mul(upd, upd))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestScatterInPlace lowers a step's pool write, naive and fused: the
// launch writing the pool writes the rows alone (T of them, not the
// pool's P) through a Slots window, reads neither the pool nor a copy of
// it, no launch copies the pool, the consumer reads the pool buffer, and
// the program computes what the graph does, -1 slots included.
func TestScatterInPlace(t *testing.T) {
	tests := []struct {
		dt     ir.DType
		tokens int
		fused  bool
	}{
		{ir.F32, 5, false},
		{ir.BF16, 5, false},
		{ir.F32, 7, true},
		{ir.F16, 3, true},
	}
	const slots = 24
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/tokens=%d/fused=%t", tt.dt, tt.tokens, tt.fused), func(t *testing.T) {
			g := stepPool(t, tt.dt, slots, tt.tokens)
			var prog *rules.Program
			var err error
			if tt.fused {
				prog, err = rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: 8})
			} else {
				prog, err = rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
			}
			require.NoError(t, err)
			lp, err := FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
			require.NoError(t, err)
			checkPlan(t, lp)
			pool := lp.Buffers[slices.IndexFunc(lp.Buffers, func(b *Buffer) bool { return b.Kind == State })]
			assert.Equal(t, pool.ID, lp.Updates["kpool"], "the pool is not updated in place")
			writers := stateWriters(lp)[pool.ID]
			require.Len(t, writers, 1, "launches writing the pool (a copy is one)")
			l := writers[0]
			w, ok, err := l.Window(0)
			require.NoError(t, err)
			require.True(t, ok, "launch %s writes the pool whole", l.Name)
			assert.True(t, w.Slots)
			assert.Equal(t, pool.Shape, w.Shape)
			assert.Equal(t, 0, w.Axis)
			rows := l.Body.Node(l.Body.Outputs[0].Value)
			assert.Equal(t, ir.Shape{ir.Dim(tt.tokens), 2, 4}, rows.Shape, "launch %s writes more than the step's rows", l.Name)
			assert.NotContains(t, l.Args, pool.ID, "launch %s reads the pool it writes", l.Name)
			slotBuf := lp.Buffers[l.Args[w.Pos]]
			assert.Equal(t, "slot_mapping", slotBuf.Name)
			assert.Equal(t, "elementwise", l.Form.Kind)
			if tt.fused {
				// The rows' elementwise work is the writer's own.
				assert.True(t, slices.ContainsFunc(l.Body.Nodes, func(n *ir.Node) bool { return n.Op == ir.OpMul }), "launch %s:\n%s", l.Name, l.Body)
			}
			for _, b := range lp.Buffers {
				if b.Kind == Temp {
					assert.Less(t, b.Bytes, pool.Bytes, "temp %s holds a pool's worth", b.Name)
				}
			}
			// The consumer reads the pool buffer itself.
			readers := 0
			for _, r := range lp.Run {
				if slices.Contains(r.Args, pool.ID) {
					readers++
				}
			}
			assert.Equal(t, 1, readers, "launches reading the new pool")
			checkExecute(t, g, lp)
		})
	}
}

// TestScatterRowsBody checks which scatter bodies become in-place writes
// of their rows: the pool read whole as the base and nowhere else, the
// slots one of the body's inputs, the rows elementwise work.
func TestScatterRowsBody(t *testing.T) {
	pool := []ir.Dim{10, 2, 4}
	tests := []struct {
		name string
		ok   bool
		// body builds a kernel body over the pool $0, rows input $1 and
		// slots $2.
		body func(b *ir.Builder, s, x, at ir.Value) ir.Value
	}{
		{"plain", true, func(b *ir.Builder, s, x, at ir.Value) ir.Value { return b.Scatter(s, x, at, 0) }},
		{"elementwise rows", true, func(b *ir.Builder, s, x, at ir.Value) ir.Value {
			return b.Scatter(s, b.Mul(b.Neg(x), x), at, 0)
		}},
		{"no-op casts", true, func(b *ir.Builder, s, x, at ir.Value) ir.Value {
			return b.Cast(b.Scatter(b.Cast(s, ir.F32), x, at, 0), ir.F32)
		}},
		{"rows read the pool", false, func(b *ir.Builder, s, x, at ir.Value) ir.Value {
			return b.Scatter(s, b.Add(x, b.Slice(s, 0, 0, 3, 1)), at, 0)
		}},
		{"slots computed in the kernel", false, func(b *ir.Builder, s, x, at ir.Value) ir.Value {
			return b.Scatter(s, x, b.Add(at, b.Scalar(ir.I32, 1)), 0)
		}},
		{"pool through elementwise work", false, func(b *ir.Builder, s, x, at ir.Value) ir.Value {
			return b.Scatter(b.Neg(s), x, at, 0)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			s := b.Input("$0", ir.F32, pool...)
			x := b.Input("$1", ir.F32, 3, 2, 4)
			at := b.Input("$2", ir.I32, 3)
			b.Output("out0", tt.body(b, s, x, at))
			body, err := b.Build()
			require.NoError(t, err)
			l := &Launch{Name: "k0", Body: body, Args: []int{10, 11, 12}, Outs: []int{13}}
			got, args, ok := rowsBody(l, 10)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			assert.Equal(t, []int{11, 12}, args)
			w, windowed, err := OutputWindow(got, 0)
			require.NoError(t, err)
			require.True(t, windowed)
			assert.Equal(t, Window{Axis: 0, Shape: pool, Slots: true, Pos: 1}, w)
			// The rows body, written at the slots, is what the scatter
			// computes.
			feeds, err := ir.RandomFeeds(body, 3, ir.Typical)
			require.NoError(t, err)
			require.Contains(t, feeds["$2"].Float64s(), -1.0, "no slot of -1 drawn")
			full, err := ir.EvalKernel(context.Background(), body, feeds["$0"], feeds["$1"], feeds["$2"])
			require.NoError(t, err)
			rows, err := ir.EvalKernel(context.Background(), got, feeds["$1"], feeds["$2"])
			require.NoError(t, err)
			merged, err := writeWindow(context.Background(), feeds["$0"], rows[0], w, feeds["$2"])
			require.NoError(t, err)
			assert.Equal(t, full[0].Float64s(), merged.Float64s())
		})
	}
}

// TestSlotsWindow reads Slots windows back from output names, refuses the
// malformed ones, and places the slices where the slots say (Offsets
// agreeing with writeWindow), -1 and slots outside the buffer nowhere.
func TestSlotsWindow(t *testing.T) {
	w := Window{Axis: 1, Shape: ir.Shape{2, 6, 3}, Slots: true, Pos: 1}
	tests := []struct {
		name  string
		out   string
		rows  []ir.Dim
		slots ir.DType
		n     ir.Dim
		err   string
	}{
		{"i32 slots", w.OutputName(0), []ir.Dim{2, 3, 3}, ir.I32, 3, ""},
		{"i64 slots", w.OutputName(0), []ir.Dim{2, 3, 3}, ir.I64, 3, ""},
		{"more slices than the buffer's rows", w.OutputName(0), []ir.Dim{2, 8, 3}, ir.I32, 8, ""},
		{"slots of another length", w.OutputName(0), []ir.Dim{2, 3, 3}, ir.I32, 4, "not an integer vector of the output's 3 slices"},
		{"float slots", w.OutputName(0), []ir.Dim{2, 3, 3}, ir.F32, 3, "not an integer vector"},
		{"another extent", w.OutputName(0), []ir.Dim{2, 3, 4}, ir.I32, 3, "does not fit"},
		{"no such input", Window{Axis: 1, Shape: w.Shape, Slots: true, Pos: 2}.OutputName(0), []ir.Dim{2, 3, 3}, ir.I32, 3, "input 2 of 2"},
		{"garbled", "out0 into [2,6,3] at slots $x along axis 1", []ir.Dim{2, 3, 3}, ir.I32, 3, "not a window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := ir.NewBuilder("kernel")
			x := b.Input("$0", ir.F32, tt.rows...)
			b.Input("$1", tt.slots, tt.n)
			b.Output(tt.out, x)
			body, err := b.Build()
			require.NoError(t, err)
			got, ok, err := OutputWindow(body, 0)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, w, got)
			n := int(tt.n)
			// Slots from the last row down, every third slice skipped,
			// those past the buffer's rows skipped too (-1: the
			// reference refuses a slot outside the buffer).
			vals := make([]int64, n)
			for i := range vals {
				vals[i] = int64(5 - i)
				if i%3 == 1 || vals[i] < 0 {
					vals[i] = -1
				}
			}
			slots, err := ir.TensorOfInts(tt.slots, ir.Shape{tt.n}, vals...)
			require.NoError(t, err)
			rows := ir.NewTensor(ir.F32, tt.rows)
			for i := range rows.F64 {
				rows.F64[i] = float64(i + 1)
			}
			merged, err := writeWindow(context.Background(), ir.NewTensor(ir.F32, w.Shape), rows, w, slots)
			require.NoError(t, err)
			want := make([]float64, w.Shape.NumElements())
			written := 0
			for e, at := range w.Offsets(tt.rows, vals) {
				if at >= 0 {
					want[at] = float64(e + 1)
					written++
				}
			}
			assert.Equal(t, want, merged.Float64s())
			assert.Positive(t, written)
		})
	}
}
