package search

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus/onnx"
	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/lumsearch/lumsearch/tunedb"
)

// conformancePass lists the ONNX node cases that import and pass
// conformance in the reference interpreter (corpus/onnx's TestConformance
// keeps the list).
const conformancePass = "../corpus/onnx/testdata/conformance-pass.txt"

// raceSampleStride is the share of the cases a -race build compiles: every
// raceSampleStride-th of the list. Each case costs a g++ build of its
// kernels' emulation (seconds each on a cold cache, as in CI, where the
// README's command runs everything under -race), and what the race
// detector watches (the driver's goroutines) is the same in every case;
// the build without -race compiles them all.
const raceSampleStride = 8

// nodeOutcome is how compiling one conformance case ended.
type nodeOutcome struct {
	name  string
	phase string // "load" or "compile"
	err   error
}

// TestEveryConformingNodeCaseCompiles compiles every ONNX node case that
// passes conformance through the library (LoadModel, then Compile, which
// verifies every kernel and the whole program under the CPU emulation): a
// case either compiles and verifies, or its import refuses it as
// unsupported (onnx.ErrUnsupported: an op, attribute or dtype lumsearch
// does not take, or an input that must be bound as a constant, which the
// conformance runner binds from the data set and a user cannot), with a
// message naming the node, op and opset. An internal error (a bug:
// KindInternal) or any other failure fails the test. The cases run
// concurrently and with NVRTC left out (every op's naive kernel is
// compiled with NVRTC by package cuda's tests); the emulation's g++
// builds are cached across runs. LUMSEARCH_NODE_CASES=a,b,... runs only
// the cases named.
func TestEveryConformingNodeCaseCompiles(t *testing.T) {
	skipLong(t)
	dir := filepath.Join(shareddata.Dir(t), "onnx-node")
	if testing.Short() {
		t.Skip("compiles every ONNX node case (minutes on a cold g++ cache); skipped under -short")
	}
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	withoutNVRTC(t)
	names := readCaseList(t, conformancePass)
	require.NotEmpty(t, names)
	only := os.Getenv("LUMSEARCH_NODE_CASES")
	if only != "" {
		names = strings.Split(only, ",")
	} else if raceEnabled {
		var sample []string
		for i := 0; i < len(names); i += raceSampleStride {
			sample = append(sample, names[i])
		}
		t.Logf("-race: compiling every %dth case, %d of %d", raceSampleStride, len(sample), len(names))
		names = sample
	}
	results := make([]nodeOutcome, len(names))
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range work {
				results[i] = compileNodeCase(t.Context(), filepath.Join(dir, names[i], "model.onnx"))
				results[i].name = names[i]
			}
		})
	}
	for i := range names {
		work <- i
	}
	close(work)
	wg.Wait()

	compiled := 0
	refused := map[string][]string{}
	for _, r := range results {
		switch {
		case r.err == nil:
			compiled++
		case KindOf(r.err) == KindInternal:
			t.Errorf("%s: an internal error: %v", r.name, r.err)
		case r.phase == "load" && errors.Is(r.err, onnx.ErrUnsupported):
			why := refusalReason(r.err)
			refused[why] = append(refused[why], r.name)
		default:
			t.Errorf("%s: %s: %v (kind %d)", r.name, r.phase, r.err, KindOf(r.err))
		}
	}
	var msgs []string
	for m, cases := range refused {
		msgs = append(msgs, fmt.Sprintf("%d refused (%s): %s", len(cases), m, strings.Join(cases, " ")))
	}
	sort.Strings(msgs)
	t.Logf("%d cases: %d compile and verify, %d refused as unsupported\n%s",
		len(results), compiled, len(results)-compiled, strings.Join(msgs, "\n"))
	if only == "" {
		assert.Greater(t, compiled, len(results)*3/4, "most conforming cases compile")
	}
}

// compileNodeCase loads and compiles one case's model.
func compileNodeCase(ctx context.Context, path string) nodeOutcome {
	m, err := LoadModel(path, ModelOptions{})
	if err != nil {
		return nodeOutcome{phase: "load", err: err}
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = Compile(ctx, m, Options{Arch: "sm_90"})
	return nodeOutcome{phase: "compile", err: err}
}

// refusalReason is what an import refusal says past the node it names
// (`node "n" (Op, opset 17): ...`), so that cases refused for one reason
// group together.
func refusalReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "): "); i >= 0 {
		if j := strings.LastIndex(msg[:i], "("); j >= 0 {
			return msg[j+1:i] + ": " + msg[i+3:]
		}
	}
	return msg
}

// readCaseList reads a file of case names, one a line, # comments aside.
func readCaseList(t *testing.T, path string) []string {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	require.NoError(t, sc.Err())
	assert.NotEmpty(t, out)
	return out
}
