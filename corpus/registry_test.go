package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{
		"llama-3-8b:layer", "llama-3-8b:model", "llama-3-8b:decode", "llama-3-8b:attention", "llama-3-8b:mlp",
		"llama-3-8b:rmsnorm", "llama-3-8b:softmax", "llama-3-8b:rotary", "llama-3-8b:silu",
		"llama-3.2-1b:model", "qwen2.5-0.5b:decode", "mistral-7b:layer",
		"gpt2:block", "gpt2:model", "gpt2:decode", "gpt2:step", "llama-3-8b:step", "gpt2:attention", "gpt2:mlp", "gpt2:layernorm", "gpt2:softmax", "gpt2:gelu-tanh",
		"tiny-llama:model", "tiny-qwen2:model", "tiny-mistral:model", "tiny-gpt2:model",
		"mixtral-8x7b:step", "qwen3-30b-a3b:step", "qwen3-30b-a3b:silu", "gpt-oss-20b:decode", "gpt-oss-120b:mlp",
		"tiny-mixtral:model", "tiny-qwen3-moe:model", "tiny-gpt-oss:model", "gpt-oss-20b:step", "tiny-gpt-oss:step",
	} {
		assert.Contains(t, names, want)
	}
	// gpt-oss has no activation kind (its experts clamp).
	for _, absent := range []string{"gpt2:layer", "gpt2:rotary", "gpt2:rmsnorm", "llama-3-8b:block", "llama-3-8b:layernorm",
		"gpt-oss-20b:silu"} {
		assert.NotContains(t, names, absent)
	}
	// 7 dense llama-family configs and 4 mixtral and qwen3_moe ones with
	// 11 kinds, 2 gpt2 configs with 10, 3 gpt_oss configs with 10.
	assert.Len(t, names, 11*11+2*10+3*10)
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "duplicate %s", n)
		seen[n] = true
	}
}

// TestEveryNameBuilds builds every registered graph with the default
// options, decomposed and composite, and checks it.
func TestEveryNameBuilds(t *testing.T) {
	for _, name := range Names() {
		for _, composite := range []bool{false, true} {
			opt := DefaultOptions()
			opt.Composite = composite
			g, err := Build(name, opt)
			if composite && strings.Contains(name, "gpt-oss") && kindAttends(name) {
				require.ErrorContains(t, err, name+": composite attention (Options.Composite) needs attention sinks", "refused by name")
				continue
			}
			require.NoError(t, err, name)
			require.NoError(t, g.Check(), name)
			assert.Equal(t, name, g.Name)
			assert.NotEmpty(t, g.Outputs, name)
			assertNoDeadNodes(t, g)
		}
	}
}

// kindAttends says whether the kind of graph name has attention.
func kindAttends(name string) bool {
	kind := name[strings.LastIndexByte(name, ':')+1:]
	for _, k := range kinds {
		if k.name == kind {
			return k.attends
		}
	}
	return false
}

// assertNoDeadNodes checks that every node feeds an output or a state
// update: builders leave nothing unused behind.
func assertNoDeadNodes(t *testing.T, g *ir.Graph) {
	t.Helper()
	live := make([]bool, len(g.Nodes))
	for _, o := range g.Outputs {
		live[o.Value] = true
	}
	for _, u := range g.Updates {
		live[u.Value], live[u.State] = true, true
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		if live[i] {
			for _, in := range g.Nodes[i].Inputs {
				live[in] = true
			}
		}
	}
	for i, l := range live {
		if !l {
			t.Errorf("%s: node %%%d (%s %q) is unused", g.Name, i, g.Nodes[i].Op, g.Nodes[i].Name)
			return
		}
	}
}

