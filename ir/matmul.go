package ir

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// matmul multiplies the last two axes. The second operand is read row by
// row of its transpose; when it is a lazily transposed tensor (a model's
// [out, in] weight) those rows are its own rows, read in place, converted
// from float32 a block at a time.
func (e *evaluator) matmul() (*Tensor, *Tensor, error) {
	n := e.n
	a := e.in(0)
	bv := n.Inputs[1]
	b, bt := e.vals[bv], false
	var bm *Tensor
	if e.lazy[bv] {
		src := e.g.Nodes[bv].Inputs[0]
		b, bt = e.vals[src], true
		if e.magnitude {
			bm = e.mags[src]
		}
	} else if e.magnitude {
		bm = e.mags[bv]
	}
	r := len(n.Shape)
	M, N := int(n.Shape[r-2]), int(n.Shape[r-1])
	K := int(a.Shape[r-1])
	batch := int(n.Shape[:r-2].NumElements())
	v, m := e.out()
	mm := matmulJob{batch: batch, M: M, N: N, K: K}
	mm.run(a.Float64s(), b, bt, v.F64, false, false)
	if m != nil {
		// |A|·mag(B) + mag(A)·|B|: each product's terms, to first order.
		absA := make([]float64, a.Len())
		for i := range absA {
			absA[i] = math.Abs(a.At(int64(i)))
		}
		mm.run(absA, bm, bt, m.F64, false, false)
		mm.run(e.mag(0).F64, b, bt, m.F64, true, true)
	}
	return v, m, nil
}

type matmulJob struct{ batch, M, N, K int }

// run computes C = A·B (or C += A·B when accumulate) for every batch,
// splitting output columns among the processors. B is [batch, K, N], or
// [batch, N, K] when bt; absB reads B's elements as absolute values.
func (mm matmulJob) run(A []float64, B *Tensor, bt bool, C []float64, accumulate, absB bool) {
	const jb = 16 // B^T rows per block: 16 rows of K float64 stay in cache
	blocks := mm.batch * ((mm.N + jb - 1) / jb)
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), blocks)
	var bT []float64
	if !bt {
		// Transpose once so that the kernel reads rows of B^T either way.
		bT = make([]float64, mm.batch*mm.N*mm.K)
		for s := range mm.batch {
			for k := range mm.K {
				for j := range mm.N {
					bT[(s*mm.N+j)*mm.K+k] = B.At(int64((s*mm.K+k)*mm.N + j))
				}
			}
		}
	}
	for range workers {
		wg.Go(func() {
			rows := make([]float64, jb*mm.K)
			for {
				blk := int(next.Add(1) - 1)
				if blk >= blocks {
					return
				}
				perBatch := (mm.N + jb - 1) / jb
				s, j0 := blk/perBatch, (blk%perBatch)*jb
				j1 := min(j0+jb, mm.N)
				for j := j0; j < j1; j++ {
					dst := rows[(j-j0)*mm.K : (j-j0+1)*mm.K]
					off := (s*mm.N + j) * mm.K
					switch {
					case !bt:
						copy(dst, bT[off:off+mm.K])
					case B.F32 != nil:
						for k, x := range B.F32[off : off+mm.K] {
							dst[k] = float64(x)
						}
					default:
						copy(dst, B.F64[off:off+mm.K])
					}
					if absB {
						for k := range dst {
							dst[k] = math.Abs(dst[k])
						}
					}
				}
				for i := range mm.M {
					arow := A[(s*mm.M+i)*mm.K : (s*mm.M+i+1)*mm.K]
					crow := C[(s*mm.M+i)*mm.N : (s*mm.M+i+1)*mm.N]
					for j := j0; j < j1; j++ {
						d := dot(arow, rows[(j-j0)*mm.K:(j-j0+1)*mm.K])
						if accumulate {
							crow[j] += d
						} else {
							crow[j] = d
						}
					}
				}
			}
		})
	}
	wg.Wait()
}

// dot is the float64 dot product with four independent sums, which keeps
// the floating-point pipeline busy.
func dot(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+4 <= len(a); k += 4 {
		s0 += a[k] * b[k]
		s1 += a[k+1] * b[k+1]
		s2 += a[k+2] * b[k+2]
		s3 += a[k+3] * b[k+3]
	}
	for ; k < len(a); k++ {
		s0 += a[k] * b[k]
	}
	return (s0 + s1) + (s2 + s3)
}
