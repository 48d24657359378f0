package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/tunedb"
)

// slowWriteEnv makes the test binary, running as lumsearch, announce every
// step of writing an output folder on stderr and dwell there, so that a
// test can signal it while it writes.
const slowWriteEnv = "LUMSEARCH_TEST_SLOW_WRITE"

// slowWrites installs the slow write steps when slowWriteEnv asks.
func slowWrites() {
	if os.Getenv(slowWriteEnv) != "1" {
		return
	}
	outdir.StepHook = func(step string) {
		fmt.Fprintf(os.Stderr, "test: writing: %s\n", step)
		time.Sleep(200 * time.Millisecond)
	}
}

// lumsearchProcess is the test binary run as lumsearch with args.
func lumsearchProcess(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), asMainEnv+"=1", tunedb.EnvPath+"="+filepath.Join(t.TempDir(), "tunedb.jsonl")), env...)
	return cmd
}

// TestSecondInterruptLeavesTheOldFolder: a first Ctrl-C while optimize
// writes its folder over an older one lets the write go on; a second one
// kills the process at once, and the folder is the old one, whole.
func TestSecondInterruptLeavesTheOldFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("runs optimize as a process")
	}
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	dir := filepath.Join(t.TempDir(), "out")
	r := runArgs(t, "compile", "tiny-llama:rmsnorm", "--seq", "4", "--verify=false", "-o", dir)
	require.Equal(t, exitOK, r.code, r.stderr)
	old := readTree(t, dir)

	cmd := lumsearchProcess(t, []string{slowWriteEnv + "=1"}, "optimize", "tiny-llama:mlp", "--seq", "4", "--budget", "0", "--iter-limit", "3", "--measure", "none", "-o", dir)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stderr)
	var lines []string
	signaled := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !signaled && strings.HasPrefix(sc.Text(), "test: writing: write model.cpp") {
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			signaled = true
		}
	}
	err = cmd.Wait()
	require.True(t, signaled, "optimize wrote its folder: %s", strings.Join(lines, "\n"))
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the second Ctrl-C kills")
	status, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.True(t, status.Signaled(), "killed by the signal, not exited: %v", err)
	assert.Equal(t, old, readTree(t, dir), "the old folder, whole")
	assert.Contains(t, strings.Join(lines, "\n"), "Ctrl-C again quits at once")
}

// loadTestEnv runs the load tests, which take minutes: the README's job
// under GOMAXPROCS=1 and one CPU hog per core, interrupted at seeded
// moments (scripts/interrupt-check.sh runs them).
const loadTestEnv = "LUMSEARCH_LOAD_TESTS"

// TestReadmeJobInterruptedUnderLoad runs the README's main job with
// GOMAXPROCS=1 beside one busy process per core, and sends SIGINT at 5
// seeded moments later than 15 s after the start: each run exits 0 within
// the budget's reserve and leaves a folder whose program was verified
// (plan.json records the verification, and every file matches its
// digest).
func TestReadmeJobInterruptedUnderLoad(t *testing.T) {
	if os.Getenv(loadTestEnv) != "1" {
		t.Skipf("takes minutes; set %s=1 (scripts/interrupt-check.sh)", loadTestEnv)
	}
	for range runtime.NumCPU() {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, hog.Start())
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	r := rand.New(rand.NewPCG(21, 3))
	for i := range 5 {
		at := 15*time.Second + time.Duration(r.Int64N(int64(45*time.Second)))
		t.Run(fmt.Sprintf("sigint-at-%.1fs", at.Seconds()), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "_out")
			cmd := lumsearchProcess(t, []string{"GOMAXPROCS=1"}, "optimize", "llama-3-8b:layer", "--seq", "16", "--budget", "2m", "--json", "-o", dir)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			require.NoError(t, cmd.Start())
			timer := time.AfterFunc(at, func() { cmd.Process.Signal(syscall.SIGINT) })
			err := cmd.Wait()
			timer.Stop()
			took := time.Since(start)
			require.NoError(t, err, "run %d, SIGINT at %v: %s", i, at, stderr.String())
			t.Logf("SIGINT at %v: exited after %v (%v after the signal)", at.Round(time.Millisecond), took.Round(time.Millisecond), (took - at).Round(time.Millisecond))
			sum := resultOf(t, stdout.String())
			assert.NotEmpty(t, sum.Verified, "the written program was verified")
			r := runArgs(t, "verify", dir)
			require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
			assert.Contains(t, r.stdout, "files: the folder holds the")
		})
	}

}
