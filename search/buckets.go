package search

import (
	"fmt"
	"strings"

	"github.com/lumsearch/lumsearch/cost"
	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/report"
)

// bucketTimes prices the program's run at each bucket of each of its
// symbols (the others as the search priced them) and gives g's hardware
// floor there: the work of attention over a KV cache follows the
// position, the rest does not.
func bucketTimes(g *ir.Graph, c *compiled, m *cost.Model) ([]report.BucketTime, error) {
	lp := c.lowered
	var out []report.BucketTime
	for _, s := range lp.Symbols {
		for _, b := range s.Buckets() {
			mb := m.AtPosition(b)
			total := 0.0
			for i, l := range lp.Run {
				k := c.kernels[len(lp.Prep)+i]
				r, err := mb.Ranked(l.Body)
				if err != nil {
					return nil, fmt.Errorf("price %s at %s=%d: %w", l.Name, s.Name, b, err)
				}
				est := r[0]
				for _, e := range r {
					if e.Schedule.String() == k.Schedule.String() {
						est = e
						break
					}
				}
				total += est.Seconds
			}
			floor := programFloor(g, m.Device, map[string]int64{s.Name: b}).Hardware
			out = append(out, report.BucketTime{Symbol: s.Name, Value: b, Predicted: total, Floor: floor})
		}
	}
	return out, nil
}

// bucketText prints bucket times as "past=0: 41.2 µs (1.9x the floor),
// past=1: ...".
func bucketText(bs []report.BucketTime) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%s=%d: %s", b.Symbol, b.Value, Seconds(b.Predicted))
		if b.Floor > 0 {
			parts[i] += fmt.Sprintf(" (%.2fx the floor)", b.Predicted/b.Floor)
		}
	}
	return strings.Join(parts, ", ")
}
