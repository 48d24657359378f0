package lower

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/corpus"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/rules"
)

// firstRows is t's first n rows when its rows are its outermost axis but
// for axes of 1 (Leading): a prefix of its elements.
func firstRows(t *testing.T, x *ir.Tensor, max, n int64) *ir.Tensor {
	t.Helper()
	perRow, ok := Leading(x.Shape, max)
	require.True(t, ok, "a %v tensor without %d leading rows", x.Shape, max)
	shape := x.Shape.Clone()
	for d := range shape {
		if shape[d] != 1 {
			shape[d] = ir.Dim(n)
			break
		}
	}
	out := ir.NewTensor(x.DType, shape)
	for i := range n * perRow {
		if x.DType.IsInt() {
			out.SetInt(i, x.Int(i))
		} else {
			out.Set(i, x.At(i))
		}
	}
	return out
}

// TestBodyAtRows: every row-wise launch of lowered serving steps (naive
// and fused; tokens and the sequences' LM head) is written for fewer
// rows, and the body at n rows computes exactly the first n rows of what
// the body at the maximum computes from the same inputs' first n rows. A
// launch without rows, or a row count outside 1..max, is an error.
func TestBodyAtRows(t *testing.T) {
	tests := []struct {
		model string
		fused bool
	}{
		{"tiny-llama", false},
		{"tiny-llama", true},
		{"tiny-gpt2", false},
		{"tiny-qwen2", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/fused=%t", tt.model, tt.fused), func(t *testing.T) {
			opt := corpus.Options{Seq: 16, Step: corpus.StepOptions{MaxTokens: 10, MaxSeqs: 4, BlockSize: 4, KVBlocks: 20}}
			g, err := corpus.Build(tt.model+":step", opt)
			require.NoError(t, err)
			var lp *Program
			if tt.fused {
				prog, err := rules.SaturateModel(context.Background(), g, allRewrites(t), rules.SaturateOptions{IterLimit: shortIters(6), NodeLimit: 40_000})
				require.NoError(t, err)
				lp, err = FromExtraction(prog.EGraph, g, prog.Classes, prog.Problem, prog.Solution)
				require.NoError(t, err)
			} else {
				lp = lowerNaive(t, g, true)
			}
			rowWise, seqs, refused := 0, 0, 0
			for li, l := range lp.Run {
				if l.Rows == nil {
					_, err := l.BodyAtRows(1)
					assert.ErrorContains(t, err, "does not follow the rows present")
					continue
				}
				rowWise++
				if l.Rows.Seqs {
					seqs++
				}
				for _, bad := range []int64{0, l.Rows.Max + 1} {
					_, err := l.BodyAtRows(bad)
					assert.ErrorContains(t, err, "outside 1..", "%s at %d rows", l.Name, bad)
				}
				// Paged attention reads metadata that random feeds
				// do not make consistent: the emulation's step tests
				// run its buckets' kernels on real batches.
				paged := slices.ContainsFunc(l.Body.Nodes, func(n *ir.Node) bool { return n.Op == ir.OpPagedAttention })
				full, err := ir.RandomFeeds(l.Body, uint64(li+1), ir.Typical)
				require.NoError(t, err)
				var want *ir.Result
				if !paged {
					want, err = ir.Eval(context.Background(), l.Body, full, ir.EvalOptions{})
					require.NoError(t, err, l.Body.String())
				}
				for _, n := range []int64{1, 3, l.Rows.Max - 1} {
					small, err := l.BodyAtRows(n)
					if l.Rows.Seqs && err != nil && slices.ContainsFunc(l.Body.Nodes, func(n *ir.Node) bool { return n.Op == ir.OpGather }) {
						// The gather of each sequence's last token
						// computes its indices from query_start: not
						// written for fewer rows (its kernel serves
						// every count), and said so.
						assert.ErrorContains(t, err, "without its rows on axis")
						refused++
						break
					}
					require.NoError(t, err, "%s at %d rows:\n%s", l.Name, n, l.Body)
					require.NoError(t, small.Check())
					if paged {
						continue
					}
					feeds := map[string]*ir.Tensor{}
					for j, v := range l.Body.Inputs() {
						name := l.Body.Node(v).Name
						feeds[name] = full[name]
						if sv := small.Inputs()[j]; !small.Node(sv).Shape.Equal(l.Body.Node(v).Shape) {
							feeds[name] = firstRows(t, full[name], l.Rows.Max, n)
						}
					}
					got, err := ir.Eval(context.Background(), small, feeds, ir.EvalOptions{})
					require.NoError(t, err)
					for j, o := range l.Body.Outputs {
						w := firstRows(t, want.Outputs[o.Name], l.Rows.Max, n)
						g := got.Outputs[small.Outputs[j].Name]
						require.True(t, w.Shape.Equal(g.Shape), "%s output %d at %d rows: %v, want %v", l.Name, j, n, g.Shape, w.Shape)
						// The same arithmetic on the same rows, up to
						// the rounding of an f32 result (the
						// interpreter may keep a value wider).
						ws, gs := w.Float64s(), g.Float64s()
						for e := range ws {
							require.InDelta(t, ws[e], gs[e], 1e-6*(1+math.Abs(ws[e])), "%s output %d at %d rows, element %d", l.Name, j, n, e)
						}
					}
				}
			}
			t.Logf("%d row-wise launches (%d of sequences) of %d; %d not written for fewer rows", rowWise, seqs, len(lp.Run), refused)
			assert.LessOrEqual(t, refused, 1, "at most the last-token gather")
			assert.Greater(t, rowWise, len(lp.Run)/2)
			assert.Positive(t, seqs, "the LM head works on the sequences")
			assert.True(t, slices.ContainsFunc(lp.Run, func(l *Launch) bool { return l.Rows != nil && l.Rows.Seqs }))
		})
	}
}

// TestBodyAtRowsRefusesABroadcastReadAlongTheRows: a constant expanded to
// the rows' extent to meet them, and also summed along the rows, cannot
// follow the rows (the sum would see fewer): the body is refused, saying
// why, rather than written to compute something else.
func TestBodyAtRowsRefusesABroadcastReadAlongTheRows(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"summed along the rows", `graph kernel
%0 = input "$0" f32[8,4]
%1 = const f32[] {2}
%2 = reshape %1 to=[1,1] : f32[1,1]
%3 = expand %2 to=[8,4] : f32[8,4]
%4 = mul %0, %3 : f32[8,4]
%5 = sum %3 axis=0 : f32[1,4]
%6 = expand %5 to=[8,4] : f32[8,4]
%7 = add %4, %6 : f32[8,4]
output "out0" = %7
`, "is read by sum"},
		{"followed alone", `graph kernel
%0 = input "$0" f32[8,4]
%1 = const f32[] {2}
%2 = reshape %1 to=[1,1] : f32[1,1]
%3 = expand %2 to=[8,4] : f32[8,4]
%4 = mul %0, %3 : f32[8,4]
output "out0" = %4
`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := ir.Parse(tc.src)
			require.NoError(t, err)
			l := &Launch{Name: "k0", Body: body, Rows: &Rows{Max: 8, Axis: 0, Args: []int{1, 2}, In: []int{0}}}
			small, err := l.BodyAtRows(3)
			if tc.want != "" {
				assert.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, ir.Shape{3, 4}, small.Node(small.Outputs[0].Value).Shape)
		})
	}
}
