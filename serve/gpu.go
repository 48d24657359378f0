package serve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cuda/nvrtc"
	"github.com/lumsearch/lumsearch/gpu"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/serve/sample"
	"github.com/lumsearch/lumsearch/step"
)

// widenSource converts bf16 logits to f32 for the sampler, which reads
// f32: a bf16 is the high half of an f32, so the widening is exact.
const widenSource = `
extern "C" __global__ void lum_widen_bf16(const unsigned short* __restrict__ in, float* __restrict__ out, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = __uint_as_float(((unsigned int)in[i]) << 16);
}
`

// GPUEngine runs a compiled step folder on device 0 and draws each
// sequence's token with the sampling kernel on the same device, reading
// the logits where the step left them: only token ids and their logprobs
// come back to the host. The step's launches replay as a CUDA graph per
// row bucket, captured at open, where the driver can (GPUEngine.Graphs).
type GPUEngine struct {
	step   *search.StepGPU
	sample *gpu.Function
	widen  *gpu.Function
	module *gpu.Module
	// stream is where the step's graphs are captured and replayed (nil
	// when graphs are off); graphsErr is why they are off.
	stream    *gpu.Stream
	graphsErr error
	// Per-sequence parameters and results, at the step's most sequences;
	// wide holds the logits widened to f32 when the step's are bf16.
	temperature, topK, topP, seed, index, token, logprob, wide *gpu.Buffer
}

