package search

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/ir"
)

// TestStepBucketsLlama3 compiles llama-3-8b's bf16 serving step for an
// h100 (1024 tokens, 128 sequences, 2048 positions; the long command
// only) and checks its row buckets: every bucket keeps the schedule the
// cost model ranks best over its rows, or a higher bucket's kernel within
// cuda.ShareTolerance of it; the projections keep different schedules for
// few tokens and for many; and the predicted step at every bucket of
// tokens and the mixed step is no faster than its floor. It logs the
// figures the closing note quotes.
func TestStepBucketsLlama3(t *testing.T) {
	skipLong(t)
	opt := corpus.Options{Seq: 2048, DType: ir.BF16, Step: corpus.StepOptions{MaxTokens: 1024, MaxSeqs: 128, KVBlocks: 128 * 2048 / 16}}
	m, err := LoadModel("llama-3-8b:step", ModelOptions{Build: opt})
	require.NoError(t, err)
	defer m.Close()
	res, err := Compile(context.Background(), m, Options{NoVerify: true, Target: "h100", TuneDB: filepath.Join(t.TempDir(), "tunedb.jsonl")})
	require.NoError(t, err)
	c, cm := res.final.compiled, res.src.m
	lp := c.lowered

	seen := map[*cuda.Kernel]bool{}
	varied := 0
	for i, l := range lp.Run {
		k := c.kernels[len(lp.Prep)+i]
		if seen[k] || len(k.Buckets) == 0 {
			continue
		}
		seen[k] = true
		schedules := map[string]bool{}
		for _, b := range k.Buckets {
			body := l.Body
			if b.Hi < l.Rows.Max {
				body, err = l.BodyAtRows(b.Hi)
				require.NoError(t, err)
			}
			ranked, err := cm.Ranked(body)
			require.NoError(t, err)
			if kept := b.Kernel.Schedule.String(); kept != ranked[0].Schedule.String() {
				assert.LessOrEqual(t, b.Estimate.Seconds, ranked[0].Seconds*(1+cuda.ShareTolerance)*(1+1e-9), "%s at %d rows keeps %s", k.Name, b.Hi, kept)
			}
			schedules[b.Kernel.Schedule.String()] = true
		}
		if l.Form.String() == "matmul" && len(schedules) > 1 {
			varied++
		}
		t.Logf("%s (%s): %d schedules over %d buckets", k.Name, l.Form, len(schedules), len(k.Buckets))
	}
	assert.GreaterOrEqual(t, varied, 2, "projections keep different schedules for few tokens and many")

	bs, err := stepBucketTimes(m.Graph, c, cm, 1024)
	require.NoError(t, err)
	for _, b := range bs {
		assert.GreaterOrEqual(t, b.Predicted, b.Floor, "%s=%d", b.Symbol, b.Value)
		t.Logf("%s=%d: %.3f ms, floor %.3f ms (%.2fx)", b.Symbol, b.Value, b.Predicted*1e3, b.Floor*1e3, b.Predicted/b.Floor)
		if b.Symbol == "tokens" && b.Value <= 128 {
			t.Logf("  %d decoding sequences: %.0f output tokens/s", b.Value, float64(b.Value)/b.Predicted)
		}
	}
}