// TestTinyShapes builds the tiny models at several batch, seq and past
// values and checks the shapes of inputs, outputs and caches.
func TestTinyShapes(t *testing.T) {
	tests := []struct {
		batch, seq, past int
	}{
		{1, 1, 0}, {1, 7, 0}, {2, 5, 3}, {3, 16, 15}, {1, 33, 20}, {2, 64, 63}, {1, 64, -1}, {1, 1, -1},
	}
	for _, model := range []string{"tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-gpt2", "tiny-mixtral", "tiny-qwen3-moe", "tiny-gpt-oss"} {
		c, err := EmbeddedConfig(model)
		require.NoError(t, err)
		for _, tt := range tests {
			for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16} {
				opt := Options{Batch: tt.batch, Seq: tt.seq, Past: tt.past, DType: dt}
				b, s := ir.Dim(tt.batch), ir.Dim(tt.seq)
				for _, k := range Kinds(c) {
					g, err := Build(model+":"+k, opt)
					require.NoError(t, err, "%s:%s %+v", model, k, opt)
					require.NoError(t, g.Check())
					for _, v := range g.Weights() {
						assert.Equal(t, dt, g.Node(v).DType, g.Node(v).Name)
					}
					switch k {
					case "model":
						assertLeaf(t, g, "input_ids", ir.I64, ir.Shape{b, s})
						assertOutput(t, g, "logits", ir.F32, ir.Shape{b, s, 97})
					case "decode":
						assertLeaf(t, g, "input_ids", ir.I64, ir.Shape{b, 1})
						assertOutput(t, g, "logits", ir.F32, ir.Shape{b, 1, 97})
						st := g.Node(g.States()[0])
						assert.Equal(t, ir.Shape{b, ir.Dim(c.NumKeyValueHeads), s, ir.Dim(c.HeadDim)}, st.Shape)
						assert.Equal(t, dt, st.DType)
					case "prefill":
						assertLeaf(t, g, "input_ids", ir.I64, ir.Shape{b, s})
						assertOutput(t, g, "logits", ir.F32, ir.Shape{b, s, 97})
						st := g.Node(g.States()[0])
						assert.Equal(t, ir.Shape{b, ir.Dim(c.NumKeyValueHeads), s, ir.Dim(c.HeadDim)}, st.Shape, "the cache holds Cache (default Seq) positions")
					case "step":
						// Batch is the sequences' business: the step's
						// maxima are Options.Step's defaults.
						assertLeaf(t, g, "input_ids", ir.I64, ir.Shape{DefaultMaxTokens})
						assertLeaf(t, g, "block_table", ir.I32, ir.Shape{DefaultMaxSeqs, (s + DefaultBlockSize - 1) / DefaultBlockSize})
						assertOutput(t, g, "logits", ir.F32, ir.Shape{DefaultMaxSeqs, 97})
						st := g.Node(g.States()[0])
						l, err := StepLayout(c, opt)
						require.NoError(t, err)
						assert.Equal(t, ir.Shape{ir.Dim(l.Slots()), ir.Dim(c.NumKeyValueHeads), ir.Dim(c.HeadDim)}, st.Shape)
						assert.Equal(t, dt, st.DType)
					case "layer", "block":
						assertLeaf(t, g, "hidden_states", dt, ir.Shape{b, s, 64})
						assertOutput(t, g, "hidden_states", dt, ir.Shape{b, s, 64})
					case "attention", "mlp", "rmsnorm", "layernorm":
						assertLeaf(t, g, "hidden_states", dt, ir.Shape{b, s, 64})
						assertOutput(t, g, "output", dt, ir.Shape{b, s, 64})
					case "softmax":
						assertOutput(t, g, "output", dt, ir.Shape{b, 4, s, s})
					case "rotary":
						hd := ir.Dim(c.HeadDim) // 16, tiny-qwen3-moe's 32
						assertOutput(t, g, "q_embed", dt, ir.Shape{b, 4, s, hd})
						assertOutput(t, g, "k_embed", dt, ir.Shape{b, ir.Dim(c.NumKeyValueHeads), s, hd})
					default: // the activation
						assertOutput(t, g, "output", dt, ir.Shape{b, s, ir.Dim(c.IntermediateSize)})
					}
				}
			}
		}
	}
}

func assertLeaf(t *testing.T, g *ir.Graph, name string, dt ir.DType, shape ir.Shape) {
	t.Helper()
	for _, n := range g.Nodes {
		if n.Op == ir.OpInput && n.Name == name {
			assert.Equal(t, dt, n.DType, "%s: input %s", g.Name, name)
			assert.Equal(t, shape, n.Shape, "%s: input %s", g.Name, name)
			return
		}
	}
	t.Errorf("%s: no input %q", g.Name, name)
}

