package serve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/step"
)

// fixedEngine is a step that takes a fixed time and draws ordinary text
// tokens, so that a benchmark sees the host's work alone (the step's time
// lets the clients read their streams, as a device's does).
type fixedEngine struct {
	layout step.Layout
	delay  time.Duration
	next   int64
}

func (e *fixedEngine) Layout() step.Layout { return e.layout }
func (e *fixedEngine) Device() string      { return "fixed" }
func (e *fixedEngine) Step(_ context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	time.Sleep(e.delay)
	out := make([]Token, len(draws))
	for i := range out {
		e.next = (e.next*1103515245 + 12345) & 0x7fffffff
		out[i] = Token{ID: 500 + e.next%20000, Logprob: -1}
	}
	return out, nil
}

// BenchmarkHostStep measures the host's time a step (scheduling, the
// step's metadata, sampling parameters, detokenisation, stop strings,
// streaming to the clients) with 128 and 256 sequences decoding, the device's
// time excluded (a step here sleeps 1 ms); run it with -cpu 1 for the
// one-core figure. It also
// reports the host memory a running request holds.
func BenchmarkHostStep(b *testing.B) {
	for _, running := range []int{128, 256} {
		b.Run(fmt.Sprintf("seqs=%d", running), func(b *testing.B) { benchmarkHostStep(b, running) })
	}
}

func benchmarkHostStep(b *testing.B, running int) {
	l := step.Layout{MaxTokens: 256, MaxSeqs: running, BlockSize: 16, Blocks: running * 256, BlocksPerSeq: 256, KVHeads: 8, HeadDim: 128, Layers: 32, Vocab: 32000}
	txt := llama2Text(b)
	bt, err := NewBatcher(&fixedEngine{layout: l, delay: time.Millisecond}, txt, Options{})
	require.NoError(b, err)
	defer bt.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 1))
	var wg sync.WaitGroup
	for range running {
		r := Request{MaxTokens: 4000, IgnoreEOS: true, Stop: []string{"\n\n\n\n"}}
		r.Params.TopP, r.Params.Temperature, r.Params.Seed = 0.9, 0.8, rng.Uint64()
		for range 16 {
			r.Prompt = append(r.Prompt, 500+int64(rng.IntN(20000)))
		}
		h, err := bt.Submit(ctx, r)
		require.NoError(b, err)
		wg.Go(func() {
			for {
				if _, ok := h.Next(ctx); !ok || ctx.Err() != nil {
					return
				}
			}
		})
	}
	// Let every request reach decoding.
	require.Eventually(b, func() bool { return bt.Stats().StepTokens >= running*16+running }, 10*time.Second, time.Millisecond)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	start := bt.Stats()
	if b.N > 3900 {
		b.Skip("the requests generate 4000 tokens: run at most -benchtime 3900x")
	}
	b.ResetTimer()
	for bt.Stats().Steps-start.Steps < b.N {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	end := bt.Stats()
	steps := end.Steps - start.Steps
	b.ReportMetric(float64((end.HostTime-start.HostTime).Nanoseconds())/float64(steps), "host-ns/step")
	b.ReportMetric(float64(end.StepSeqs-start.StepSeqs)/float64(steps), "seqs/step")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(running), "heap-B/request")
	cancel()
	wg.Wait()
}
