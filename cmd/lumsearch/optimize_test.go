package main

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/egraph"
	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/lumsearch/lumsearch/plan"
	"github.com/lumsearch/lumsearch/report"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/tunedb"
)

// asMainEnv makes the test binary run as lumsearch (see TestMain).
const asMainEnv = "LUMSEARCH_TEST_AS_MAIN"

// outputFiles lists what optimize must write, relative to DIR.
var outputFiles = []string{"kernels.cu", "model.h", "model.cpp", "plan.json", "constants.safetensors", "report.md", "report/best.svg", "report/egraph.svg", "report/categories.svg"}

// readTree reads every file under dir by its relative path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = string(data)
		return err
	}))
	return files
}

// TestOptimizeEndToEnd optimizes small models with work limits: the whole
// output folder is written, the program was verified under the emulation
// against the reference interpreter (at its real shapes and at the reduced
// size), plan.json carries the run's provenance, and the report compares
// the program with the naive one.
func TestOptimizeEndToEnd(t *testing.T) {
	skipLong(t)
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	for _, model := range []string{"tiny-llama:layer", "tiny-gpt2:decode"} {
		t.Run(model, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			r := runArgs(t, "optimize", model, "--seq", "6", "--budget", "0", "--iter-limit", "6", "--seed", "3", "-o", dir)
			require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
			files := readTree(t, dir)
			for _, f := range outputFiles {
				assert.Contains(t, files, f)
			}
			assert.Contains(t, files, filepath.Join("go", PackageNameOf(model), "model.go"))
			assert.Regexp(t, `(?m)^  verified the (fusion|all) program`, r.stdout)
			assert.Regexp(t, `(?m)^  verify: the reduced configuration .* matches the reference interpreter under the CPU emulation`, r.stdout)
			assert.Regexp(t, `(?m)^optimized `+model+`: \d+ launches per run`, r.stdout)
			pl, err := plan.Read(dir)
			require.NoError(t, err)
			assert.Equal(t, model, pl.Model)
			assert.Equal(t, uint64(3), pl.Seed)
			assert.Len(t, pl.RulesHash, 64)
			assert.Contains(t, pl.Command, "iter-limit=6")
			md := files["report.md"]
			assert.Contains(t, md, "# lumsearch optimize: "+model)
			assert.Contains(t, md, "naive")
			assert.Contains(t, md, "| Search ended by | work limits (stage fusion: saturation; stage all: the iteration limit (6 iterations, --iter-limit)) |",
				"the limit that ended the search, named with its value")
		})
	}
}

// PackageNameOf is the Go package optimize writes for a model.
func PackageNameOf(model string) string {
	return strings.NewReplacer("-", "_", ":", "_").Replace(model)
}

// TestOptimizeONNX optimizes an ONNX model with its own weights: its
// symbolic dimension bound, the whole program verified under the emulation
// with those weights, and the prepared weights written.
func TestOptimizeONNX(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "optimize", writeONNX(t), "--dim", "batch=4", "--budget", "0", "--measure", "none", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
	assert.Regexp(t, `(?m)^  verify: the whole program matches the reference interpreter under the CPU emulation`, r.stdout)
	files := readTree(t, dir)
	assert.Contains(t, files, "weights.safetensors")
	assert.Contains(t, files, "report.md")
}

// TestOptimizeDeterministic runs the same optimize twice, at GOMAXPROCS 1
// and 2, with work limits ending the search (3 iterations a stage, which
// find the program 5 do, at half the time under the race detector): the
// output folders are byte-identical.
func TestOptimizeDeterministic(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	var trees []map[string]string
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		dir := filepath.Join(t.TempDir(), "out")
		r := runArgs(t, "optimize", "tiny-llama:layer", "--seq", "5", "--budget", "0", "--iter-limit", "3", "--node-limit", "20000", "--measure", "none", "-o", dir)
		runtime.GOMAXPROCS(prev)
		require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
		trees = append(trees, readTree(t, dir))
	}
	require.NotEmpty(t, trees[0])
	assert.Equal(t, len(trees[0]), len(trees[1]))
	for name, a := range trees[0] {
		assert.True(t, a == trees[1][name], "%s differs between GOMAXPROCS 1 and 2", name)
	}
}

// TestOptimizeEmulatedMeasuring runs the measuring loop end to end under
// the emulation: the worker (this binary as lumsearch) checks and times
// the chosen kernel (one candidate in its best schedules: the library's
// TestOptimizeOnFleet measures two a round), the records land in the
// tuning database labelled emulated, and the report says the times are
// CPU times.
func TestOptimizeEmulatedMeasuring(t *testing.T) {
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	t.Setenv(tunedb.EnvPath, db)
	t.Setenv(asMainEnv, "1") // for the worker process only: this process runs tests
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "optimize", "tiny-llama:mlp", "--seq", "4", "--budget", "0", "--iter-limit", "3", "--measure", "emulated", "--candidates", "1", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
	assert.Regexp(t, `(?m)^  measure: k\d+ \S+: .* \(emulated\), predicted`, r.stdout)
	d, err := tunedb.Open(db)
	require.NoError(t, err)
	require.NotZero(t, d.Len())
	for _, rec := range d.Records() {
		assert.Equal(t, tunedb.WhereEmulated, rec.Where)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "CPU times")
}

