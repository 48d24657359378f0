package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/tunedb"
)

// TestVerifyDir compiles a model, verifies the folder, then damages it in
// several ways that each must fail the verification.
func TestVerifyDir(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "compile", "tiny-llama:decode", "--seq", "6", "--verify=false", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runArgs(t, "verify", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^  kernels.cu: each of its \d+ distinct kernels is what its body and schedule print$`, r.stdout)
	assert.Regexp(t, `(?m)^  verify: \d+ distinct kernels at their real shapes`, r.stdout)
	assert.Regexp(t, `(?m)^  verify: the whole program, as the folder holds it, matches the reference interpreter`, r.stdout)

	src, err := os.ReadFile(filepath.Join(dir, "kernels.cu"))
	require.NoError(t, err)
	planText, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(planText, &raw))
	run := raw["run"].([]any)
	require.Greater(t, len(run), 1)

	for _, c := range []struct {
		name   string
		damage func(t *testing.T, d string)
		code   int
		want   string
	}{
		{"edited kernel", func(t *testing.T, d string) {
			edited := strings.Replace(string(src), "__syncthreads();", "__syncthreads(); __syncthreads();", 1)
			require.NotEqual(t, string(src), edited)
			require.NoError(t, os.WriteFile(filepath.Join(d, "kernels.cu"), []byte(edited), 0o644))
		}, exitError, "is not what its body and schedule"},
		{"swapped launches", func(t *testing.T, d string) {
			var p map[string]any
			require.NoError(t, json.Unmarshal(planText, &p))
			r := p["run"].([]any)
			// Run the last launch first: what it reads is not written yet.
			r[0], r[len(r)-1] = r[len(r)-1], r[0]
			data, err := json.Marshal(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(d, "plan.json"), data, 0o644))
		}, exitError, "differs from the reference"},
		{"missing constants", func(t *testing.T, d string) {
			require.NoError(t, os.Remove(filepath.Join(d, "constants.safetensors")))
		}, exitInput, "constants.safetensors"},
		{"no plan", func(t *testing.T, d string) {
			require.NoError(t, os.Remove(filepath.Join(d, "plan.json")))
		}, exitInput, "plan.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "copy")
			require.NoError(t, os.CopyFS(d, os.DirFS(dir)))
			c.damage(t, d)
			r := runArgs(t, "verify", d)
			assert.Equal(t, c.code, r.code, r.stdout+r.stderr)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}
