package rules

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
)

// layerName splits a checkpoint name into its layer index and the rest:
// "model.layers.3.mlp.up_proj.weight" is 3, "mlp.up_proj.weight". Tests
// only use names to check what FindRepeats found without them.
var layerName = regexp.MustCompile(`^(?:model\.layers|transformer\.h|past_key_values)\.(\d+)\.(.*)$`)

func splitLayer(t *testing.T, name string) (int, string) {
	m := layerName.FindStringSubmatch(name)
	require.NotNil(t, m, "leaf %q is not a layer's", name)
	var i int
	_, err := fmt.Sscan(m[1], &i)
	require.NoError(t, err)
	return i, m[2]
}

// checkLayers checks that g has one repeat of layers copies, copy i's
// weights (and states) being exactly layer i's, in corresponding order.
func checkLayers(t *testing.T, g *ir.Graph, layers int) Repeats {
	t.Helper()
	rs := FindRepeats(g, 10)
	require.Len(t, rs, 1)
	r := rs[0]
	require.Len(t, r.Copies, layers)
	perLayer := map[int]int{}
	for _, v := range append(g.Weights(), g.States()...) {
		if m := layerName.FindStringSubmatch(g.Nodes[v].Name); m != nil {
			i, _ := splitLayer(t, g.Nodes[v].Name)
			perLayer[i]++
		}
	}
	var suffixes []string
	for i, b := range r.Copies {
		require.Len(t, b.Weights, perLayer[i], "copy %d", i)
		require.Len(t, b.Nodes, len(r.Copies[0].Nodes))
		require.Len(t, b.Inputs, len(r.Copies[0].Inputs))
		require.Len(t, b.Outputs, len(r.Copies[0].Outputs))
		for k, w := range b.Weights {
			layer, rest := splitLayer(t, g.Nodes[w].Name)
			assert.Equal(t, i, layer, "copy %d weight %d", i, k)
			if i == 0 {
				suffixes = append(suffixes, rest)
			} else {
				assert.Equal(t, suffixes[k], rest, "copy %d weight %d", i, k)
			}
		}
		// Copies are disjoint and in graph order.
		if i > 0 {
			assert.Less(t, r.Copies[i-1].Nodes[0], b.Nodes[0])
		}
		// The copies form a chain: each reads its predecessor's last
		// output, the residual stream.
		if i > 0 {
			prev := r.Copies[i-1].Outputs
			assert.Contains(t, b.Inputs, prev[len(prev)-1], "copy %d", i)
		}
	}
	return r
}

func TestFindRepeatsCorpus(t *testing.T) {
	custom := func(layers int) func() (*ir.Graph, error) {
		return func() (*ir.Graph, error) {
			c, err := corpus.EmbeddedConfig("tiny-llama")
			if err != nil {
				return nil, err
			}
			c.NumHiddenLayers = layers
			return corpus.BuildConfig(fmt.Sprintf("tiny-llama-%d", layers), c, "model", corpus.Options{Seq: 8})
		}
	}
	named := func(name string, opt corpus.Options) func() (*ir.Graph, error) {
		return func() (*ir.Graph, error) { return corpus.Build(name, opt) }
	}
	tests := []struct {
		name   string
		build  func() (*ir.Graph, error)
		layers int
	}{
		{"tiny-llama", named("tiny-llama:model", corpus.Options{Seq: 8}), 2},
		{"tiny-gpt2", named("tiny-gpt2:model", corpus.Options{Seq: 8}), 2},
		{"tiny-qwen2", named("tiny-qwen2:model", corpus.Options{Seq: 8}), 2},
		{"tiny-llama-3", custom(3), 3},
		{"tiny-llama-5", custom(5), 5},
		{"tiny-qwen2-decode", named("tiny-qwen2:decode", corpus.Options{Seq: 8}), 2},
		{"tiny-llama-decode", named("tiny-llama:decode", corpus.Options{Seq: 8, Past: 3}), 2},
		{"tiny-mistral", named("tiny-mistral:model", corpus.Options{Seq: 8}), 2},
		{"tiny-gpt2-decode", named("tiny-gpt2:decode", corpus.Options{Seq: 8}), 2},
		{"tiny-llama-bf16", named("tiny-llama:model", corpus.Options{Seq: 8, DType: ir.BF16}), 2},
		{"tiny-llama-composite", named("tiny-llama:model", corpus.Options{Seq: 8, Composite: true}), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := tt.build()
			require.NoError(t, err)
			r := checkLayers(t, g, tt.layers)
			t.Logf("%s: %d copies of %d nodes, %d inputs, %d weights, %d outputs", g.Name, len(r.Copies),
				len(r.Copies[0].Nodes), len(r.Copies[0].Inputs), len(r.Copies[0].Weights), len(r.Copies[0].Outputs))
		})
	}
}

