package serve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// llama2Text is the Llama 2 tokenizer from the shared data.
func llama2Text(t testing.TB) *Text {
	t.Helper()
	return sharedText(t, TextOptions{Tokenizer: llama2Path(t)}, 32000)
}

// textKey is what a LoadText call reads.
type textKey struct {
	o     TextOptions
	vocab int
}

// texts holds LoadText's results by what they read (*textEntry by
// textKey): the Llama 2 tokenizer takes a second and a half to load under
// the race detector and most tests serve with it. A Text is only read once
// loaded, by any number of batchers.
var texts sync.Map

type textEntry struct {
	once sync.Once
	txt  *Text
	err  error
}

// sharedText is LoadText(o, vocab), loaded once per test binary.
func sharedText(t testing.TB, o TextOptions, vocab int) *Text {
	t.Helper()
	v, _ := texts.LoadOrStore(textKey{o, vocab}, &textEntry{})
	e := v.(*textEntry)
	e.once.Do(func() { e.txt, e.err = LoadText(o, vocab) })
	require.NoError(t, e.err)
	return e.txt
}

// llama2Path is the Llama 2 tokenizer.json of the shared data.
func llama2Path(t testing.TB) string {
	return filepath.Join(shareddata.Dir(t), "tokenizers", "llama2", "tokenizer.json")
}

// simLayout is a simulated step's layout with the Llama 2 vocabulary.
func simLayout(blocks int) step.Layout {
	return step.Layout{MaxTokens: 64, MaxSeqs: 16, BlockSize: 4, Blocks: blocks, BlocksPerSeq: 16, KVHeads: 1, HeadDim: 1, Layers: 1, Vocab: 32000}
}

func newSimBatcher(t testing.TB, l step.Layout, delay time.Duration) (*Batcher, *SimulatedEngine) {
	t.Helper()
	eng, err := NewSimulatedEngine(l, delay)
	require.NoError(t, err)
	b, err := NewBatcher(eng, llama2Text(t), Options{})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, eng
}

// collect reads a request to its end.
func collect(t testing.TB, h *Handle) (string, []int64, string) {
	t.Helper()
	text, finish := "", ""
	var ids []int64
	for {
		out, ok := h.Next(context.Background())
		if !ok {
			return text, ids, finish
		}
		require.NoError(t, out.Err)
		text += out.Text
		for _, tok := range out.Tokens {
			ids = append(ids, tok.ID)
		}
		if out.Finish != "" {
			finish = out.Finish
		}
	}
}

// drawRequests draws n requests with prompts of random lengths, some
// greedy and some sampled with seeds.
func drawRequests(rng *rand.Rand, n, maxPrompt, maxOut int) []Request {
	var rs []Request
	for range n {
		r := Request{MaxTokens: 1 + rng.IntN(maxOut), IgnoreEOS: true, Params: sample.Params{TopP: 1}}
		for range 1 + rng.IntN(maxPrompt) {
			r.Prompt = append(r.Prompt, 3+int64(rng.IntN(31990)))
		}
		if rng.IntN(2) == 0 {
			r.Params = sample.Params{Temperature: 0.5 + rng.Float64(), TopK: rng.IntN(50), TopP: 0.5 + rng.Float64()/2, Seed: rng.Uint64()}
		}
		rs = append(rs, r)
	}
	return rs
}

// serveAll submits every request at once and returns their token ids.
func serveAll(t testing.TB, b *Batcher, rs []Request) [][]int64 {
	t.Helper()
	out := make([][]int64, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		h, err := b.Submit(context.Background(), r)
		require.NoError(t, err)
		wg.Go(func() {
			_, out[i], _ = collect(t, h)
		})
	}
	wg.Wait()
	return out
}

