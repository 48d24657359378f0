package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/tunedb"
)

// TestRulesCheck checks every built-in rule through the command (with 3
// instances each, one a dtype, --instances: the library's
// TestBuiltinRulesVerify checks them at the default 20), a file's rule at
// the default, and unsound and unparsable files.
func TestRulesCheck(t *testing.T) {
	// Parallel: it reads no tuning database and sets no environment.
	t.Parallel()
	r := runArgs(t, "rules", "check", "--instances", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^comm-add +ok +3 +f32 \d+, bf16 \d+, f16 \d+ +algebra\.rules:\d+:1$`, r.stdout)
	assert.Regexp(t, `(?m)^split-k +ok +3 +f32 \d+, bf16 \d+, f16 \d+ +tile\.rules:\d+:1$`, r.stdout, "a Go applier's rule is checked")
	assert.Regexp(t, `(?m)^\d+ rules sound$`, r.stdout)

	good := filepath.Join(t.TempDir(), "good.rules")
	require.NoError(t, os.WriteFile(good, []byte("rule swap-mul: (mul ?a ?b) => (mul ?b ?a)\n"), 0o644))
	r = runArgs(t, "rules", "check", good)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^swap-mul +ok +20 +f32 \d+, bf16 \d+, f16 \d+ +\S*good\.rules:1:1$`, r.stdout, "20 instances by default")
	assert.Regexp(t, `(?m)^1 rules sound$`, r.stdout)

	bad := filepath.Join(t.TempDir(), "bad.rules")
	require.NoError(t, os.WriteFile(bad, []byte("rule flip: (sub ?a ?b) => (sub ?b ?a)\n"), 0o644))
	r = runArgs(t, "rules", "check", bad)
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "rule flip is unsound")
	assert.Contains(t, r.stderr, "some rules are unsound")

	require.NoError(t, os.WriteFile(bad, []byte("rule broken (sub ?a ?b) => ?a\n"), 0o644))
	r = runArgs(t, "rules", "check", bad)
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "bad.rules:1:")

	r = runArgs(t, "rules")
	require.Equal(t, exitUsage, r.code)
}

func TestRulesStats(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl")) // no one's measurements
	r := runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^search tiny-llama:mlp \(\d+ ops\): \d+ e-nodes`, r.stdout)
	// Fused to a kernel per projection (the gate's SiLU and product in
	// its epilogue): with four rows every projection is a matrix-vector
	// kernel, and the greedy extraction does not see that the gate and
	// up projections could share one kernel over weights concatenated
	// at load (each alone is cheaper unshared; see issue 24's extraction
	// work).
	assert.Regexp(t, `(?m)^best program: [23] kernels per run and [01] at load time, [\d.]+ µs per run by the cost model on h100-sxm; the naive program: 6 kernels, [\d.]+ µs \([\d.]+x\)$`, r.stdout)
	assert.Regexp(t, `(?m)^  run  \[[\d,]+\] +matmul, (epilogue|prologue) \[sigmoid mul mul\]$`, r.stdout)
	assert.Regexp(t, `(?m)^  run  \[4,64\] +matmul`, r.stdout)
	assert.Regexp(t, `(?m)^ *RULE SET +RULES +MATCHES +APPLIED +NEW E-NODES +TIME$`, r.stdout)
	// Without fusion only the algebra's matmul merge saves launches.
	assert.Regexp(t, `(?m)^fuse +[4-6] +\d +\d+ +saturated +\S+ +[\d.]+ µs$`, r.stdout, "without fusion, more kernels")
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4", "--cost", "simple", "--target", "a100")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^best program: 3 kernels per run and 0 at load time, 9.03 µs per run by the simple estimate; the naive program: 6 kernels, 18 µs \(2.00x\)$`, r.stdout)
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4", "--target", "a100")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "by the cost model on a100-sxm-80gb")
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--target", "no-such-gpu")
	require.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "h100-sxm")
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--disable", "nope")
	require.Equal(t, exitUsage, r.code)
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--enable", "algebra")
	require.Equal(t, exitUsage, r.code, "algebra is on by default, not an opt-in set")
	r = runArgs(t, "rules", "stats", "tiny-llama:mlp", "--seq", "4", "--enable", "fuse-pairs")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^ *fuse-pairs +\d+ +\d+ +\d+ +\d+ +\S+ *$`, r.stdout)
}

// TestRuleFlagsOnOptimizeAndCompile: optimize and compile take --rules,
// --disable and --enable; an unsound user rule is refused by both (exit
// status for bad input, its name, "unsound" and the counterexample on
// standard error) before anything is written, and a sound one lands in
// plan.json by digest.
func TestRuleFlagsOnOptimizeAndCompile(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl")) // no one's measurements
	bad := filepath.Join(t.TempDir(), "bad.rules")
	require.NoError(t, os.WriteFile(bad, []byte("rule flip: (sub ?a ?b) => (sub ?b ?a)\n"), 0o644))
	for _, cmd := range []string{"optimize", "compile"} {
		out := filepath.Join(t.TempDir(), "out")
		r := runArgs(t, cmd, "tiny-llama:silu", "--seq", "4", "--verify=false", "--rules", bad, "-o", out)
		require.Equal(t, exitInput, r.code, "%s: %s", cmd, r.stderr)
		assert.Contains(t, r.stderr, "rule flip is unsound", cmd)
		assert.Contains(t, r.stderr, "bad.rules:1:1", cmd)
		assert.NoDirExists(t, out, cmd)

		r = runArgs(t, cmd, "tiny-llama:silu", "--seq", "4", "--verify=false", "--disable", "nonesuch", "-o", out)
		require.Equal(t, exitUsage, r.code, "%s: %s", cmd, r.stderr)
		assert.Contains(t, r.stderr, "--disable nonesuch", cmd)
	}
	good := filepath.Join(t.TempDir(), "good.rules")
	require.NoError(t, os.WriteFile(good, []byte("rule swap-mul: (mul ?a ?b) => (mul ?b ?a)\n"), 0o644))
	out := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "compile", "tiny-llama:silu", "--seq", "4", "--verify=false", "--rules", good, "--disable", "tile", "-o", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	pl, err := os.ReadFile(filepath.Join(out, "plan.json"))
	require.NoError(t, err)
	assert.Contains(t, string(pl), `"rule_files"`)
	assert.Contains(t, string(pl), `"swap-mul"`)
	assert.Contains(t, string(pl), `"rule_sets"`)
}
