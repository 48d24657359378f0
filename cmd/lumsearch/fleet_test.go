package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/tunedb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a buffer a running command and a test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var serverURL = regexp.MustCompile(`tuning server: (nats://\S+),`)

// startTuningServer runs "tuning-server --port 0" in this process until
// the test ends, and returns its URL.
func startTuningServer(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tuning-server", "--port", "0", "--store", t.TempDir()}, &out, &errs)
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, exitOK, <-done, errs.String())
		assert.Contains(t, out.String(), "tuning server: stopped")
	})
	var url string
	require.Eventually(t, func() bool {
		m := serverURL.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 20*time.Second, 10*time.Millisecond, "the server says where it listens: %s", errs.String())
	return url
}

// TestTuningServerCommands: tuning-server starts an embedded server with
// the fleet set up and stops on Ctrl-C; tunedb exports to and imports
// from its bucket; the fleet commands refuse wrong command lines.
func TestTuningServerCommands(t *testing.T) {
	url := startTuningServer(t)
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	rec := tunedb.Record{Key: tunedb.Key{Spec: "graph k", Schedule: "threads=128", Shapes: "[4]", DTypes: "f32", Device: "h100-sxm", Driver: "12.4", Compiler: "nvrtc 12.4"},
		Median: 1e-5, Samples: 3, Where: tunedb.WhereGPU, At: time.Now().UTC()}
	local, err := tunedb.Open(db)
	require.NoError(t, err)
	require.NoError(t, local.Append(rec))

	r := runArgs(t, "tunedb", "export", "--nats", url, "--db", db)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "exported 1 of 1 keys to lumsearch-tunedb at "+url+" (0 there already)\n", r.stdout)
	other := filepath.Join(t.TempDir(), "other.jsonl")
	r = runArgs(t, "tunedb", "import", "--nats", url, "--db", other)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "imported 1 of 1 records from lumsearch-tunedb at "+url+" into "+other+" (0 already present)\n", r.stdout)

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"worker without url", []string{"tune-worker", "--gpu-kind", "h100"}, "--nats: no NATS URL"},
		{"worker bad url", []string{"tune-worker", "--nats", "http://x:1", "--gpu-kind", "h100"}, "want nats://HOST:PORT"},
		{"worker bad kind", []string{"tune-worker", "--nats", url, "--gpu-kind", "h100.>"}, "--gpu-kind"},
		{"worker bad mode", []string{"tune-worker", "--nats", url, "--gpu-kind", "h100", "--measure", "fpga"}, "--measure"},
		{"server with both", []string{"tuning-server", "--nats", url, "--port", "5"}, "--port is for the embedded server"},
		{"server argument", []string{"tuning-server", "now"}, "takes no arguments"},
		{"optimize bad workers", []string{"optimize", "tiny-llama:mlp", "--workers", "127.0.0.1:4222", "-o", t.TempDir()}, "--workers"},
		{"optimize workers without measuring", []string{"optimize", "tiny-llama:mlp", "--workers", url, "--measure", "none", "-o", t.TempDir()}, "give --measure gpu, emulated or auto"},
		{"import file and nats", []string{"tunedb", "import", "x.jsonl", "--nats", url}, "takes no file"},
		{"nats for stats", []string{"tunedb", "stats", "--nats", url}, "--nats does not apply to tunedb stats"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, c.args...)
			assert.Equal(t, exitUsage, r.code, r.stderr)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}

// TestFleetEndToEnd runs a fleet as a user does: tuning-server and two
// tune-workers as processes (measuring under the emulation through their
// own worker processes), and optimize --workers. One worker is killed in
// the middle of a job: its job goes to the other after the ack wait, and
// every kernel is measured. A second optimize finds every time in the
// fleet's bucket.
func TestFleetEndToEnd(t *testing.T) {
	skipLong(t)
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("the emulation needs g++")
	}
	server := lumsearchProcess(t, nil, "tuning-server", "--port", "0", "--store", t.TempDir())
	lines := startProcess(t, server)
	url := ""
	for l := range lines {
		if m := serverURL.FindStringSubmatch(l); m != nil {
			url = m[1]
			break
		}
	}
	require.NotEmpty(t, url)
	var workers []*exec.Cmd
	var measuring []<-chan string
	for _, name := range []string{"w1", "w2"} {
		w := lumsearchProcess(t, nil, "tune-worker", "--nats", url, "--gpu-kind", "h100", "--measure", "emulated", "--ack-wait", "3s", "--name", name)
		workers, measuring = append(workers, w), append(measuring, startProcess(t, w))
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for l := range measuring[0] {
			if strings.Contains(l, ": measuring ") {
				_ = workers[0].Process.Signal(syscall.SIGKILL)
				return
			}
		}
	}()
	t.Setenv(asMainEnv, "1") // for the worker processes only
	db := filepath.Join(t.TempDir(), "tunedb.jsonl")
	args := []string{"optimize", "tiny-llama:mlp", "--seq", "4", "--budget", "0", "--iter-limit", "5", "--measure", "emulated", "--candidates", "2", "--workers", url, "--tunedb", db, "--verify=false"}
	r := runArgs(t, append(args, "-o", filepath.Join(t.TempDir(), "out"))...)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
	<-killed
	fleetLines := regexp.MustCompile(`(?m)^  measure: k\d+ \S+: .* \(emulated, by the fleet on .*\), predicted`).FindAllString(r.stdout, -1)
	require.NotEmpty(t, fleetLines, r.stdout)
	assert.NotContains(t, r.stdout, "failed")
	d, err := tunedb.Open(db)
	require.NoError(t, err)
	assert.Equal(t, len(fleetLines), d.Len())

	r = runArgs(t, append(args, "-o", filepath.Join(t.TempDir(), "again"))...)
	require.Equal(t, exitOK, r.code, r.stderr+r.stdout)
	assert.Len(t, regexp.MustCompile(`(?m)^  measure: .*from the fleet's tuning bucket`).FindAllString(r.stdout, -1), len(fleetLines))
}

// startProcess starts cmd, stopped (Ctrl-C, then a kill) at the test's
// end, and returns its output lines.
func startProcess(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads: drop
			}
		}
	}()
	return lines
}
