package serve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/internal/fakecuda"
	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// TestGPUEngineOnFakeDriver opens the compiled tiny step on the fake
// driver (which runs nothing): the folder's module and the sampling
// kernel load, a step launches the program and then the sampler, one
// block of sample.BlockThreads a sequence, and only the tokens come back;
// a bad batch touches nothing; closing frees every allocation.
func TestGPUEngineOnFakeDriver(t *testing.T) {
	if _, err := nvrtc.Load(); err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir, err := tinyFolder()
	require.NoError(t, err)
	f := fakecuda.Build(t)
	eng, err := OpenGPU(context.Background(), dir)
	require.NoError(t, err)
	require.Equal(t, "Fake GPU", eng.Device())
	l := eng.Layout()
	rng := rand.New(rand.NewPCG(5, 5))
	b, err := l.Arrange(rng, []step.SeqShape{{Context: 0, Tokens: 5}, {Context: 3, Tokens: 1}, {Context: 9, Tokens: 1}})
	require.NoError(t, err)
	draws := []Draw{{Params: sample.Params{TopP: 1}}, {Params: sample.Params{Temperature: 0.7, TopK: 5, TopP: 0.9, Seed: 3}, Index: 4}, {Params: sample.Params{TopP: 1}, Index: 1}}

	bad := *b
	bad.SlotMapping = append([]int32{int32(l.Slots())}, b.SlotMapping[1:]...)
	f.Set("reset", 1)
	_, err = eng.Step(context.Background(), &bad, draws)
	require.ErrorContains(t, err, "slot_mapping")
	require.Empty(t, f.Log(), "a refused step touches the device")

	f.Set("reset", 1)
	toks, err := eng.Step(context.Background(), b, draws)
	require.NoError(t, err)
	require.Len(t, toks, 3)
	var launches []string
	for _, line := range strings.Split(f.Log(), "\n") {
		if strings.HasPrefix(line, "launch ") {
			launches = append(launches, line)
		}
	}
	require.NotEmpty(t, launches)
	require.Contains(t, launches[len(launches)-1], fmt.Sprintf("grid=3,1,1 block=%d,1,1", sample.BlockThreads), "the sampler runs last, a block a sequence")
	require.Equal(t, 1, strings.Count(f.Log(), "graph launch "), "the step replays its bucket's graph")
	st := eng.Graphs()
	require.NoError(t, st.Err)
	require.Positive(t, st.Captured, "the buckets' graphs captured at open")
	require.Equal(t, 1, st.Replays)
	require.Zero(t, st.Plain)
	require.NoError(t, eng.Close())
	require.Zero(t, f.Allocs(), "allocations outstanding")
	require.Zero(t, f.Graphs(), "graphs outstanding")
}

// TestGPUEngineCaptureFails: when the driver fails every capture, the
// engine still opens and steps, its program's launches issued one by one,
// and Graphs says why.
func TestGPUEngineCaptureFails(t *testing.T) {
	if _, err := nvrtc.Load(); err != nil {
		if os.Getenv("LUMSEARCH_REQUIRE_NVRTC") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir, err := tinyFolder()
	require.NoError(t, err)
	f := fakecuda.Build(t)
	f.Set("fail_capture", 1)
	eng, err := OpenGPU(context.Background(), dir)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, eng.Close())
		require.Zero(t, f.Allocs(), "allocations outstanding")
		require.Zero(t, f.Graphs(), "graphs outstanding")
	}()
	b, err := eng.Layout().Arrange(rand.New(rand.NewPCG(6, 6)), []step.SeqShape{{Context: 2, Tokens: 1}})
	require.NoError(t, err)
	f.Set("reset", 1)
	_, err = eng.Step(context.Background(), b, []Draw{{Params: sample.Params{TopP: 1}}})
	require.NoError(t, err)
	require.NotContains(t, f.Log(), "graph launch")
	require.Greater(t, strings.Count(f.Log(), "launch grid="), 1, "the step's launches one by one, then the sampler")
	st := eng.Graphs()
	require.ErrorContains(t, st.Err, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
	require.Zero(t, st.Captured)
	require.Equal(t, 1, st.Plain)
}
