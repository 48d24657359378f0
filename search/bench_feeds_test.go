package search

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/safetensors"
	"github.com/lumsearch/lumsearch/tunedb"
)

// Bench reads the layout its own --save writes: fed the saved inputs and
// compared with the saved outputs it passes; a changed output fails
// naming it, and an inputs file with a name the graph lacks is an error
// naming that name.
func TestBenchReadsWhatItSaves(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the CPU emulation needs g++")
	}
	dir := t.TempDir()
	t.Setenv(tunedb.EnvPath, filepath.Join(dir, "default.jsonl"))
	m, err := LoadModel("tiny-llama:rmsnorm", ModelOptions{Build: corpus.Options{Seq: 4, Past: -1}})
	require.NoError(t, err)
	defer m.Close()
	o := BenchOptions{Measure: MeasureEmulated, TuneDB: filepath.Join(dir, "tunedb.jsonl"), Seed: 3, MinRuns: 1, MaxTime: 50 * time.Millisecond}
	saved := filepath.Join(dir, "saved")
	o.Save = saved
	_, err = Bench(t.Context(), m, o)
	require.NoError(t, err)
	in, out := filepath.Join(saved, BenchInputsFile), filepath.Join(saved, BenchOutputsFile)

	o.Save, o.Seed = "", 9 // the file's inputs, not the seed's
	o.Feeds = Feeds{Inputs: in, Outputs: out}
	rep, err := Bench(t.Context(), m, o)
	require.NoError(t, err)
	require.NotNil(t, rep.Outputs)
	assert.Equal(t, 1, rep.Outputs.Values)
	assert.False(t, rep.Outputs.RelativeL2, "small enough for the reference's magnitudes")

	outputs, _, err := safetensors.ReadFile(out)
	require.NoError(t, err)
	outputs["output"].Set(2, outputs["output"].At(2)+1)
	moved := filepath.Join(dir, "moved.safetensors")
	require.NoError(t, safetensors.WriteFile(moved, outputs, nil))
	o.Feeds.Outputs = moved
	_, err = Bench(t.Context(), m, o)
	require.ErrorContains(t, err, "output output differs from "+moved+": element 2")

	inputs, _, err := safetensors.ReadFile(in)
	require.NoError(t, err)
	inputs["position_ids"], err = ir.TensorOf(ir.I64, ir.Shape{4}, 0)
	require.NoError(t, err)
	extra := filepath.Join(dir, "extra.safetensors")
	require.NoError(t, safetensors.WriteFile(extra, inputs, nil))
	o.Feeds = Feeds{Inputs: extra}
	_, err = Bench(t.Context(), m, o)
	require.ErrorContains(t, err, `tensor "position_ids" is no input, state or weight of`)
}
