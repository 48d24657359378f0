package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/cuda/emu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestScatterPoolCompiles: a serving step's pool writes (keys computed
// by elementwise work, values cast, both scattered at one slot mapping
// with -1 slots, the pools updated and read back) compile through the
// whole pipeline: every kernel verified at its real shapes, the whole
// program emulated against the reference, the folder written and
// verified again from plan.json.
func TestScatterPoolCompiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	dir := t.TempDir()
	t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
	b := ir.NewBuilder("step")
	kp := b.State("kpool", ir.BF16, 64, 2, 16)
	vp := b.State("vpool", ir.BF16, 64, 2, 16)
	x := b.Input("x", ir.F32, 5, 2, 16)
	k := b.Cast(b.Add(b.Mul(x, b.Input("cos", ir.F32, 5, 2, 16)), b.Neg(x)), ir.BF16)
	slots := b.Input("slot_mapping", ir.I32, 5)
	kp2 := b.Scatter(kp, k, slots, 0)
	vp2 := b.Scatter(vp, b.Cast(b.Input("v", ir.F32, 5, 2, 16), ir.BF16), slots, 0)
	b.UpdateState(kp, kp2)
	b.UpdateState(vp, vp2)
	b.Output("y", b.Add(b.Cast(kp2, ir.F32), b.Cast(vp2, ir.F32)))
	g, err := b.Build()
	require.NoError(t, err)
	md := &Model{Name: "scatter-step", Graph: g}
	var log bytes.Buffer
	res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
	require.NoError(t, err, log.String())
	assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
	lp := res.final.compiled.lowered
	for _, name := range []string{"kpool", "vpool"} {
		st := lp.Buffers[lp.Updates[name]]
		assert.Equal(t, name, st.Name, "state %s is copied back, not written in place", name)
	}
	// The folder's plan.json reads back with the pools written through
	// their slots, and its program, emulated from its own kernels,
	// computes the reference's pools.
	folder := filepath.Join(dir, "out")
	require.NoError(t, res.Write(t.Context(), folder))
	pl, err := readPlan(folder)
	require.NoError(t, err)
	back, err := pl.Lowered(md.Name)
	require.NoError(t, err)
	slotted := 0
	for _, l := range back.Run {
		for j := range l.Outs {
			w, ok, err := l.Window(j)
			require.NoError(t, err)
			if ok && w.Slots {
				slotted++
			}
		}
	}
	assert.Equal(t, 2, slotted, "outputs written through slots in plan.json")
	feeds, err := ir.RandomFeeds(g, 4, ir.Typical)
	require.NoError(t, err)
	want, err := ir.Eval(t.Context(), g, feeds, ir.EvalOptions{Magnitude: true})
	require.NoError(t, err)
	_, states, err := cuda.EmulateProgram(t.Context(), back, res.final.compiled.kernels, feeds, emu.Options{Shuffle: true, Seed: 1})
	require.NoError(t, err)
	for name, w := range want.States {
		mm, err := ir.Compare(states[name], w, want.Magnitudes[name], 16)
		require.NoError(t, err)
		assert.Nil(t, mm, "state %s: %v", name, mm)
	}
}