// TestBatchedEqualsAlone: requests served together, greedy and seeded,
// give the tokens each gives alone, also from a pool so small that the
// scheduler preempts; the steps carry many sequences at once.
func TestBatchedEqualsAlone(t *testing.T) {
	skipLong(t) // TestConcurrentClientsOverSimulatedStep checks the same through HTTP
	rng := rand.New(rand.NewPCG(3, 4))
	rs := drawRequests(rng, 24, 40, 20)
	alone, _ := newSimBatcher(t, simLayout(256), 0)
	want := make([][]int64, len(rs))
	for i, r := range rs {
		want[i] = serveAll(t, alone, []Request{r})[0]
		require.Len(t, want[i], r.MaxTokens)
	}
	batched, eng := newSimBatcher(t, simLayout(256), time.Millisecond)
	require.Equal(t, want, serveAll(t, batched, rs))
	st := batched.Stats()
	require.GreaterOrEqual(t, float64(st.StepSeqs)/float64(st.Steps), 8.0, "mean sequences a step")
	steps, seqs, _ := eng.Counts()
	require.Equal(t, steps, st.Steps)
	require.Equal(t, seqs, st.StepSeqs)

	tight, _ := newSimBatcher(t, simLayout(16), 0)
	require.Equal(t, want, serveAll(t, tight, rs))
	require.Positive(t, tight.Stats().Preemptions, "the small pool preempted nothing")
	require.Zero(t, tight.sched.Blocks().Used())
}

// TestCancelFreesBlocks: a client that goes away has its request
// aborted and its blocks freed.
func TestCancelFreesBlocks(t *testing.T) {
	b, _ := newSimBatcher(t, simLayout(64), 2*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := b.Submit(ctx, Request{Prompt: []int64{5, 6, 7}, MaxTokens: 40, IgnoreEOS: true, Params: sample.Params{TopP: 1}})
	require.NoError(t, err)
	out, ok := h.Next(context.Background())
	require.True(t, ok)
	require.NotEmpty(t, out.Tokens)
	cancel()
	require.Eventually(t, func() bool { return b.Pending() == 0 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return metricValue(t, b, "lumsearch_kv_blocks_used") == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 64.0, metricValue(t, b, "lumsearch_kv_blocks_free"))
}

// TestStopsAndLengths: max_tokens, the model's longest sequence and stop
// strings end a generation with the right reason and text.
func TestStopsAndLengths(t *testing.T) {
	b, _ := newSimBatcher(t, simLayout(64), 0)
	r := Request{Prompt: []int64{1, 450, 4996}, MaxTokens: 12, IgnoreEOS: true, Params: sample.Params{TopP: 1}}
	h, err := b.Submit(context.Background(), r)
	require.NoError(t, err)
	text, ids, finish := collect(t, h)
	require.Equal(t, "length", finish)
	require.Len(t, ids, 12)
	whole, err := b.Text().Tokenizer.Decode(toInts(ids), true)
	require.NoError(t, err)
	require.Equal(t, whole, text, "streamed text is the decoded whole")
	if len(text) > 4 {
		stop := text[2:4]
		r.Stop = []string{stop}
		h, err = b.Submit(context.Background(), r)
		require.NoError(t, err)
		got, _, finish := collect(t, h)
		require.Equal(t, "stop", finish)
		require.Equal(t, text[:2], got[:min(len(got), 2)])
		require.NotContains(t, got, stop)
	}
	_, err = b.Submit(context.Background(), Request{Prompt: make([]int64, 60), MaxTokens: 10, Params: sample.Params{TopP: 1}})
	require.ErrorContains(t, err, "exceed the 64 positions")
	_, err = b.Submit(context.Background(), Request{Prompt: []int64{32000}, MaxTokens: 1, Params: sample.Params{TopP: 1}})
	require.ErrorContains(t, err, "outside the vocabulary")
}

func toInts(ids []int64) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}

// metricValue reads a gauge or counter from the batcher's registry.
func metricValue(t testing.TB, b *Batcher, name string) float64 {
	t.Helper()
	mfs, err := b.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			}
		}
		return sum
	}
	require.Fail(t, fmt.Sprintf("no metric %s", name))
	return 0
}
