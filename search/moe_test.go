package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// moeBlock is a mixture-of-experts block over rows of x: the router's
// logits (a matmul, widened to f32), route, experts, a residual add.
func moeBlock(t *testing.T, dt ir.DType, R, H, E, I, k int, g ir.Gating, limit float64) *ir.Graph {
	b := ir.NewBuilder("moe")
	x := b.Input("x", dt, ir.Dim(R), ir.Dim(H))
	router := b.Weight("router", dt, ir.Dim(H), ir.Dim(E))
	logits := b.Cast(b.MatMul(x, router), ir.F32)
	w := b.Route(logits, k, ir.GatingChosen)
	gu, dn := b.Weight("gate_up", dt, ir.Dim(E), ir.Dim(H), ir.Dim(2*I)), b.Weight("down", dt, ir.Dim(E), ir.Dim(I), ir.Dim(H))
	gub, dnb := b.Weight("gate_up_bias", dt, ir.Dim(E), ir.Dim(2*I)), b.Weight("down_bias", dt, ir.Dim(E), ir.Dim(H))
	b.Output("y", b.Add(x, b.Experts(x, w, gu, dn, gub, dnb, k, g, limit)))
	gr, err := b.Build()
	require.NoError(t, err)
	return gr
}

// TestMoEBlockCompiles: a mixture-of-experts block compiles through the
// whole pipeline (the split-experts rewrite, the route and experts
// kernels, every kernel verified at its real shapes, the whole program
// emulated against the reference), for a decode row and a chunk of rows,
// in f32 and bf16.
func TestMoEBlockCompiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	for _, c := range []struct {
		name  string
		dt    ir.DType
		R     int
		g     ir.Gating
		limit float64
	}{
		{"decode f32", ir.F32, 1, ir.GatingClampedSwiGLU, 7},
		{"chunk bf16", ir.BF16, 24, ir.GatingSwiGLU, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
			g := moeBlock(t, c.dt, c.R, 32, 8, 24, 2, c.g, c.limit)
			weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
			require.NoError(t, err)
			md := &Model{Name: "moe", Graph: g, Weights: weights}
			var log bytes.Buffer
			res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
			require.NoError(t, err, log.String())
			assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
			var names []string
			for _, l := range res.final.compiled.lowered.Run {
				names = append(names, l.Name)
			}
			var src strings.Builder
			for _, k := range res.final.compiled.kernels {
				src.WriteString(k.Text)
			}
			for _, op := range []string{": route, ", ": experts_up, ", ": experts_down, "} {
				assert.True(t, strings.Contains(src.String(), op), "a kernel computes%s%v", op, names)
			}
			t.Logf("%s: launches %v\n%s", c.name, names, log.String())
		})
	}
}