// TestOptimizeErrors checks the exit codes a user can act on.
func TestOptimizeErrors(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	t.Setenv("LUMSEARCH_LIBCUDA", filepath.Join(t.TempDir(), "no-libcuda.so.1"))
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, []byte("x"), 0o644))
	bad := writeFile(t, "bad.onnx", "not a protobuf")
	symbolic := writeONNX(t)
	einsum := filepath.Join(shareddata.Dir(t), "onnx-node", "test_einsum_batch_matmul", "model.onnx")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown model", []string{"optimize", "no-such-model:layer", "-o", t.TempDir()}, exitInput, "no-such-model"},
		{"unreadable onnx", []string{"optimize", bad, "-o", t.TempDir()}, exitInput, "bad.onnx"},
		{"missing onnx", []string{"optimize", filepath.Join(t.TempDir(), "gone.onnx"), "-o", t.TempDir()}, exitInput, "gone.onnx"},
		{"unbound dimension", []string{"optimize", symbolic, "-o", t.TempDir()}, exitInput, "--dim batch=VALUE"},
		{"unsupported op", []string{"optimize", einsum, "-o", t.TempDir()}, exitInput, `node "z" (Einsum, opset 12): operator Einsum is not supported`},
		{"output is a file", []string{"optimize", "tiny-llama:mlp", "-o", filepath.Join(blocker, "out")}, exitOutput, "output folder"},
		{"no gpu", []string{"optimize", "tiny-llama:mlp", "--measure", "gpu", "-o", t.TempDir()}, exitNoDevice, "no CUDA device"},
		{"no -o", []string{"optimize", "tiny-llama:mlp"}, exitUsage, "-o DIR"},
		{"bad measure", []string{"optimize", "tiny-llama:mlp", "--measure", "fpga", "-o", t.TempDir()}, exitUsage, "--measure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, c.args...)
			assert.Equal(t, c.code, r.code, r.stderr)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}

// TestOptimizeInterrupted sends SIGINT to a real optimize process once a
// program has been verified: it stops the search, writes a complete
// output folder with the best verified program and exits 0.
func TestOptimizeInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs optimize as a process")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(exe, "optimize", "tiny-llama:layer", "--seq", "6", "--budget", "10m", "--json", "--measure", "none", "-o", dir)
	cmd.Env = append(os.Environ(), asMainEnv+"=1", tunedb.EnvPath+"="+filepath.Join(t.TempDir(), "tunedb.jsonl"))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sent := false
	var events []search.Event
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var e search.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		events = append(events, e)
		if e.Kind == "verified" && !sent {
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			sent = true
		}
	}
	err = cmd.Wait()
	require.True(t, sent, "a program was verified: %v\n%s", events, stderr.String())
	require.NoError(t, err, stderr.String())
	files := readTree(t, dir)
	for _, f := range outputFiles {
		assert.Contains(t, files, f)
	}
	last := events[len(events)-1]
	assert.Equal(t, "result", last.Kind)
	// The signal came once the insurance (the naive program) was
	// verified, while the stages' programs were being verified, so it
	// ended the search.
	assert.Contains(t, last.Message, "ended by interrupted")
	_, err = plan.Read(dir)
	require.NoError(t, err)
	assert.Contains(t, files["report.md"], "| Search ended by | interrupted |")
}

// resultOf is the summary of optimize --json's last event.
func resultOf(t *testing.T, stdout string) report.Summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last struct {
		Kind    string         `json:"event"`
		Summary report.Summary `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	require.Equal(t, "result", last.Kind)
	return last.Summary
}

// TestOptimizeStartsFromPreviousRun: a run cut short by tight limits
// starts from the plan the tuning database kept from a longer run of the
// same model, so it is not predicted slower than that run, while the same
// tight run without the kept plan is.
func TestOptimizeStartsFromPreviousRun(t *testing.T) {
	skipLong(t)
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	t.Setenv(tunedb.EnvPath, db)
	args := func(limit string) []string {
		return []string{"optimize", "tiny-llama:layer", "--seq", "6", "--budget", "0", "--measure", "none", "--json", "--iter-limit", limit, "-o", filepath.Join(t.TempDir(), "out")}
	}
	r := runArgs(t, args("1")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	tight := resultOf(t, r.stdout)
	require.NoError(t, os.RemoveAll(db+".plans"))

	r = runArgs(t, args("10")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	long := resultOf(t, r.stdout)
	require.Less(t, long.Predicted, tight.Predicted, "the longer search finds a faster program")

	r = runArgs(t, args("1")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	again := resultOf(t, r.stdout)
	assert.Contains(t, r.stdout, `"stage":"previous run"`)
	assert.LessOrEqual(t, again.Predicted, long.Predicted)
}

// TestOptimizeHuggingFaceFolder optimizes a folder holding a Hugging Face
// config.json (built as --kind: the MLP, whose search, compilation and
// verification take a fraction of a layer's; TestOptimizeDeterministic
// optimizes a layer), and writes the e-graph and program of every stage
// with --dump.
func TestOptimizeHuggingFaceFolder(t *testing.T) {
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	cfg, err := os.ReadFile(filepath.Join("..", "..", "corpus", "configs", "tiny-llama.json"))
	require.NoError(t, err)
	folder := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(folder, "config.json"), cfg, 0o644))
	dir, dump := filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "dump")
	r := runArgs(t, "optimize", folder, "--kind", "mlp", "--seq", "4", "--budget", "0", "--iter-limit", "4", "--measure", "none", "--dump", dump, "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
	pl, err := plan.Read(dir)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(folder, "config.json")+":mlp", pl.Model)
	dumped := readTree(t, dump)
	for _, f := range []string{"01-fusion.egraph.json", "01-fusion.program.txt", "02-all.egraph.json", "02-all.program.txt"} {
		require.Contains(t, dumped, f)
	}
	_, err = egraph.ReadSerializedFile(filepath.Join(dump, "02-all.egraph.json"))
	require.NoError(t, err)
	assert.Contains(t, dumped["02-all.program.txt"], "## kernel 0")

	r = runArgs(t, "verify", dir)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
}
