package gpu

import (
	"errors"
	"fmt"

	"github.com/lumsearch/lumsearch/cuda"
	"github.com/lumsearch/lumsearch/plan"
)

// A serving step issues hundreds of small launches (409 for llama-3-8b),
// and at a few tokens a step each kernel runs for microseconds, so the
// host's launch overhead is a large part of a decode step. A CUDA graph
// of the step's launches is launched with one call. The grid of a
// row-wise launch, and the kernel of its row bucket, follow the rows
// present, while a graph's launches are fixed; so a step keeps a graph
// per bucket of rows: the pair of the smallest cuda.RowBuckets tops that
// hold its T and S. The graph of a bucket is captured for the bucket's
// top rows (every launch as plan.Launch.For(hiT, hiS) gives it), and one
// graph serves every step of its bucket, because the kernels read T and
// S from the metadata uploaded before each replay and bound their loops
// by them: the blocks past the rows present do nothing that anyone
// reads. vLLM does the same with its CUDA graph sizes, padding a batch up
// to the next captured size.

// rowBucket is a serving step's bucket: the tops of the row buckets of
// its tokens and of its sequences.
type rowBucket struct{ T, S int64 }

// graphs is a program's graph per row bucket and what became of them.
type graphs struct {
	// stream is where runs given no stream replay, and where
	// CaptureBuckets captures.
	stream *Stream
	execs  map[rowBucket]*GraphExec
	// failed holds the buckets whose capture failed: their runs issue
	// their launches one by one, and they are not captured again (a
	// capture that failed once fails again, and costs time every step).
	failed map[rowBucket]error
	stats  GraphStats
}

// GraphStats say how a program's runs went with CUDA graphs on.
type GraphStats struct {
	// Captured is the buckets' graphs captured, Replays the runs
	// replayed as one of them, Plain the runs whose launches were issued
	// one by one because their bucket's capture failed.
	Captured, Replays, Plain int
	// Err joins the error of every capture that failed.
	Err error
}

// UseGraphs makes a serving step's runs replay a CUDA graph per row
// bucket (see [Program.RunOnDevice]) instead of issuing their launches one
// by one; runs given no stream run on stream, since the default stream
// cannot be captured (a run waits for its stream, so its caller sees no
// difference). The graph of a bucket is captured the first time a step of
// that bucket runs: capturing every pair of buckets at load costs time
// and device memory for pairs a server may never see (9 x 6 pairs at 256
// tokens and 32 sequences, each a graph of every launch); a caller that
// wants them all up front calls [Program.CaptureBuckets]. The caller
// keeps stream alive while the program runs and destroys it after; the
// graphs are destroyed by Close, or by UseGraphs(nil), which turns graphs
// off. A program that is not a serving step, or a driver without graphs,
// keeps its plain launches, and UseGraphs says why.
func (p *Program) UseGraphs(stream *Stream) error {
	if stream == nil {
		err := p.destroyGraphs()
		p.graphs = nil
		return err
	}
	if p.plan.Step == nil {
		return fmt.Errorf("graphs for %s: not a serving step; its launches stay plain", p.name)
	}
	if err := p.ctx.needGraphs("graphs for " + p.name); err != nil {
		return err
	}
	if p.graphs == nil {
		p.graphs = &graphs{execs: map[rowBucket]*GraphExec{}, failed: map[rowBucket]error{}}
	}
	p.graphs.stream = stream
	return nil
}

// Graphs says how the runs went with graphs on (zero when they are off).
func (p *Program) Graphs() GraphStats {
	if p.graphs == nil {
		return GraphStats{}
	}
	return p.graphs.stats
}

// CaptureBuckets captures, on the stream given to UseGraphs, the graph of
// every bucket a step can fall in (a bucket of sequences whose least
// count exceeds its bucket of tokens' top cannot: a sequence brings at
// least one token) that is not captured yet, so that no step pays a
// capture. A bucket that fails to capture keeps plain launches; the
// error joins the failures.
func (p *Program) CaptureBuckets() error {
	if p.graphs == nil {
		return fmt.Errorf("capture the buckets of %s: graphs are off (UseGraphs)", p.name)
	}
	if !p.prepared {
		return fmt.Errorf("capture the buckets of %s: not prepared", p.name)
	}
	var errs []error
	for _, hiT := range cuda.RowBuckets(int64(p.plan.Step.MaxTokens)) {
		lo := int64(1)
		for _, hiS := range cuda.RowBuckets(int64(p.plan.Step.MaxSeqs)) {
			if lo > hiT {
				break
			}
			if _, err := p.bucketGraph(rowBucket{hiT, hiS}, p.graphs.stream); err != nil {
				errs = append(errs, err)
			}
			lo = hiS + 1
		}
	}
	return errors.Join(errs...)
}