// TestFindRepeatsSmall: graphs without two chained copies of a layer.
// One layer still holds two chained RMS norms (with their weights), a
// repeat of 17 nodes a copy, which minNodes keeps or drops.
func TestFindRepeatsSmall(t *testing.T) {
	tests := []struct {
		name     string
		minNodes int
		copies   int // 0: no repeats
	}{
		{"tiny-llama:mlp", 1, 0},
		{"tiny-gpt2:attention", 1, 0},
		{"tiny-llama:rotary", 1, 0},
		{"tiny-llama:layer", 20, 0},
		{"tiny-llama:layer", 10, 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.name, tt.minNodes), func(t *testing.T) {
			g, err := corpus.Build(tt.name, corpus.Options{Seq: 8})
			require.NoError(t, err)
			rs := FindRepeats(g, tt.minNodes)
			if tt.copies == 0 {
				assert.Empty(t, rs)
				return
			}
			require.Len(t, rs, 1)
			assert.Len(t, rs[0].Copies, tt.copies)
			for _, b := range rs[0].Copies {
				require.Len(t, b.Weights, 1)
				assert.Contains(t, g.Nodes[b.Weights[0]].Name, "layernorm")
			}
		})
	}
}

// handLayerNodes is the number of nodes of a layer of handLayers, leaves
// but the weights included (the builder broadcasts with reshapes and
// expands).
const handLayerNodes = 24

// handLayers builds n chained layers x -> norm -> matmul -> gelu-ish ->
// matmul -> residual add by hand; perturb, when at least 0, makes that
// layer use sub instead of add in its activation.
func handLayers(t *testing.T, n, perturb int) *ir.Graph {
	b := ir.NewBuilder("hand")
	x := b.Input("x", ir.F32, 4, 8)
	for i := range n {
		w := b.Weight(fmt.Sprintf("layer%d.norm", i), ir.F32, 8)
		up := b.Weight(fmt.Sprintf("layer%d.up", i), ir.F32, 8, 16)
		down := b.Weight(fmt.Sprintf("layer%d.down", i), ir.F32, 16, 8)
		h := b.Mul(b.Mul(x, b.Rsqrt(b.Add(b.Mean(b.Mul(x, x), -1), b.Scalar(ir.F32, 0.5)))), w)
		u := b.MatMul(h, up)
		if i == perturb {
			u = b.Tanh(b.Sub(u, b.Scalar(ir.F32, 1)))
		} else {
			u = b.Tanh(b.Add(u, b.Scalar(ir.F32, 1)))
		}
		x = b.Add(x, b.MatMul(u, down))
	}
	b.Output("y", x)
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

func TestFindRepeatsHand(t *testing.T) {
	tests := []struct {
		name            string
		layers, perturb int
		minNodes        int
		copies          []int // the layers the copies are, in order; nil: no repeats
		nodes, weights  int   // per copy
	}{
		{"three", 3, -1, 5, []int{0, 1, 2}, handLayerNodes, 3},
		{"four", 4, -1, 5, []int{0, 1, 2, 3}, handLayerNodes, 3},
		{"one", 1, -1, 1, nil, 0, 0},
		// The perturbed layer matches no other; the rest still chain,
		// through it if need be.
		{"perturbed", 2, 1, handLayerNodes, nil, 0, 0},
		{"perturbed-middle", 3, 1, handLayerNodes, []int{0, 2}, handLayerNodes, 3},
		{"perturbed-last", 4, 3, handLayerNodes, []int{0, 1, 2}, handLayerNodes, 3},
		// Smaller copies: the part of each layer before the perturbation.
		{"perturbed-part", 2, 1, 10, []int{0, 1}, 17, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := handLayers(t, tt.layers, tt.perturb)
			rs := FindRepeats(g, tt.minNodes)
			if tt.copies == nil {
				assert.Empty(t, rs)
				return
			}
			require.Len(t, rs, 1)
			require.Len(t, rs[0].Copies, len(tt.copies))
			for i, b := range rs[0].Copies {
				assert.Len(t, b.Nodes, tt.nodes, "copy %d", i)
				assert.Len(t, b.Weights, tt.weights, "copy %d", i)
				for _, w := range b.Weights {
					assert.Regexp(t, fmt.Sprintf(`^layer%d\.`, tt.copies[i]), g.Nodes[w].Name)
				}
			}
		})
	}
}

