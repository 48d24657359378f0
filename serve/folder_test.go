package serve

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/search"
)

// scratch holds what the tests compile, removed after them all.
var scratch string

func TestMain(m *testing.M) {
	code := m.Run()
	if scratch != "" {
		os.RemoveAll(scratch)
	}
	fakecuda.Cleanup()
	os.Exit(code)
}

// compileInto compiles model with build options into a new folder of
// scratch, without verification (the compiler's own tests verify).
func compileInto(model string, build corpus.Options) (string, error) {
	ctx := context.Background()
	if scratch == "" {
		var err error
		if scratch, err = os.MkdirTemp("", "lumsearch-serve-"); err != nil {
			return "", err
		}
	}
	dir, err := os.MkdirTemp(scratch, "")
	if err != nil {
		return "", err
	}
	m, err := search.LoadModel(model, search.ModelOptions{Build: build})
	if err != nil {
		return "", err
	}
	defer m.Close()
	res, err := search.Compile(ctx, m, search.Options{NoVerify: true, TuneDB: filepath.Join(dir, "tunedb.jsonl")})
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "out")
	return out, res.Write(ctx, out)
}

// tinyFolder compiles the tiny Llama 2-vocabulary model's step once per
// test binary (without verification, which the compiler's own tests do)
// into a folder the tests serve.
var tinyFolder = sync.OnceValues(func() (string, error) {
	return compileInto("testdata/tiny-llama2/config.json:step", corpus.Options{MaxSeq: 128, Step: corpus.StepOptions{MaxTokens: 64, MaxSeqs: 16, BlockSize: 16}})
})

func openTiny(t testing.TB) *FolderEngine {
	t.Helper()
	dir, err := tinyFolder()
	require.NoError(t, err)
	eng, err := OpenFolder(context.Background(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestServeCompiledStep serves the compiled tiny model under the CPU
// emulation to 32 concurrent clients of the official OpenAI client:
// each answer equals the same request served alone (greedy and seeded
// sampling), also when a pool cut to a few blocks forces preemption.
func TestServeCompiledStep(t *testing.T) {
	// Parallel: the package's longest test (the emulated step), it shares
	// the machine's cores with the simulated step's once the sequential
	// tests are done.
	t.Parallel()
	// Under -short, the simulated step's test covers preemption and
	// compares every answer; this one checks the compiled step's wiring.
	alone, tight := 32, 6
	if testing.Short() {
		alone, tight = 1, 0
	}
	eng := openTiny(t)
	require.Equal(t, "CPU emulation", eng.Device())
	require.Equal(t, 32000, eng.Layout().Vocab)
	checkConcurrentClients(t, func() Engine { return openTiny(t) }, tight, 32, alone, 12)
}

// TestServeRefusesWhatDoesNotFit: a folder that is not a step kind, and a
// tokenizer with ids outside the model's vocabulary, are refused.
func TestServeRefusesWhatDoesNotFit(t *testing.T) {
	t.Parallel() // after tinyFolder, compileInto's scratch is set
	dir, err := tinyFolder()
	require.NoError(t, err)
	eng, err := OpenFolder(context.Background(), dir)
	require.NoError(t, err)
	defer eng.Close()
	_, err = LoadText(TextOptions{Folder: eng.ModelFolder(), Tokenizer: filepath.Join(filepath.Dir(llama2Path(t)), "..", "llama3", "tokenizer.json")}, eng.Layout().Vocab)
	require.ErrorContains(t, err, "not the model's")
	txt, err := LoadText(TextOptions{Folder: eng.ModelFolder(), Tokenizer: llama2Path(t)}, eng.Layout().Vocab)
	require.NoError(t, err)
	require.Equal(t, []int64{2}, txt.EOS, "generation_config.json's eos_token_id")

	notStep, err := compileInto("tiny-llama:rmsnorm", corpus.Options{Seq: 4, Past: -1})
	require.NoError(t, err)
	_, err = OpenFolder(context.Background(), notStep)
	require.ErrorContains(t, err, "not a serving step")
	require.Equal(t, search.KindInput, search.KindOf(err))
}

// TestServeAllLogitsFolder: a step compiled with every token's logits
// serves too: each sequence's token is drawn from its last token's row,
// the same as from a step with the last tokens' logits alone.
func TestServeAllLogitsFolder(t *testing.T) {
	skipLong(t)
	build := func(all bool) corpus.Options {
		return corpus.Options{MaxSeq: 32, Step: corpus.StepOptions{MaxTokens: 16, MaxSeqs: 4, BlockSize: 16, AllLogits: all}}
	}
	answers := map[bool][]string{}
	for _, all := range []bool{false, true} {
		dir, err := compileInto("testdata/tiny-llama2/config.json:step", build(all))
		require.NoError(t, err)
		eng, err := OpenFolder(context.Background(), dir)
		require.NoError(t, err)
		defer eng.Close()
		require.Equal(t, all, eng.Layout().AllLogits)
		ts := newTestServer(t, eng, Options{})
		for _, a := range ts.askAll(t, []clientRequest{{prompt: "the quick brown fox", maxTokens: 5, topP: 1}, {prompt: "seven wizards", maxTokens: 4, topP: 1, chat: true}}) {
			answers[all] = append(answers[all], a.text)
		}
	}
	require.Equal(t, answers[false], answers[true])
}
