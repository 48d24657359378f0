package cuda

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden kernels in testdata/golden")

// TestGoldenKernels keeps the printed text of a few representative kernels
// under review: a vectorized elementwise chain, a softmax row kernel, a
// matmul with an RMS-norm prologue and the attention kernel. Change them
// with go test ./cuda -run TestGoldenKernels -update, never by hand.
func TestGoldenKernels(t *testing.T) {
	bodies := elementwiseBodies(t)
	for name, body := range matmulBodies(t) {
		bodies[name] = body
	}
	bodies["attention_prefill"] = attentionBody(t, 5, 5)
	for _, name := range []string{"silu_mul", "softmax", "residual_rms_norm", "mm_rms_prologue", "attention_prefill"} {
		t.Run(name, func(t *testing.T) {
			k, err := PrintKernel(name, "golden kernel "+name, bodies[name])
			require.NoError(t, err)
			text := Source([]*Kernel{k})
			path := filepath.Join("testdata", "golden", name+".cu")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./cuda -run TestGoldenKernels -update")
			require.Equal(t, string(want), text, "the printed kernel changed; review and run with -update")
		})
	}
}
