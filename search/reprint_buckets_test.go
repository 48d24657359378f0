package search

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/cuda"
)

// TestReprintBuckets: a folder's row buckets are printed again from the
// plan (each bucket kernel from its launch's body at its rows and its
// schedule), the same kernels picked at every row count as the compiled
// program's; a bucket kernel edited in kernels.cu is refused, naming it.
func TestReprintBuckets(t *testing.T) {
	// A whole step compile for a text check: 30 s of the search
	// package's -short time under the race detector, which has no
	// concurrency here to watch.
	skipLong(t)
	// Reprinting compares texts; NVRTC (most of this test's time) is
	// the paged step's own test's to check.
	withoutNVRTC(t)
	opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 16, MaxSeqs: 4, BlockSize: 4, KVBlocks: 24}}
	m, err := LoadModel("tiny-llama:step", ModelOptions{Build: opt})
	require.NoError(t, err)
	defer m.Close()
	res, err := Compile(context.Background(), m, Options{NoVerify: true, Target: "h100", TuneDB: filepath.Join(t.TempDir(), "tunedb.jsonl")})
	require.NoError(t, err)
	c, src := res.final.compiled, res.final.src
	ks, err := reprint(res.Plan, c.lowered, src, "kernels.cu")
	require.NoError(t, err)
	require.Greater(t, len(cuda.WithBuckets(ks)), len(cuda.Distinct(ks)), "the program has bucket kernels")
	assert.Len(t, cuda.WithBuckets(ks), len(cuda.WithBuckets(c.kernels)))
	for i, l := range c.lowered.Run {
		if l.Rows == nil {
			continue
		}
		want, got := c.kernels[len(c.lowered.Prep)+i], ks[len(c.lowered.Prep)+i]
		for n := int64(1); n <= l.Rows.Max; n++ {
			assert.Equal(t, want.ForRows(n).Name, got.ForRows(n).Name, "%s at %d rows", l.Name, n)
			name := want.ForRows(n).Name
			assert.Equal(t, kernelCode(want.ForRows(n).Text, name), kernelCode(got.ForRows(n).Text, name), "%s at %d rows", l.Name, n)
		}
	}
	name := regexp.MustCompile(`void (k\d+_r\d+)\(`).FindStringSubmatch(src)
	require.NotNil(t, name, "a bucket kernel in the source")
	code := kernelCode(src, name[1])
	edited := strings.Replace(src, code, strings.Replace(code, ") {\n", ") {\n  int lum_edited = 0;\n", 1), 1)
	require.NotEqual(t, src, edited)
	_, err = reprint(res.Plan, c.lowered, edited, "kernels.cu")
	assert.ErrorContains(t, err, "kernel "+name[1]+" in kernels.cu is not what its body at")
}
