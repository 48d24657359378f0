package search

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/internal/outdir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/rules"
	"github.com/lumsearch/lumsearch/safetensors"
)

// TestWritePreparedWeights writes the prepared weights of compiled tiny
// models and reads them back: the tensors are lower.PrepareWeights's, the
// metadata names lumsearch's version, the model and the program digest; a
// missing weight is an error naming it, and leaves no file.
func TestWritePreparedWeights(t *testing.T) {
	ctx := context.Background()
	// Under -short the search stops after 3 iterations: both programs are
	// byte for byte those of 6, which take three times as long (GPT-2's
	// whole model, 19 s under the race detector).
	iters := 6
	if testing.Short() {
		iters = 3
	}
	for i, model := range []string{"tiny-gpt2:model", "tiny-llama:layer"} {
		t.Run(model, func(t *testing.T) {
			g, err := corpus.Build(model, corpus.Options{Seq: 4, Past: 2})
			require.NoError(t, err)
			c, err := pipeline(ctx, g, rules.SaturateOptions{IterLimit: iters, NodeLimit: 40_000}, nil)
			require.NoError(t, err)
			weights, err := corpus.RandomWeights(g, uint64(i+1))
			require.NoError(t, err)

			dir := filepath.Join(t.TempDir(), "out")
			var out bytes.Buffer
			require.NoError(t, outdir.Replace(dir, outdir.Options{}, func(s *outdir.Stage) error {
				return writePreparedWeights(ctx, model, s, c.lowered, weights, &out)
			}))
			path := filepath.Join(dir, WeightsFile)
			assert.Regexp(t, `^  prepared weights: \d+ weights and \d+ computed at load, \d+ bytes, in `+regexp.QuoteMeta(WeightsFile)+` \(lum_load_prepared loads them\)\n$`, out.String())

			got, meta, err := safetensors.ReadFile(path)
			require.NoError(t, err)
			digest, err := lower.WeightsDigest(c.lowered)
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"lumsearch.version": Version(), "lumsearch.model": g.Name, "lumsearch.program": digest}, meta)
			want, err := lower.PrepareWeights(ctx, c.lowered, weights)
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for name, w := range want {
				gt := got[name]
				require.NotNil(t, gt, name)
				require.Equal(t, w.DType, gt.DType, name)
				require.True(t, w.Shape.Equal(gt.Shape), name)
				for k := range w.Len() {
					if x, y := w.At(k), gt.At(k); x != y && !(math.IsNaN(x) && math.IsNaN(y)) {
						require.Failf(t, "values differ", "%s[%d]: %v, want %v", name, k, y, x)
					}
				}
			}

			stored, err := lower.StoredBuffers(c.lowered)
			require.NoError(t, err)
			var missing string
			for _, b := range stored {
				if b.Kind == lower.Weight {
					missing = b.Name
					break
				}
			}
			require.NotEmpty(t, missing)
			delete(weights, missing)
			empty := filepath.Join(t.TempDir(), "out")
			err = outdir.Replace(empty, outdir.Options{}, func(s *outdir.Stage) error {
				return writePreparedWeights(ctx, model, s, c.lowered, weights, &out)
			})
			require.ErrorContains(t, err, "weight "+missing+" ")
			require.ErrorContains(t, err, "is missing")
			entries, err := os.ReadDir(filepath.Dir(empty))
			require.NoError(t, err)
			assert.Empty(t, entries, "a failed write leaves nothing")
		})
	}
}
