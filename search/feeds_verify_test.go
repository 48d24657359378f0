package search

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/tunedb"
)

// bertMask is a BERT export's attention block in small: an integer mask
// under a name that says nothing, flipped, cast and scaled by f32's
// finfo.min, added to the scores, softmax, then the values.
func bertMask(t *testing.T) *ir.Graph {
	b := ir.NewBuilder("bert-mask")
	scores := b.Input("s", ir.F32, 1, 2, 4, 8)
	keep := b.Input("tok_flags", ir.I64, 1, 8)
	v := b.Input("v", ir.F32, 1, 2, 8, 4)
	m := b.Cast(b.Reshape(keep, 1, 1, 1, 8), ir.F32)
	bias := b.Mul(b.Sub(b.Scalar(ir.F32, 1), m), b.Scalar(ir.F32, -3.4028234663852886e38))
	b.Output("ctx", b.MatMul(b.Softmax(b.Add(scores, bias), 3), v))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// The BERT-like block compiles and verifies (every kernel at its real
// shapes and the whole program, through Compile's verification), because
// its mask is drawn from {0, 1} whatever it is called. Stated as the old
// -9..9, the same program fails the same check: (1 - mask) * finfo.min
// overflows f32 where the float64 reference does not.
func TestBertMaskVerifies(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	g := bertMask(t)
	require.Equal(t, map[string]ir.Range{"tok_flags": {Lo: 0, Hi: 1, Meaning: ir.MeaningMask}}, ir.InputRanges(g))
	md := &Model{Name: "bert-mask", Graph: g}
	var log bytes.Buffer
	res, err := Compile(t.Context(), md, Options{Events: NewPrinter(&log, false).Event})
	require.NoError(t, err, log.String())
	assert.Contains(t, res.Verified, "the whole program matches the reference interpreter")

	var out bytes.Buffer
	old := Feeds{Ranges: InputRanges{"tok_flags": {Lo: -9, Hi: 9, Meaning: ir.MeaningStated}}}
	err = verifyWhole(t.Context(), md, res.final.compiled, old, &out)
	require.ErrorContains(t, err, "output ctx differs from the reference")

	// The naive program too: each op is its own kernel, whose inputs are
	// drawn from their use in its own body (the kernel that scales by
	// finfo.min overflows f32 on ordinary values, and compares as the
	// reference's value does, as f32's infinity).
	sat, _, cm, err := Pricing{}.Options(t.Context())
	require.NoError(t, err)
	nc, err := naiveProgram(t.Context(), g, sat, cm)
	require.NoError(t, err)
	require.NoError(t, verifyKernels(t.Context(), md.Name, nc.lowered, nc.kernels, &out), out.String())
	require.NoError(t, verifyWhole(t.Context(), md, nc, Feeds{}, &out), out.String())
	err = verifyWhole(t.Context(), md, nc, old, &out)
	require.ErrorContains(t, err, "output ctx differs from the reference")
}

// Verify takes a folder's whole-program inputs from a file and compares
// its outputs with another: the reference's outputs on those inputs pass,
// a changed one fails naming it, and a file that lacks an input is an
// error naming the input.
func TestVerifyWithFiles(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	dir := t.TempDir()
	t.Setenv(tunedb.EnvPath, filepath.Join(dir, "tunedb.jsonl"))
	m, err := LoadModel("tiny-llama:rmsnorm", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	defer m.Close()
	res, err := Compile(t.Context(), m, Options{NoVerify: true})
	require.NoError(t, err)
	folder := filepath.Join(dir, "out")
	require.NoError(t, res.Write(t.Context(), folder))

	feeds, err := ir.RandomFeeds(m.Graph, 6, ir.Typical)
	require.NoError(t, err)
	in, out := filepath.Join(dir, "in.safetensors"), filepath.Join(dir, "out.safetensors")
	require.NoError(t, safetensors.WriteFile(in, feeds, nil))
	_, err = Evaluate(t.Context(), m, EvalOptions{Feeds: Feeds{Inputs: in}, SaveOutputs: out}, 0)
	require.NoError(t, err)

	var lines []string
	events := func(e Event) { lines = append(lines, e.Message) }
	require.NoError(t, VerifyWith(t.Context(), folder, Feeds{Inputs: in, Outputs: out}, events))
	assert.Contains(t, lines, "verified "+folder)
	joined := bytes.Buffer{}
	for _, l := range lines {
		joined.WriteString(l + "\n")
	}
	assert.Contains(t, joined.String(), "on the inputs of "+in)
	assert.Contains(t, joined.String(), "the outputs match "+out)

	saved, _, err := safetensors.ReadFile(out)
	require.NoError(t, err)
	for name, t0 := range saved {
		t0.Set(0, t0.At(0)*1.5+1)
		saved[name] = t0
	}
	moved := filepath.Join(dir, "moved.safetensors")
	require.NoError(t, safetensors.WriteFile(moved, saved, nil))
	err = VerifyWith(t.Context(), folder, Feeds{Inputs: in, Outputs: moved}, nil)
	require.ErrorContains(t, err, "differs from "+moved+": element 0")

	input := m.Graph.Node(m.Graph.Inputs()[0]).Name
	delete(feeds, input)
	lacking := filepath.Join(dir, "lacking.safetensors")
	require.NoError(t, safetensors.WriteFile(lacking, feeds, nil))
	err = VerifyWith(t.Context(), folder, Feeds{Inputs: lacking}, nil)
	require.ErrorContains(t, err, "no tensor for input \""+input+"\"")
	assert.Equal(t, KindInput, KindOf(err))
}
