package lower

import "slices"

// Alignment of every buffer in the arena, in bytes: enough for 16-byte
// vector loads and for the widest tensor-core tile loads.
const Alignment = 256

func alignUp(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }

// plan places the Temp buffers in one arena: a buffer is live from the
// launch that writes it to the last launch that reads it, and buffers live
// at the same time never overlap. Larger buffers are placed first, each at
// the lowest aligned offset clear of the live ones already placed (the
// greedy-by-size heuristic of TFLite's and XLA's planners).
func (b *builder) plan() {
	type interval struct {
		buf        int
		start, end int
	}
	first, last := map[int]int{}, map[int]int{}
	for i, l := range b.prog.Run {
		for _, o := range l.Outs {
			if _, ok := first[o]; !ok {
				first[o] = i
			}
			last[o] = max(last[o], i)
		}
		for _, a := range l.Args {
			last[a] = max(last[a], i)
		}
	}
	var live []interval
	for _, buf := range b.prog.Buffers {
		if buf.Kind != Temp {
			continue
		}
		b.prog.TempBytes += alignUp(buf.Bytes)
		s, ok := first[buf.ID]
		if !ok {
			s = 0
		}
		live = append(live, interval{buf.ID, s, max(last[buf.ID], s)})
	}
	slices.SortStableFunc(live, func(x, y interval) int {
		bx, by := b.prog.Buffers[x.buf].Bytes, b.prog.Buffers[y.buf].Bytes
		switch {
		case bx > by:
			return -1
		case bx < by:
			return 1
		}
		return x.start - y.start
	})
	var placed []interval
	for _, iv := range live {
		buf := b.prog.Buffers[iv.buf]
		// The offsets taken by placed buffers live at the same time,
		// in address order.
		type span struct{ lo, hi int64 }
		var taken []span
		for _, p := range placed {
			if p.start <= iv.end && iv.start <= p.end {
				pb := b.prog.Buffers[p.buf]
				taken = append(taken, span{pb.Offset, pb.Offset + alignUp(pb.Bytes)})
			}
		}
		slices.SortFunc(taken, func(x, y span) int {
			switch {
			case x.lo < y.lo:
				return -1
			case x.lo > y.lo:
				return 1
			}
			return 0
		})
		off := int64(0)
		for _, t := range taken {
			if off+alignUp(buf.Bytes) <= t.lo {
				break
			}
			off = max(off, t.hi)
		}
		buf.Offset = off
		b.prog.ArenaBytes = max(b.prog.ArenaBytes, off+alignUp(buf.Bytes))
		placed = append(placed, iv)
	}
}