// OpenGPU opens a compiled step folder on device 0 (search.OpenStepGPU)
// and compiles the sampling kernel for it with NVRTC. Without a GPU or
// NVRTC it fails, naming what is missing. Logits of f32 or bf16 are
// sampled; an all-logits step is refused (its rows are the tokens', not
// the sequences'). The graphs of every row bucket are captured here, so
// that no step pays a capture; a driver without graphs, or a bucket that
// fails to capture, keeps plain launches (see Graphs), never fails the
// open.
func OpenGPU(ctx context.Context, dir string) (_ *GPUEngine, err error) {
	st, err := search.OpenStepGPU(ctx, dir)
	if err != nil {
		return nil, err
	}
	e := &GPUEngine{step: st}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	l := st.Layout()
	if l.AllLogits {
		return nil, fmt.Errorf("serve %s on a GPU: a step compiled with --all-logits is not served on a GPU yet; compile it without", dir)
	}
	lib, err := nvrtc.Load()
	if err != nil {
		return nil, fmt.Errorf("serve %s on a GPU: the sampling kernel needs NVRTC: %w", dir, err)
	}
	res, err := lib.Compile(ctx, sample.KernelSource()+widenSource, "sample.cu", nvrtc.Options{Arch: st.Context().Device().Arch()})
	if err != nil {
		return nil, fmt.Errorf("serve %s on a GPU: compile the sampling kernel: %w", dir, err)
	}
	c := st.Context()
	if e.module, err = c.LoadModule(res.CUBIN); err != nil {
		return nil, err
	}
	if e.sample, err = e.module.Function(sample.KernelName); err != nil {
		return nil, err
	}
	if e.widen, err = e.module.Function("lum_widen_bf16"); err != nil {
		return nil, err
	}
	e.useGraphs()
	S := l.MaxSeqs
	for _, b := range []struct {
		p     **gpu.Buffer
		bytes int
	}{{&e.temperature, 4 * S}, {&e.topK, 4 * S}, {&e.topP, 4 * S}, {&e.seed, 8 * S}, {&e.index, 8 * S}, {&e.token, 4 * S}, {&e.logprob, 4 * S}, {&e.wide, 4 * S * l.Vocab}} {
		if *b.p, err = c.Alloc(b.bytes); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// useGraphs turns the step's graphs on, on a stream of their own, and
// captures every bucket's; why graphs are off is kept for Graphs.
func (e *GPUEngine) useGraphs() {
	s, err := e.step.Context().NewStream(false)
	if err != nil {
		e.graphsErr = fmt.Errorf("CUDA graphs: a stream for them: %w", err)
		return
	}
	if err := e.step.UseGraphs(s); err != nil {
		e.graphsErr = errors.Join(err, s.Destroy())
		return
	}
	e.stream = s
	// A bucket that fails to capture keeps plain launches, and its error
	// is in the step's graph stats, which Graphs reports.
	_ = e.step.CaptureBuckets()
}

// Graphs says how the step's runs went with CUDA graphs: the buckets
// captured, the runs replayed and those launched one by one; Err says why
// graphs are off or which buckets failed to capture.
func (e *GPUEngine) Graphs() gpu.GraphStats {
	st := e.step.Graphs()
	st.Err = errors.Join(e.graphsErr, st.Err)
	return st
}

// Layout is what the folder's step was compiled for.
func (e *GPUEngine) Layout() step.Layout { return e.step.Layout() }

// Device names the GPU.
func (e *GPUEngine) Device() string { return e.step.Device() }

// ModelFolder is the Hugging Face folder the step was compiled from.
func (e *GPUEngine) ModelFolder() string { return e.step.ModelFolder() }

// Model is the model as plan.json names it.
func (e *GPUEngine) Model() string { return e.step.Model() }

// Step runs the batch, then the sampler over its logits on the device.
func (e *GPUEngine) Step(ctx context.Context, b *step.Batch, draws []Draw) ([]Token, error) {
	if err := checkDraws(b, draws); err != nil {
		return nil, err
	}
	logits, vt, err := e.step.Run(ctx, b)
	if err != nil {
		return nil, err
	}
	l := e.step.Layout()
	S := len(draws)
	if len(vt.Shape) != 2 || int(vt.Shape[1]) != l.Vocab || int(vt.Shape[0]) < S {
		return nil, fmt.Errorf("step: logits %v for %d sequences of a vocabulary of %d", vt.Shape, S, l.Vocab)
	}
	switch vt.DType {
	case ir.F32:
	case ir.BF16:
		n := int64(S * l.Vocab)
		if err := e.widen.Launch([3]int{int(min((n+255)/256, 4096)), 1, 1}, [3]int{256, 1, 1}, 0, nil, logits, e.wide, n); err != nil {
			return nil, fmt.Errorf("step: widen the logits: %w", err)
		}
		logits = e.wide
	default:
		return nil, fmt.Errorf("step: logits of %s; the sampler reads f32 or bf16", vt.DType)
	}
	temp, topK, topP := make([]byte, 4*S), make([]byte, 4*S), make([]byte, 4*S)
	seed, index := make([]byte, 8*S), make([]byte, 8*S)
	le := binary.LittleEndian
	for s, d := range draws {
		t, k, p := d.Params.KernelArgs(l.Vocab)
		le.PutUint32(temp[4*s:], math.Float32bits(t))
		le.PutUint32(topK[4*s:], uint32(k))
		le.PutUint32(topP[4*s:], math.Float32bits(p))
		le.PutUint64(seed[8*s:], d.Params.Seed)
		le.PutUint64(index[8*s:], d.Index)
	}
	for _, u := range []struct {
		b    *gpu.Buffer
		data []byte
	}{{e.temperature, temp}, {e.topK, topK}, {e.topP, topP}, {e.seed, seed}, {e.index, index}} {
		if err := u.b.Upload(u.data); err != nil {
			return nil, fmt.Errorf("step: sampling parameters: %w", err)
		}
	}
	if err := e.sample.Launch([3]int{S, 1, 1}, [3]int{sample.BlockThreads, 1, 1}, 0, nil,
		logits, int64(l.Vocab), int32(l.Vocab), e.temperature, e.topK, e.topP, e.seed, e.index, e.token, e.logprob); err != nil {
		return nil, fmt.Errorf("step: sampling: %w", err)
	}
	tok, lp := make([]byte, 4*S), make([]byte, 4*S)
	if err := e.token.Download(tok); err != nil {
		return nil, fmt.Errorf("step: sampled tokens: %w", err)
	}
	if err := e.logprob.Download(lp); err != nil {
		return nil, fmt.Errorf("step: sampled logprobs: %w", err)
	}
	out := make([]Token, S)
	for s := range out {
		id := int64(int32(le.Uint32(tok[4*s:])))
		if id < 0 || id >= int64(l.Vocab) {
			return nil, fmt.Errorf("step: the sampler drew id %d for sequence %d, outside the vocabulary of %d", id, s, l.Vocab)
		}
		out[s] = Token{ID: id, Logprob: float64(math.Float32frombits(le.Uint32(lp[4*s:])))}
	}
	return out, nil
}

// Close frees the sampler's buffers and module, the step's graphs and
// their stream, and closes the step.
func (e *GPUEngine) Close() error {
	var errs []error
	if e.stream != nil {
		// The graphs go before their stream, and the stream before the
		// step releases the context it lives in.
		errs = append(errs, e.step.UseGraphs(nil), e.stream.Destroy())
	}
	for _, b := range []*gpu.Buffer{e.temperature, e.topK, e.topP, e.seed, e.index, e.token, e.logprob, e.wide} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if e.module != nil {
		errs = append(errs, e.module.Unload())
	}
	return errors.Join(append(errs, e.step.Close())...)
}
