package search

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// TestGraphMemory measures a made-up graph whose peak is worked out by
// hand: views of a leaf cost nothing, a value is freed after its last
// reader (through views of it), and outputs are counted apart.
func TestGraphMemory(t *testing.T) {
	b := ir.NewBuilder("chain")
	x := b.Input("x", ir.F32, 256)                   // 1 KiB
	w := b.Weight("w", ir.F32, 256)                  // 1 KiB
	big := b.Expand(b.Reshape(x, 1, 256), 1000, 256) // a view of x: nothing
	s := b.Sum(big, 0)                               // 1 KiB live
	a := b.Mul(b.Reshape(s, 256), w)                 // 2 KiB live, then s is freed
	c := b.Exp(a)                                    // 2 KiB live, then a is freed
	d := b.Tanh(b.Reshape(c, 16, 16))                // 2 KiB live, then c is freed
	b.Output("y", b.Mul(d, d))                       // an output: its own buffer
	g, err := b.Build()
	require.NoError(t, err)
	m := GraphMemory(g)
	assert.Equal(t, Memory{Weights: 1024, Inputs: 1024, Outputs: 1024, Activations: 2048}, m)
	assert.Equal(t, int64(5120), m.Total())
	assert.Equal(t, "weights 1 KiB, activations about 2 KiB, inputs 1 KiB, outputs 1 KiB", m.String())
}

// TestGraphMemoryDecode: a decode step's KV caches are states at their
// capacity, updated in place, and named with their positions.
func TestGraphMemoryDecode(t *testing.T) {
	c, err := corpus.EmbeddedConfig("tiny-llama")
	require.NoError(t, err)
	mem := func(seq int, dt ir.DType) Memory {
		g, err := corpus.Build("tiny-llama:decode", corpus.Options{Seq: seq, Past: 5, DType: dt})
		require.NoError(t, err)
		m := GraphMemory(g)
		assert.Equal(t, g.NumParams()*int64(dt.Size()), m.Weights)
		return m
	}
	m := mem(64, ir.F32)
	// Two layers, a key and a value cache each, [1, kv heads, 64, head].
	caches := int64(2 * 2 * c.NumKeyValueHeads * 64 * c.HeadDim * 4)
	assert.Equal(t, caches, m.States)
	assert.Equal(t, int64(64), m.CachePositions)
	assert.Equal(t, int64(8), m.Inputs, "input_ids i64[1,1]")
	assert.Equal(t, int64(c.VocabSize*4), m.Outputs, "logits f32[1,1,vocab]")
	assert.Positive(t, m.Activations)
	assert.Contains(t, m.String(), "KV cache at 64 positions 32 KiB")

	// A cache twice as long doubles the states only: the updates are
	// written into them, not beside them.
	m2 := mem(128, ir.F32)
	assert.Equal(t, 2*caches, m2.States)
	assert.Less(t, m2.Activations, m.Activations+caches)
	assert.Equal(t, m.Weights/2, mem(64, ir.BF16).Weights)
}

func TestGraphMemorySaturates(t *testing.T) {
	b := ir.NewBuilder("huge")
	x := b.Input("x", ir.F32, 1<<30, 1<<30, 4) // 2^62 elements, 2^64 bytes
	b.Output("y", b.Exp(b.Exp(x)))
	g, err := b.Build()
	require.NoError(t, err)
	m := GraphMemory(g)
	assert.Equal(t, int64(math.MaxInt64), m.Inputs)
	assert.Equal(t, int64(math.MaxInt64), m.Activations)
	assert.Equal(t, int64(math.MaxInt64), m.Total())
	err = CheckMemory(&Model{Name: "huge", Graph: g}, &cost.Device{Name: "gpu", MemoryBytes: 80 << 30})
	assert.ErrorContains(t, err, "huge needs 8 EiB of device memory")
}

