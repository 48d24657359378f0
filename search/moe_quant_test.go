package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
	"github.com/lumsearch/lumsearch/tunedb"
)

// moeQuantBlock is moeBlock with its experts' weights in MXFP4 as gpt-oss
// stores them (the biases stay plain): blocks u8 [E, N, K/32, 16] and
// scales u8 [E, N, K/32] for gate_up (N = 2I, K = H) and down (N = H,
// K = I), read by the experts op through permute(dequant(...), [0, 2, 1]).
func moeQuantBlock(t *testing.T, dt ir.DType, R, H, E, I, k int, g ir.Gating, limit float64) *ir.Graph {
	return moeBlockWith(t, dt, R, H, E, I, k, g, limit, func(b *ir.Builder, name string, in, out int) ir.Value {
		blocks := b.Weight(name+"_blocks", ir.U8, ir.Dim(E), ir.Dim(out), ir.Dim(in/32), 16)
		scales := b.Weight(name+"_scales", ir.U8, ir.Dim(E), ir.Dim(out), ir.Dim(in/32))
		return b.Permute(b.Dequant(quant.MXFP4, dt, 32, 0, blocks, scales), 0, 2, 1)
	})
}

// TestMoEQuantBlockCompiles: a mixture-of-experts block whose experts'
// weights are MXFP4 compiles through the whole pipeline for a decode row
// and a chunk in bf16: its experts kernels decode the packed codes as
// they load them (nothing is prepared at load time, no kernel writes a
// decoded weight), every kernel is verified at its real shapes and the
// whole program emulated against the reference.
func TestMoEQuantBlockCompiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	for _, c := range []struct {
		name  string
		R     int
		g     ir.Gating
		limit float64
	}{
		{"decode", 1, ir.GatingClampedSwiGLU, 7},
		{"chunk", 24, ir.GatingSwiGLU, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
			g := moeQuantBlock(t, ir.BF16, c.R, 64, 8, 32, 2, c.g, c.limit)
			weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
			require.NoError(t, err)
			md := &Model{Name: "moe", Graph: g, Weights: weights}
			var log bytes.Buffer
			res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
			require.NoError(t, err, log.String())
			assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")
			lp := res.final.compiled.lowered
			assert.Empty(t, lp.Prep, "nothing is prepared at load time")
			var src strings.Builder
			for _, k := range res.final.compiled.kernels {
				src.WriteString(k.Text)
			}
			for _, op := range []string{": route, ", ": experts_up, ", ": experts_down, "} {
				assert.Contains(t, src.String(), op, "a kernel computes%s", op)
			}
			assert.Equal(t, 2, strings.Count(src.String(), "lum_e2m1_in(w[j]"), "both experts kernels decode e2m1 codes")
			t.Logf("%s", log.String())
		})
	}
}

// TestMoEQuantFloorReadsPackedExperts: the floor of a block with MXFP4
// experts reads the expected distinct experts' packed codes and scales
// (following the permute and the dequant down to them), not all E.
func TestMoEQuantFloorReadsPackedExperts(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	for _, R := range []int{1, 32} {
		const H, E, I, k = 64, 128, 32, 4
		g := moeQuantBlock(t, ir.BF16, R, H, E, I, k, ir.GatingSwiGLU, 0)
		f := programFloor(g, dev, nil)
		share := cost.ExpectedExperts(E, k, int64(R)) / E
		packed := func(N, K int) float64 { return float64(E*N*K)/2 + float64(E*N*K/32) }
		experts := packed(2*I, H) + packed(H, I) + float64(E*2*I+E*H)*2
		other := float64(R*H*2*2 + H*E*2) // x in, y out, the router
		assert.InDelta(t, other+share*experts, f.Bytes, 1, "R=%d", R)
	}
}
