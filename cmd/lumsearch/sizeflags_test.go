package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lumsearch/lumsearch/tunedb"
)

// TestSizeFlags: every command with a --seq refuses a length that is not
// positive (0 would silently mean the library's default), as a command
// line error that does no work.
func TestSizeFlags(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	out := filepath.Join(t.TempDir(), "out")
	commands := [][]string{
		{"optimize", "tiny-llama:mlp", "-o", out},
		{"compile", "tiny-llama:mlp", "-o", out},
		{"bench", "tiny-llama:mlp", "--measure", "emulated"},
		{"rules", "stats", "tiny-llama:mlp"},
		{"corpus", "show", "tiny-llama:mlp"},
	}
	for _, args := range commands {
		for _, seq := range []string{"0", "-3"} {
			t.Run(args[0]+" "+seq, func(t *testing.T) {
				r := runArgs(t, append(args, "--seq", seq)...)
				assert.Equal(t, exitUsage, r.code, r.stderr)
				assert.Contains(t, r.stderr, "--seq "+seq+": must be positive (tokens per sequence)")
				assert.Contains(t, r.stderr, "Run 'lumsearch "+args[0]+" -h' for usage.")
				assert.Empty(t, r.stdout)
				assert.NoDirExists(t, out)
			})
		}
	}
}

// TestLengthsBeyondTheModel: a length past the model's positions, and a
// program larger than the target's memory, are refused with their figures
// before any search, and nothing is written.
func TestLengthsBeyondTheModel(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	out := filepath.Join(t.TempDir(), "out")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"optimize past the positions", []string{"optimize", "mistral-7b:attention", "--seq", "40000", "--budget", "5s", "-o", out},
			[]string{"mistral-7b:attention: seq 40000 is more than the model's 32768 positions (max_position_embeddings)"}},
		{"compile a decode cache past the positions", []string{"compile", "gpt2:decode", "--seq", "2048", "-o", out},
			[]string{"seq 2048 (the KV cache's capacity) is more than the model's 1024 positions (n_positions)"}},
		{"compile beyond the target's memory", []string{"compile", "qwen2.5-0.5b:model", "--seq", "32768", "--target", "l40s", "--arch", "sm_80", "-o", out},
			[]string{"qwen2.5-0.5b:model needs ", "of device memory (weights 1.84 GiB, activations about ", "the l40s has 48 GiB", "a shorter --seq"}},
		{"optimize beyond the target's memory", []string{"optimize", "llama-3-8b:model", "--seq", "16", "--target", "rtx-4090", "--arch", "sm_80", "--budget", "5s", "-o", out},
			[]string{"llama-3-8b:model needs 29.9 GiB of device memory (weights 29.9 GiB, ", "the rtx-4090 has 24 GiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runArgs(t, tt.args...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			for _, w := range tt.want {
				assert.Contains(t, r.stderr, w)
			}
			assert.Empty(t, r.stdout)
			assert.NoDirExists(t, out)
		})
	}
}

// TestWeightsFlag: --weights packs a model's linear weights as a
// checkpoint of that format does, none keeps gpt-oss's experts in
// --dtype (and then gpt-oss-120b no longer fits an H100), and another
// value is a command line error.
func TestWeightsFlag(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	out := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "corpus", "show", "tiny-llama:mlp", "--seq", "2", "--weights", "awq")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `weight "model.layers.0.mlp.gate_proj.qweight" i32[64,16]`)
	assert.Contains(t, r.stdout, "dequant")

	r = runArgs(t, "compile", "gpt-oss-120b:decode", "--dtype", "bf16", "--weights", "none", "-o", out)
	assert.Equal(t, exitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "(weights 218 GiB, ")
	assert.Contains(t, r.stderr, "quantized --weights")
	assert.NoDirExists(t, out)

	for _, cmd := range [][]string{{"compile", "tiny-llama:mlp", "-o", out}, {"corpus", "show", "tiny-llama:mlp"}, {"bench", "tiny-llama:mlp"}, {"optimize", "tiny-llama:mlp", "-o", out}} {
		r = runArgs(t, append(cmd, "--weights", "int8")...)
		assert.Equal(t, exitUsage, r.code, r.stderr)
		assert.Contains(t, r.stderr, `"int8": want mxfp4, fp8, awq, gptq or none`)
	}
}
