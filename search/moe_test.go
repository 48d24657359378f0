package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/step"
	"github.com/lumsearch/lumsearch/tunedb"
)

// moeBlock is a mixture-of-experts block over rows of x: the router's
// logits (a matmul, widened to f32), route, experts, a residual add.
func moeBlock(t *testing.T, dt ir.DType, R, H, E, I, k int, g ir.Gating, limit float64) *ir.Graph {
	return moeBlockWith(t, dt, R, H, E, I, k, g, limit, func(b *ir.Builder, name string, in, out int) ir.Value {
		return b.Weight(name, dt, ir.Dim(E), ir.Dim(in), ir.Dim(out))
	})
}

// moeBlockWith is moeBlock with each expert weight ([E, in, out] as the
// experts op reads it) made by weight.
func moeBlockWith(t *testing.T, dt ir.DType, R, H, E, I, k int, g ir.Gating, limit float64, weight func(b *ir.Builder, name string, in, out int) ir.Value) *ir.Graph {
	b := ir.NewBuilder("moe")
	x := b.Input("x", dt, ir.Dim(R), ir.Dim(H))
	router := b.Weight("router", dt, ir.Dim(H), ir.Dim(E))
	logits := b.Cast(b.MatMul(x, router), ir.F32)
	w := b.Route(logits, k, ir.GatingChosen)
	gu, dn := weight(b, "gate_up", H, 2*I), weight(b, "down", I, H)
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

// TestMoERouteNearTies: where a route's row is a near tie, the reference
// takes the program's choice and everything after it must match; where
// the choice is clear, a program choosing otherwise fails. The router has
// two equal columns (experts 2 and 5 score alike on every row); a route
// kernel edited to break ties to the higher index chooses 5 where the
// reference chooses 2, which the verification accepts, and a route kernel
// edited to take the smallest logits first is refused.
func TestMoERouteNearTies(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	dir := t.TempDir()
	t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
	const R, H, E = 24, 32, 8
	g := moeBlock(t, ir.F32, R, H, E, 24, 2, ir.GatingSwiGLU, 0)
	weights, err := ir.RandomLeaves(g, 5, ir.Typical, ir.OpWeight)
	require.NoError(t, err)
	router := weights["router"]
	for h := range H {
		router.F64[h*E+5] = router.F64[h*E+2]
	}
	md := &Model{Name: "moe", Graph: g, Weights: weights}
	res, err := Compile(t.Context(), md, Options{})
	require.NoError(t, err)
	c := res.final.compiled
	feeds, err := ir.RandomLeaves(g, 9, ir.Typical, ir.OpInput)
	require.NoError(t, err)
	for k, v := range weights {
		feeds[k] = v
	}
	edited := func(old, repl string) *compiled {
		e := *c
		e.kernels = slices.Clone(c.kernels)
		n := 0
		for i, k := range e.kernels {
			if strings.Contains(k.Text, old) {
				kk := *k
				kk.Text = strings.Replace(k.Text, old, repl, 1)
				e.kernels[i] = &kk
				n++
			}
		}
		require.Equal(t, 1, n, "one route kernel")
		return &e
	}

	higher := edited("a == b && ia < ib", "a == b && ia > ib")
	ties := newRouteTies(t.Context(), g, higher, feeds)
	require.NotNil(t, ties)
	_, err = ir.Eval(t.Context(), g, feeds, ir.EvalOptions{Magnitude: true, RouteChoice: ties.choose})
	require.NoError(t, err)
	assert.Positive(t, ties.ties, "rows whose tie straddles the k-th place")
	_, err = emulateAgainstReference(t.Context(), "moe", g, higher, feeds, nil)
	require.NoError(t, err, "the program's choice at a tie is as right as the reference's")

	smallest := edited("return a > b || (a == b && ia < ib);", "return a < b || (a == b && ia < ib);")
	_, err = emulateAgainstReference(t.Context(), "moe", g, smallest, feeds, nil)
	require.Error(t, err, "a program that takes the smallest logits fails")
	t.Log(err)
}

// TestMoEFloorReadsTheExpectedExperts: a step of T rows reads the expected
// number of distinct experts, E · (1 − (1 − k/E)^T) under uniform routing
// (81.7 of 128 for k = 4 at T = 32, gpt-oss-120b's), not all E and not
// T · k.
func TestMoEFloorReadsTheExpectedExperts(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	assert.InDelta(t, 81.7, cost.ExpectedExperts(128, 4, 32), 0.05)
	for _, R := range []int{1, 32, 512} {
		const H, E, I, k = 64, 128, 32, 4
		g := moeBlock(t, ir.BF16, R, H, E, I, k, ir.GatingSwiGLU, 0)
		f := programFloor(g, dev, nil)
		share := cost.ExpectedExperts(E, k, int64(R)) / E
		experts := float64(E*H*2*I+E*I*H+E*2*I+E*H) * 2
		other := float64(R*H*2*2 + H*E*2) // x in, y out, the router
		assert.InDelta(t, other+share*experts, f.Bytes, 1, "R=%d", R)
		assert.InDelta(t, 2*float64(R*k)*(H*2*I+I*H)+2*float64(R*E*H), f.FLOPs, 1, "R=%d", R)
	}
}

// TestMoEStepFloorFollowsTheTokens: a serving step's floor at T tokens
// reads the experts T tokens choose (E·(1 − (1 − k/E)^T) of them), so that
// a one-token step reads 4 of gpt-oss-20b's 32 experts, not all of them;
// packed MXFP4 experts (its config's) and bf16 ones (--weights none) alike.
func TestMoEStepFloorFollowsTheTokens(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	other := map[int]float64{} // by T, the bytes besides the weights
	for _, plain := range []bool{true, false} {
		g, err := corpus.Build("gpt-oss-20b:step", corpus.Options{DType: ir.BF16, PlainWeights: plain})
		require.NoError(t, err)
		l, err := step.LayoutOf(g)
		require.NoError(t, err)
		var all, experts float64
		for _, v := range g.Weights() {
			n := g.Node(v)
			b := float64(n.Shape.NumElements() * int64(n.DType.Size()))
			if strings.Contains(n.Name, "embed_tokens") {
				continue // read at the tokens' rows alone
			}
			all += b
			if strings.Contains(n.Name, ".experts.") {
				experts += b
			}
		}
		for _, T := range []int{1, 8, 32} {
			seqs := make([]step.SeqWork, T)
			for i := range seqs {
				seqs[i] = step.SeqWork{Tokens: 1, Context: 64}
			}
			w, err := l.WorkloadOf(seqs)
			require.NoError(t, err)
			f := StepFloor(g, dev, w)
			share := cost.ExpectedExperts(32, 4, int64(T)) / 32
			weights := all - experts + share*experts
			if plain {
				// Besides the weights: the tokens' activations, KV
				// rows and logits, a few MB to a hundred.
				assert.InDelta(t, weights, f.Bytes, 0.01*weights, "T=%d", T)
				other[T] = f.Bytes - weights
				continue
			}
			assert.InDelta(t, other[T], f.Bytes-weights, 1, "T=%d: the same traffic besides the packed weights", T)
		}
	}
}