func assertOutput(t *testing.T, g *ir.Graph, name string, dt ir.DType, shape ir.Shape) {
	t.Helper()
	for _, o := range g.Outputs {
		if o.Name == name {
			n := g.Node(o.Value)
			assert.Equal(t, dt, n.DType, "%s: output %s", g.Name, name)
			assert.Equal(t, shape, n.Shape, "%s: output %s", g.Name, name)
			return
		}
	}
	t.Errorf("%s: no output %q", g.Name, name)
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want []string // substrings of the error
	}{
		{"tiny-llama", Options{}, []string{`"tiny-llama" is not MODEL:KIND`, "tiny-llama:layer"}},
		{"tiny-lama:model", Options{}, []string{`no model "tiny-lama"`, "did you mean tiny-llama:model"}},
		{"llama-3-8b:layr", Options{}, []string{`no kind "layr"`, "its kinds: layer, model, decode", "did you mean layer?"}},
		{"gpt2:layer", Options{}, []string{`no kind "layer"`, "did you mean block?"}},
		{"tiny-llama:layernorm", Options{}, []string{"did you mean rmsnorm?"}},
		{"tiny-llama:decode", Options{Seq: 8, Past: 8}, []string{"past 8: want it below seq 8"}},
		{"tiny-llama:model", Options{Batch: -1}, []string{"batch -1"}},
		{"tiny-llama:model", Options{Seq: -2}, []string{"seq -2"}},
		{"tiny-llama:model", Options{DType: ir.I32}, []string{"dtype i32"}},
		{"tiny-gpt2:model", Options{Seq: 257}, []string{"seq 257", "n_positions"}},
		{"tiny-gpt2:decode", Options{Seq: 300, Past: 2}, []string{"seq 300", "n_positions"}},
		{"missing.json:model", Options{}, []string{"missing.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.name, tt.opt)
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestPositions refuses every kind of every model at one position more
// than its config has, and builds it at exactly as many.
func TestPositions(t *testing.T) {
	for _, m := range ConfigNames() {
		c, err := EmbeddedConfig(m)
		require.NoError(t, err)
		if c.MaxPositionEmbeddings > 1024 {
			continue // the real models' graphs at full length are slow to build in f32 under -race; their check is the same
		}
		key := c.fieldName("max_position_embeddings")
		for _, k := range Kinds(c) {
			name := m + ":" + k
			t.Run(name, func(t *testing.T) {
				_, err := Build(name, Options{Seq: c.MaxPositionEmbeddings + 1, Past: 3})
				var pe *PositionsError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, PositionsError{Seq: c.MaxPositionEmbeddings + 1, Max: c.MaxPositionEmbeddings, Key: key, Decode: k == "decode"}, *pe)
				assert.ErrorContains(t, err, fmt.Sprintf("%s: seq %d", name, c.MaxPositionEmbeddings+1))
				assert.ErrorContains(t, err, fmt.Sprintf("the model's %d positions (%s)", c.MaxPositionEmbeddings, key))
				if k == "decode" {
					assert.ErrorContains(t, err, "KV cache's capacity")
				}
				_, err = Build(name, Options{Seq: c.MaxPositionEmbeddings, Past: 3})
				assert.NoError(t, err)
			})
		}
	}
	_, err := Build("llama-3-8b:model", Options{Seq: 100_000_001})
	assert.ErrorContains(t, err, "seq 100000001 is more than the model's 8192 positions (max_position_embeddings)")
}

func TestBuildFromConfigFile(t *testing.T) {
	data, err := configFS.ReadFile("configs/tiny-llama.json")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	g, err := Build(path+":model", Options{Seq: 4})
	require.NoError(t, err)
	want, err := Build("tiny-llama:model", Options{Seq: 4})
	require.NoError(t, err)
	assert.Equal(t, len(want.Nodes), len(g.Nodes))
	assert.Equal(t, want.NumParams(), g.NumParams())
}

func TestDefaultOptions(t *testing.T) {
	g, err := Build("tiny-llama:decode", DefaultOptions())
	require.NoError(t, err)
	st := g.Node(g.States()[0])
	assert.Equal(t, ir.Shape{1, 2, DefaultSeq, 16}, st.Shape)
	su := sliceUpdates(g)[0]
	at, ok := su.DynamicOffset()
	require.True(t, ok, "the default decode writes the cache at the runtime position")
	assert.Equal(t, "past", g.Node(at).Name)
	assert.Equal(t, []ir.Symbol{{Name: "past", Lo: 0, Hi: DefaultSeq - 1}}, g.Symbols)

	// The zero Options take the same batch, seq and dtype, and decode the
	// first token.
	g, err = Build("tiny-llama:decode", Options{})
	require.NoError(t, err)
	assert.Equal(t, ir.Shape{1, 2, DefaultSeq, 16}, g.Node(g.States()[0]).Shape)
	assert.Equal(t, int64(0), sliceUpdates(g)[0].Offset)
	assert.Empty(t, g.Symbols)

	// A runtime decode takes batch 1 only, and its range must fit the cache.
	_, err = Build("tiny-llama:decode", Options{Batch: 2, Past: -1})
	assert.ErrorContains(t, err, "serves batch 1")
	_, err = Build("tiny-llama:decode", Options{Seq: 8, Past: -1, PastMax: 8})
	assert.ErrorContains(t, err, "below seq 8")
}

func sliceUpdates(g *ir.Graph) []*ir.Node {
	var out []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == ir.OpSliceUpdate {
			out = append(out, n)
		}
	}
	return out
}

func TestSuggest(t *testing.T) {
	names := []string{"tiny-llama:model", "tiny-gpt2:model", "gpt2:block"}
	assert.Equal(t, "", suggest("zzzzzzzzzzz", names))
	assert.True(t, strings.HasPrefix(suggest("tiny-lama:model", names), "; did you mean tiny-llama:model"))
	assert.Contains(t, suggest("gpt2", names), "gpt2:block")
	assert.Equal(t, 0, editDistance("abc", "abc"))
	assert.Equal(t, 3, editDistance("", "abc"))
	assert.Equal(t, 1, editDistance("gpt2", "gpt3"))
	assert.True(t, slices.IsSorted([]int{editDistance("a", "a"), editDistance("a", "ab")}))
}
