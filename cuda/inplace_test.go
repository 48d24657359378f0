package cuda

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// compareStates compares a run's new states with the reference's.
func compareStates(t *testing.T, what string, got map[string]*ir.Tensor, want *ir.Result) {
	t.Helper()
	require.Len(t, got, len(want.States), what)
	for name, w := range want.States {
		mm, err := ir.Compare(got[name], w, want.Magnitudes[name], 16)
		require.NoError(t, err)
		require.Nil(t, mm, "%s: state %s: %v", what, name, mm)
	}
}

// TestInPlacePrintedStores prints single-launch programs whose launch
// writes a state's rows through a window, checks the store the kernel
// prints (16-byte stores only where every quad stays contiguous and
// aligned in the state) and runs them under the emulation: the state must
// hold the rows in the window and its old content everywhere else, as the
// reference and lower.Execute say.
func TestInPlacePrintedStores(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	tests := []struct {
		name   string
		dtype  ir.DType
		rows   ir.Shape // the rows' shape, the state's but along axis
		axis   int
		extent ir.Dim // the state's extent along axis
		offset int64
		// rows computes the rows from the input.
		compute func(b *ir.Builder, x ir.Value) ir.Value
		vector  bool
		store   string // the store the kernel prints
	}{
		{"kv rows", ir.F32, ir.Shape{1, 2, 1, 16}, 2, 8, 3, nil, true,
			"lum_st4(out0 + ((((4 * q) / 16LL) % 2LL) * 128LL + 3LL * 16LL + ((4 * q) % 16LL)), "},
		{"kv rows, elementwise", ir.F32, ir.Shape{1, 2, 1, 16}, 2, 8, 7,
			func(b *ir.Builder, x ir.Value) ir.Value { return b.Mul(b.Neg(x), x) }, true,
			"lum_st4(out0 + ((((4 * q) / 16LL) % 2LL) * 128LL + 7LL * 16LL + ((4 * q) % 16LL)), "},
		{"first rows, axis 0", ir.F32, ir.Shape{2, 4}, 0, 8, 0, nil, true,
			"lum_st4(out0 + (((4 * q) / 4LL) * 4LL + ((4 * q) % 4LL)), "},
		{"rows of 6, not a multiple of 4", ir.F32, ir.Shape{1, 2, 1, 6}, 2, 8, 3, nil, false,
			"out0[i1 * 48LL + 3LL * 6LL + i3] = v0;"},
		{"quads straddling misaligned rows", ir.F32, ir.Shape{1, 2, 2, 2}, 2, 8, 3, nil, false,
			"out0[i1 * 16LL + (i2 + 3LL) * 2LL + i3] = v0;"},
		{"aligned columns, the last axis", ir.F32, ir.Shape{3, 4}, 1, 8, 4, nil, true,
			"lum_st4(out0 + (((4 * q) / 4LL) * 8LL + (((4 * q) % 4LL) + 4LL)), "},
		{"misaligned columns, the last axis", ir.F32, ir.Shape{3, 4}, 1, 8, 2, nil, false,
			"out0[i0 * 8LL + (i1 + 2LL)] = v0;"},
		{"f16 rows", ir.F16, ir.Shape{1, 2, 1, 8}, 2, 4, 1,
			func(b *ir.Builder, x ir.Value) ir.Value { return b.Exp(x) }, true,
			"lum_st4_f16(out0 + ((((4 * q) / 8LL) % 2LL) * 32LL + 1LL * 8LL + ((4 * q) % 8LL)), "},
		{"bf16 rows", ir.BF16, ir.Shape{1, 2, 1, 8}, 2, 4, 2,
			func(b *ir.Builder, x ir.Value) ir.Value { return b.Mul(b.Sigmoid(x), x) }, true,
			"lum_st4_bf16(out0 + ((((4 * q) / 8LL) % 2LL) * 32LL + 2LL * 8LL + ((4 * q) % 8LL)), "},
		{"bf16 rows of 6, not a multiple of 4", ir.BF16, ir.Shape{1, 2, 1, 6}, 2, 4, 1, nil, false,
			"out0[i1 * 24LL + 1LL * 6LL + i3] = lum_f32_to_bf16(v0);"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			full := tt.rows.Clone()
			full[tt.axis] = tt.extent
			w := lower.Window{Axis: tt.axis, Offset: tt.offset, Shape: full}

			// The reference: the state updated by a slice_update.
			gb := ir.NewBuilder("cache")
			s := gb.State("s", tt.dtype, full...)
			x := gb.Input("x", tt.dtype, tt.rows...)
			rows := x
			if tt.compute != nil {
				rows = tt.compute(gb, x)
			}
			gb.UpdateState(s, gb.SliceUpdate(s, rows, tt.axis, tt.offset))
			g, err := gb.Build()
			require.NoError(t, err)
			feeds, err := ir.RandomFeeds(g, 11, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)

			// The program: one launch computing the rows into the window.
			bb := ir.NewBuilder("kernel")
			in := bb.Input("$0", tt.dtype, tt.rows...)
			out := in
			if tt.compute != nil {
				out = tt.compute(bb, in)
			}
			bb.Output(w.OutputName(0), out)
			body, err := bb.Build()
			require.NoError(t, err)
			prog := &lower.Program{
				Name: "cache",
				Buffers: []*lower.Buffer{
					{ID: 0, Kind: lower.Input, Name: "x", Shape: tt.rows, DType: tt.dtype, Bytes: tt.rows.NumElements() * int64(tt.dtype.Size())},
					{ID: 1, Kind: lower.State, Name: "s", Shape: full, DType: tt.dtype, Bytes: full.NumElements() * int64(tt.dtype.Size())},
				},
				Run:     []*lower.Launch{{Name: "k0", Body: body, Form: rules.FormOf(body), Args: []int{0}, Outs: []int{1}}},
				Outputs: map[string]int{},
				Updates: map[string]int{"s": 1},
			}
			ks, err := PrintProgram(prog)
			require.NoError(t, err)
			require.Len(t, ks, 1)
			assert.Equal(t, tt.vector, ks[0].Vector)
			assert.Contains(t, ks[0].Text, tt.store)
			// The grid covers the rows, not the state.
			lanes := int64(1)
			if tt.vector {
				lanes = 4
			}
			assert.Equal(t, int((tt.rows.NumElements()/lanes+int64(ks[0].Block[0])-1)/int64(ks[0].Block[0])), ks[0].Grid[0])

			_, executed, err := lower.Execute(context.Background(), prog, feeds)
			require.NoError(t, err)
			compareStates(t, "lower.Execute", executed, want)
			_, emulated, err := EmulateProgram(context.Background(), prog, ks, feeds, emu.Options{})
			require.NoError(t, err)
			compareStates(t, "emulation", emulated, want)
		})
	}
}