func TestCheckMemory(t *testing.T) {
	g, err := corpus.Build("tiny-gpt2:decode", corpus.Options{Seq: 32, Past: 2})
	require.NoError(t, err)
	md := &Model{Name: "tiny-gpt2:decode", Graph: g}
	total := GraphMemory(g).Total()
	tests := []struct {
		name   string
		memory int64
		want   []string // substrings of the error; none: accepted
	}{
		{"fits exactly", total, nil},
		{"unknown memory", 0, nil},
		{"one byte short", total - 1, []string{
			"tiny-gpt2:decode needs " + Bytes(total) + " of device memory (weights ",
			"KV cache at 32 positions ",
			"the small-gpu has " + Bytes(total-1),
			"a shorter --seq", "a --target with more memory",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckMemory(md, &cost.Device{Name: "small-gpu", MemoryBytes: tt.memory})
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, KindOption, KindOf(err))
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	onnxModel := &Model{Name: "m.onnx", Graph: g}
	assert.ErrorContains(t, CheckMemory(onnxModel, &cost.Device{Name: "d", MemoryBytes: 1}), "smaller --dim bindings")
	assert.NoError(t, CheckMemory(md, nil))
}

// TestCompileRefusesModelsTooLarge: Compile, Optimize and Bench refuse a
// model the target's memory cannot hold before any search, naming the
// figures.
func TestCompileRefusesModelsTooLarge(t *testing.T) {
	m, err := LoadModel("llama-3-8b:model", ModelOptions{Build: corpus.Options{Seq: 16, Past: -1, DType: ir.F32}})
	require.NoError(t, err)
	dev, err := cost.ResolveTarget(context.Background(), "a10g", nil) // sm_86: NVRTC 11.8 is asked for sm_80
	require.NoError(t, err)
	want := []string{"llama-3-8b:model needs ", "(weights 29.9 GiB, ", "the a10g has 24 GiB"}
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	t.Setenv(tunedb.EnvPath, db) // Bench opens the default database
	for name, run := range map[string]func() error{
		"compile": func() error {
			_, err := Compile(context.Background(), m, Options{Target: dev.Name, Arch: "sm_80", TuneDB: db})
			return err
		},
		"optimize": func() error {
			_, err := Optimize(context.Background(), m, Options{Target: dev.Name, Arch: "sm_80", TuneDB: db, Measure: MeasureNone})
			return err
		},
		"bench": func() error {
			_, err := Bench(context.Background(), m, BenchOptions{Target: dev.Name, Arch: "sm_80", TuneDB: db, Measure: MeasureEmulated})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := run()
			require.Error(t, err)
			assert.Equal(t, KindOption, KindOf(err), "%v", err)
			for _, w := range want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{1536, "1.5 KiB"},
		{1000 * 1024, "1000 KiB"},
		{1024*1024 - 1, "1 MiB"},
		{80 << 30, "80 GiB"},
		{931 << 30 / 10, "93.1 GiB"},
		{math.MaxInt64, "8 EiB"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Bytes(tt.n), "%d", tt.n)
	}
}

// TestGraphMemoryQuantized: gpt-oss-120b's decode step, its experts MXFP4
// as its config says, fits an H100 with a KV cache of its whole context:
// the packed experts count as the checkpoint stores them (60.8 GiB of
// weights) and their dequantized values take no memory. With plain bf16
// experts it does not fit, and the refusal gives the figures.
func TestGraphMemoryQuantized(t *testing.T) {
	dev, err := cost.LookupDevice("h100")
	require.NoError(t, err)
	c, err := corpus.EmbeddedConfig("gpt-oss-120b")
	require.NoError(t, err)
	opt := corpus.Options{Seq: c.MaxPositionEmbeddings, Past: -1, DType: ir.BF16}
	g, err := corpus.Build("gpt-oss-120b:decode", opt)
	require.NoError(t, err)
	m := GraphMemory(g)
	t.Logf("gpt-oss-120b:decode --dtype bf16 --max-seq %d: %s; total %s of the %s's %s", opt.Seq, m, Bytes(m.Total()), dev.Name, Bytes(dev.MemoryBytes))
	assert.Equal(t, int64(65_248_815_744), m.Weights, "60.8 GiB: the checkpoint's bytes")
	assert.Equal(t, int64(c.NumHiddenLayers*2*c.NumKeyValueHeads*c.HeadDim*opt.Seq*2), m.States)
	assert.Less(t, m.Activations, int64(1<<30), "no dequantized expert is an intermediate")
	assert.NoError(t, CheckMemory(&Model{Name: "gpt-oss-120b:decode", Graph: g}, dev))

	opt.PlainWeights = true
	plain, err := corpus.Build("gpt-oss-120b:decode", opt)
	require.NoError(t, err)
	err = CheckMemory(&Model{Name: "gpt-oss-120b:decode", Graph: plain}, dev)
	require.Error(t, err)
	assert.Equal(t, KindOption, KindOf(err))
	for _, w := range []string{"gpt-oss-120b:decode needs ", "(weights 218 GiB, KV cache at 131072 positions 9 GiB", "the h100-sxm has 80 GiB", "quantized --weights"} {
		assert.Contains(t, err.Error(), w)
	}
}