// bucketOf is the bucket of a step of T tokens of S sequences.
func (p *Program) bucketOf(T, S int64) rowBucket {
	top := func(n, max int64) int64 {
		for _, hi := range cuda.RowBuckets(max) {
			if n <= hi {
				return hi
			}
		}
		return max
	}
	return rowBucket{top(T, int64(p.plan.Step.MaxTokens)), top(S, int64(p.plan.Step.MaxSeqs))}
}

// runStream is the stream a run given stream goes on: the graphs' stream
// in place of the default one when graphs are on.
func (p *Program) runStream(stream *Stream) *Stream {
	if stream == nil && p.graphs != nil {
		return p.graphs.stream
	}
	return stream
}

// launchStep issues a run's launches on stream: a replay of the graph of
// the step's bucket when graphs are on (captured now if it is the
// bucket's first step), else, or when the capture fails, the launches one
// by one. A capture runs nothing, so a run after a failed one computes
// what the plain launches compute.
func (p *Program) launchStep(stream *Stream) error {
	if p.graphs == nil || p.plan.Step == nil || stream == nil {
		return p.launchRun(stream)
	}
	x, err := p.bucketGraph(p.bucketOf(p.tokens, p.seqs), stream)
	if err != nil {
		p.graphs.stats.Plain++
		return p.launchRun(stream)
	}
	if err := x.Launch(stream); err != nil {
		return fmt.Errorf("replay the graph of %d tokens of %d sequences: %w", p.tokens, p.seqs, err)
	}
	p.graphs.stats.Replays++
	return nil
}

// bucketGraph is bucket b's graph, captured on stream if it is not yet;
// the error of a bucket whose capture failed, now or before.
func (p *Program) bucketGraph(b rowBucket, stream *Stream) (*GraphExec, error) {
	g := p.graphs
	if x := g.execs[b]; x != nil {
		return x, nil
	}
	if err := g.failed[b]; err != nil {
		return nil, err
	}
	x, err := p.captureAt(stream, b.T, b.S)
	if err != nil {
		err = fmt.Errorf("the graph of up to %d tokens of %d sequences: %w", b.T, b.S, err)
		g.failed[b] = err
		g.stats.Err = errors.Join(g.stats.Err, err)
		return nil, err
	}
	g.execs[b] = x
	g.stats.Captured++
	return x, nil
}

// captureAt records the run's launches, each as it runs with T tokens of S
// sequences present, on stream as a graph and instantiates it.
func (p *Program) captureAt(stream *Stream, T, S int64) (*GraphExec, error) {
	if err := stream.BeginCapture(); err != nil {
		return nil, err
	}
	lerr := p.launchAt(p.plan.Run, stream, T, S)
	// The capture ends whether or not a launch failed, or the stream
	// stays in capture mode.
	g, err := stream.EndCapture()
	if err := errors.Join(lerr, err); err != nil {
		if g != nil {
			err = errors.Join(err, g.Destroy())
		}
		return nil, err
	}
	x, err := g.Instantiate()
	err = errors.Join(err, g.Destroy())
	if err != nil {
		if x != nil {
			err = errors.Join(err, x.Destroy())
		}
		return nil, err
	}
	return x, nil
}

// destroyGraphs destroys every bucket's graph.
func (p *Program) destroyGraphs() error {
	if p.graphs == nil {
		return nil
	}
	var errs []error
	for b, x := range p.graphs.execs {
		errs = append(errs, x.Destroy())
		delete(p.graphs.execs, b)
	}
	return errors.Join(errs...)
}

// launchAt issues launches in order, as they run with T tokens of S
// sequences present.
func (p *Program) launchAt(ls []plan.Launch, stream *Stream, T, S int64) error {
	for _, l := range ls {
		var args []any
		for _, id := range l.Params() {
			args = append(args, p.Pointer(id))
		}
		kernel, grid, block := l.For(T, S)
		if err := p.funcs[kernel].Launch(grid, block, 0, stream, args...); err != nil {
			return fmt.Errorf("launch %s (kernel %s): %w", l.Name, kernel, err)
		}
	}
	return nil
}