// TestInPlaceWindowMustFit: a window whose shape is not its buffer's is
// refused before anything runs.
func TestInPlaceWindowMustFit(t *testing.T) {
	rows, full := ir.Shape{1, 2, 1, 4}, ir.Shape{1, 2, 8, 4}
	w := lower.Window{Axis: 2, Offset: 1, Shape: ir.Shape{1, 2, 6, 4}}
	bb := ir.NewBuilder("kernel")
	bb.Output(w.OutputName(0), bb.Input("$0", ir.F32, rows...))
	body, err := bb.Build()
	require.NoError(t, err)
	prog := &lower.Program{
		Name: "cache",
		Buffers: []*lower.Buffer{
			{ID: 0, Kind: lower.Input, Name: "x", Shape: rows, DType: ir.F32, Bytes: 32},
			{ID: 1, Kind: lower.State, Name: "s", Shape: full, DType: ir.F32, Bytes: 256},
		},
		Run:     []*lower.Launch{{Name: "k0", Body: body, Form: rules.FormOf(body), Args: []int{0}, Outs: []int{1}}},
		Outputs: map[string]int{},
		Updates: map[string]int{"s": 1},
	}
	ks, err := PrintProgram(prog)
	require.NoError(t, err)
	feeds := map[string]*ir.Tensor{"x": ir.NewTensor(ir.F32, rows), "s": ir.NewTensor(ir.F32, full)}
	_, _, err = EmulateProgram(context.Background(), prog, ks, feeds, emu.Options{})
	require.ErrorContains(t, err, "through a window into [1,2,6,4], but its buffer is state f32[1,2,8,4]")
}

// TestInPlaceDecodePrograms lowers decode steps at the cache's first and
// last positions, checks that every state is written in place by a kernel
// that stores the new rows only, one kernel for a layer's key and value
// rows where the order allows, and runs the printed programs under the
// emulation against the reference.
func TestInPlaceDecodePrograms(t *testing.T) {
	// Parallel: independent of the other tests, it shares the machine's
	// cores with them once the sequential tests are done.
	t.Parallel()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ is missing:", err)
	}
	tests := []struct {
		name string
		past int
		// paired counts the kernels writing a layer's key and value rows
		// both; the naive llama program reads the new keys before it
		// computes the value rows.
		paired int
	}{
		{"tiny-llama:decode", 0, 0},
		{"tiny-llama:decode", 4, 0},
		{"tiny-gpt2:decode", 2, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/past=%d", tt.name, tt.past), func(t *testing.T) {
			g, err := corpus.Build(tt.name, corpus.Options{Seq: 5, Past: tt.past})
			require.NoError(t, err)
			prog, err := rules.NaiveProgram(context.Background(), g, rules.SaturateOptions{})
			require.NoError(t, err)
			lp, err := lower.FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
			require.NoError(t, err)
			ks, err := PrintProgram(lp)
			require.NoError(t, err)
			windowed, paired := 0, 0
			for i, l := range lp.Run {
				if len(l.Outs) == 2 && lp.Buffers[l.Outs[0]].Kind == lower.State && lp.Buffers[l.Outs[1]].Kind == lower.State {
					paired++
				}
				for j, o := range l.Outs {
					if lp.Buffers[o].Kind != lower.State {
						continue
					}
					w, ok, err := l.Window(j)
					require.NoError(t, err)
					require.True(t, ok, "launch %s writes state %s whole", l.Name, lp.Buffers[o].Name)
					assert.Equal(t, int64(tt.past), w.Offset)
					k := ks[len(lp.Prep)+i]
					rows := l.Body.Node(l.Body.Outputs[j].Value).Shape.NumElements()
					assert.LessOrEqual(t, int64(k.Grid[0]*k.Block[0]), max(rows, int64(k.Block[0])), "kernel %s covers more than the rows", k.Name)
					windowed++
				}
			}
			require.Equal(t, len(g.States()), windowed)
			assert.Equal(t, tt.paired, paired, "kernels writing a layer's key and value rows")
			feeds, err := ir.RandomFeeds(g, 5, ir.Typical)
			require.NoError(t, err)
			want, err := ir.Eval(context.Background(), g, feeds, ir.EvalOptions{Magnitude: true})
			require.NoError(t, err)
			outs, states, err := EmulateProgram(context.Background(), lp, ks, feeds, emu.Options{})
			require.NoError(t, err)
			for name, w := range want.Outputs {
				mm, err := ir.Compare(outs[name], w, want.Magnitudes[name], 1024)
				require.NoError(t, err)
				require.Nil(t, mm, "output %s: %v", name, mm)
			}
			compareStates(t, "emulation", states, want)
		})
	}
}
