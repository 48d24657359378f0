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

// nodeOutcome is how compiling one conformance case ended.
type nodeOutcome struct {
	name    string
	err     error
	skipped string // why the case is not compiled at all (its import needs bound inputs)
}

// TestEveryConformingNodeCaseCompiles compiles every ONNX node case that
// passes conformance through the library (LoadModel, then Compile, which
// verifies every kernel and the whole program under the CPU emulation): a
// case either compiles and verifies, or is refused as unsupported, a
// KindInput error naming the op. An internal error (a printer or
// cost-model bug) or any other failure fails the test. Cases whose import
// needs the data set's integer inputs bound as constants (ErrNotConstant)
// are outside what LoadModel reads and are counted apart. The cases run
// concurrently and with NVRTC left out (the kernels' CUDA is still
// compiled by g++ under the emulation), which keeps the suite to a couple
// of minutes.
func TestEveryConformingNodeCaseCompiles(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "onnx-node")
	if testing.Short() {
		t.Skip("compiles every ONNX node case (a couple of minutes); skipped under -short")
	}
	t.Setenv(tunedb.EnvPath, filepath.Join(t.TempDir(), "tunedb.jsonl"))
	names := readCaseList(t, conformancePass)
	require.NotEmpty(t, names)
	if only := os.Getenv("LUMSEARCH_NODE_CASES"); only != "" {
		names = strings.Split(only, ",")
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

	var compiled, unbound int
	refused := map[string][]string{}
	for _, r := range results {
		switch {
		case r.skipped != "":
			unbound++
		case r.err == nil:
			compiled++
		case KindOf(r.err) == KindInput && strings.Contains(r.err.Error(), "unsupported"):
			refused[r.err.Error()] = append(refused[r.err.Error()], r.name)
		default:
			t.Errorf("%s: %v (kind %d)", r.name, r.err, KindOf(r.err))
		}
	}
	var msgs []string
	for m, cases := range refused {
		msgs = append(msgs, fmt.Sprintf("%d refused (%s): %s", len(cases), strings.Join(cases, " "), m))
	}
	sort.Strings(msgs)
	t.Logf("%d cases: %d compile and verify, %d need bound inputs, %d refused as unsupported\n%s",
		len(results), compiled, unbound, len(results)-compiled-unbound, strings.Join(msgs, "\n"))
}

// compileNodeCase loads and compiles one case's model.
func compileNodeCase(ctx context.Context, path string) nodeOutcome {
	m, err := LoadModel(path, ModelOptions{})
	if err != nil {
		if isNotConstant(err) {
			return nodeOutcome{skipped: err.Error()}
		}
		return nodeOutcome{err: fmt.Errorf("load: %w", err)}
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = Compile(ctx, m, Options{Arch: "sm_90"})
	return nodeOutcome{err: err}
}

// isNotConstant says whether an import asked for inputs bound as
// constants.
func isNotConstant(err error) bool {
	return err != nil && errors.Is(err, onnx.ErrNotConstant)
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
