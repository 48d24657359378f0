// Package parallel owns the one way the project splits a large range of
// work into chunks for all processors.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Chunks calls f(c, lo, hi) for every chunk c of [0, n) (chunk elements
// each, the last one shorter), on up to GOMAXPROCS goroutines taking the
// next chunk as they finish one, and returns when all are done. Which
// goroutine runs a chunk varies, so f must depend only on its arguments.
func Chunks(n, chunk int, f func(c, lo, hi int)) {
	chunks := (n + chunk - 1) / chunk
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
				f(c, c*chunk, min((c+1)*chunk, n))
			}
		})
	}
	wg.Wait()
}
