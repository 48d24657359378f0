package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunFolder runs the shared decode folder, whose position is a
// runtime extent over 0..5, at given positions: the state it writes back
// is the next step's input, and positions outside the range, a missing
// position and a missing input are refused with what is wrong.
func TestRunFolder(t *testing.T) {
	skipLong(t)
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("run needs g++ for the CPU emulation")
	}
	dir, _ := compiledDecode(t)
	tmp := t.TempDir()
	ids, err := ir.TensorOfInts(ir.I64, ir.Shape{1, 1}, 7)
	require.NoError(t, err)
	in := filepath.Join(tmp, "in.safetensors")
	require.NoError(t, safetensors.WriteFile(in, map[string]*ir.Tensor{"input_ids": ids}, nil))

	out0 := filepath.Join(tmp, "out0.safetensors")
	r := runArgs(t, "run", dir, "--inputs", in, "--dim", "past=0", "-o", out0)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "at past=0 under the CPU emulation")
	got, _, err := safetensors.ReadFile(out0)
	require.NoError(t, err)
	require.Contains(t, got, "logits")
	require.Contains(t, got, "past_key_values.0.key", "the updated cache comes back")

	// The next step takes the first step's caches and its position.
	next := map[string]*ir.Tensor{"input_ids": ids}
	for name, tt := range got {
		if name != "logits" {
			next[name] = tt
		}
	}
	at, err := ir.TensorOfInts(ir.I32, ir.Shape{}, 1)
	require.NoError(t, err)
	next["past"] = at
	in1 := filepath.Join(tmp, "in1.safetensors")
	require.NoError(t, safetensors.WriteFile(in1, next, nil))
	r = runArgs(t, "run", dir, "--inputs", in1, "-o", filepath.Join(tmp, "out1.safetensors"))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "at past=1 ")

	far, err := ir.TensorOfInts(ir.I32, ir.Shape{}, 7)
	require.NoError(t, err)
	next["past"] = far
	inFar := filepath.Join(tmp, "far.safetensors")
	require.NoError(t, safetensors.WriteFile(inFar, next, nil))

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"file's position past the range", []string{"--inputs", inFar}, exitUsage, "past=7 is outside the range " + decodeModel + " was compiled for, 0..5"},
		{"past the range", []string{"--inputs", in, "--dim", "past=6"}, exitUsage, "--dim past=6: outside the range the program was compiled for, 0..5"},
		{"no position", []string{"--inputs", in}, exitUsage, "the runtime extent past (in 0..5) has no value: give --dim past=VALUE"},
		{"unknown extent", []string{"--inputs", in, "--dim", "seq=3"}, exitUsage, "the program has no runtime extent seq"},
		{"no inputs flag", []string{"--dim", "past=1"}, exitUsage, "run needs --inputs FILE and -o FILE"},
		{"input missing", []string{"--inputs", writeEmpty(t), "--dim", "past=1"}, exitInput, `no tensor for input "input_ids"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", dir}, tt.args...)
			if tt.name != "no inputs flag" {
				args = append(args, "-o", filepath.Join(t.TempDir(), "o.safetensors"))
			}
			r := runArgs(t, args...)
			assert.Equal(t, tt.code, r.code, r.stderr)
			assert.Contains(t, r.stderr, tt.want)
		})
	}

	// verify at one position, and refused outside the range.
	r = runArgs(t, "verify", dir, "--dim", "past=4")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "on random inputs at past=4 ")
	r = runArgs(t, "verify", dir, "--dim", "past=9")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--dim past=9: outside the range the program was compiled for, 0..5")
}

// writeEmpty writes a safetensors file with no tensors.
func writeEmpty(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "empty.safetensors")
	require.NoError(t, safetensors.WriteFile(p, map[string]*ir.Tensor{}, nil))
	return p
}

// TestBenchAtPosition: bench DIR --dim past=P times the program at P and
// says so; a range is a MODEL's option.
func TestBenchAtPosition(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("bench --measure emulated needs g++")
	}
	dir, _ := compiledDecode(t)
	r := runArgs(t, "bench", dir, "--measure", "emulated", "--min-runs", "1", "--max-time", "1ms", "--dim", "past=4")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "at past=4 (runtime extents)\n")
	r = runArgs(t, "bench", dir, "--measure", "emulated", "--dim", "past=1..3")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--dim NAME=LO..HI applies to a MODEL")
	r = runArgs(t, "bench", dir, "--measure", "emulated", "--dim", "past=6")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "outside the range the program was compiled for, 0..5")
}