// TestVerifyCopiesRejects walks hand-made copies: corresponding layers
// pass, a perturbed layer, a reordering and overlapping copies fail.
func TestVerifyCopiesRejects(t *testing.T) {
	layerNodes := func(g *ir.Graph, i int) []ir.Value {
		// The hand graph declares one input, then per layer three weights
		// and its nodes.
		var out []ir.Value
		start := 1 + i*(handLayerNodes+3)
		for v := start; v < start+handLayerNodes+3; v++ {
			if g.Nodes[v].Op != ir.OpWeight {
				out = append(out, ir.Value(v))
			}
		}
		return out
	}
	good := handLayers(t, 2, -1)
	bad := handLayers(t, 2, 1)
	tests := []struct {
		name   string
		g      *ir.Graph
		copies func(g *ir.Graph) [][]ir.Value
		ok     bool
	}{
		{"same", good, func(g *ir.Graph) [][]ir.Value { return [][]ir.Value{layerNodes(g, 0), layerNodes(g, 1)} }, true},
		{"perturbed", bad, func(g *ir.Graph) [][]ir.Value { return [][]ir.Value{layerNodes(g, 0), layerNodes(g, 1)} }, false},
		{"swapped", good, func(g *ir.Graph) [][]ir.Value {
			c := layerNodes(g, 1)
			c[3], c[4] = c[4], c[3]
			return [][]ir.Value{layerNodes(g, 0), c}
		}, false},
		{"overlap", good, func(g *ir.Graph) [][]ir.Value { return [][]ir.Value{layerNodes(g, 0), layerNodes(g, 0)} }, false},
		{"one", good, func(g *ir.Graph) [][]ir.Value { return [][]ir.Value{layerNodes(g, 0)} }, false},
		{"short", good, func(g *ir.Graph) [][]ir.Value { return [][]ir.Value{layerNodes(g, 0), layerNodes(g, 1)[1:]} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRepeatFinder(tt.g)
			blocks, err := f.verifyCopies(tt.copies(tt.g))
			if !tt.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, blocks, 2)
			// Layer 0 reads x; layer 1 reads layer 0's output.
			assert.Equal(t, []ir.Value{0}, blocks[0].Inputs)
			assert.Equal(t, blocks[0].Outputs, blocks[1].Inputs)
			assert.Len(t, blocks[1].Weights, 3)
		})
	}
}

// TestFindRepeatsDeterministic: the same graph gives the same answer.
func TestFindRepeatsDeterministic(t *testing.T) {
	g, err := corpus.Build("tiny-gpt2:model", corpus.Options{Seq: 8})
	require.NoError(t, err)
	first := FindRepeats(g, 10)
	for range 5 {
		assert.Equal(t, first, FindRepeats(g, 10))
	}
}

// TestFindRepeatsLarge logs the repeats of full-size models and the time
// FindRepeats takes on them.
func TestFindRepeatsLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("full-size models")
	}
	tests := []struct {
		name   string
		layers int
	}{
		{"llama-3-8b:model", 32},
		{"gpt2:model", 12},
		{"llama-3-8b:decode", 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := corpus.Build(tt.name, corpus.Options{Seq: 128})
			require.NoError(t, err)
			start := time.Now()
			rs := FindRepeats(g, 10)
			elapsed := time.Since(start)
			require.Len(t, rs, 1)
			r := rs[0]
			require.Len(t, r.Copies, tt.layers)
			b := r.Copies[0]
			covered := len(r.Copies) * len(b.Nodes)
			var params int
			for _, c := range r.Copies {
				params += len(c.Weights)
			}
			t.Logf("%s: %d nodes; %d copies of %d nodes (%d covered), %d inputs, %d weights, %d outputs per copy; %v",
				tt.name, len(g.Nodes), len(r.Copies), len(b.Nodes), covered, len(b.Inputs), len(b.Weights), len(b.Outputs), elapsed)
			// The time is logged, not asserted: speed is measured by
			// benchmarks, not by timed unit tests.
			assert.True(t, slices.IsSorted(b.Nodes))
		})
	}
}

// BenchmarkFindRepeats times repeated-block detection on llama-3-8b:model.
func BenchmarkFindRepeats(b *testing.B) {
	g, err := corpus.Build("llama-3-8b:model", corpus.Options{Seq: 128})
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if rs := FindRepeats(g, 10); len(rs) != 1 || len(rs[0].Copies) != 32 {
			b.Fatalf("found %d repeats", len(rs))
		}
	}
}
