package extract

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
)

// FasterGreedyOptions name a problem's nodes and classes as its file
// does, for FasterGreedyDAG's tie-breaks (nil: by index).
type FasterGreedyOptions struct {
	NodeName  func(n int32) string
	ClassName func(c int32) string
}

// FasterGreedyDAG is extraction-gym's "faster greedy DAG" extractor
// (src/extract/faster_greedy_dag.rs), as its source states it, so that
// its published costs can be reproduced and GreedyDAG is never worse
// than it:
//
//   - every class keeps a cost set: the classes its choice needs, each
//     with the cost of its node at the time the set was built, and their
//     total;
//   - nodes wait in a priority queue ordered by their own cost, then by
//     node name, a node queued once at a time; leaves start it;
//   - a popped node's set is the union of its children's sets (the
//     largest child's copied first, the others' entries written over it
//     in class-name order), plus its own class at its own cost; a node
//     that reads its own class, whose children's sets hold its class, or
//     whose only child class already costs more than the class's current
//     total, is priced +Inf;
//   - a set cheaper than its class's replaces it, and the class's
//     parents whose children all have sets are queued.
//
// The choices are each class's node of its last set, pruned to the
// classes the roots need. They can form a cycle (a class's set is built
// from its children's sets at one time, their choices change later): that
// is an error, as its DAG cost is then undefined.
func FasterGreedyDAG(ctx context.Context, p *Problem, opt FasterGreedyOptions) (*Solution, float64, error) {
	if err := checkRoots(p); err != nil {
		return nil, 0, err
	}
	nodeName, className := opt.NodeName, opt.ClassName
	l := newRevLinks(p)
	nc := p.NumClasses()
	type costSet struct {
		costs  map[int32]float64
		total  float64
		choice int32
	}
	sets := make([]*costSet, nc)
	// Children's distinct classes, sorted as the reference sorts its
	// class ids.
	kidsOf := func(n int32) []int32 {
		k := slices.Clone(p.Nodes[n].Children)
		slices.SortFunc(k, func(a, b int32) int {
			if className != nil {
				return cmp.Or(cmp.Compare(className(a), className(b)), cmp.Compare(a, b))
			}
			return cmp.Compare(a, b)
		})
		return slices.Compact(k)
	}
	price := func(n int32, best float64) *costSet {
		nd := &p.Nodes[n]
		cid := nd.Class
		if len(nd.Children) == 0 {
			return &costSet{costs: map[int32]float64{cid: nd.Cost}, total: nd.Cost, choice: n}
		}
		kids := kidsOf(n)
		if slices.Contains(kids, cid) || len(kids) == 1 && nd.Cost+sets[kids[0]].total > best {
			return &costSet{total: infCost, choice: n}
		}
		biggest := kids[0]
		for _, k := range kids {
			if len(sets[k].costs) >= len(sets[biggest].costs) {
				biggest = k // the last of the largest, as Rust's max_by_key
			}
		}
		result := make(map[int32]float64, len(sets[biggest].costs)+1)
		for k, v := range sets[biggest].costs {
			result[k] = v
		}
		for _, k := range kids {
			if k == biggest {
				continue
			}
			for c, v := range sets[k].costs {
				result[c] = v
			}
		}
		_, contains := result[cid]
		result[cid] = nd.Cost
		total := infCost
		if !contains {
			keys := make([]int32, 0, len(result))
			for c := range result {
				keys = append(keys, c)
			}
			slices.Sort(keys)
			total = 0
			for _, c := range keys {
				total += result[c]
			}
		}
		return &costSet{costs: result, total: total, choice: n}
	}
	q := &fgQueue{less: func(a, b fgItem) bool {
		if a.cost != b.cost {
			return a.cost < b.cost
		}
		if nodeName != nil {
			if na, nb := nodeName(a.node), nodeName(b.node); na != nb {
				return na < nb
			}
		}
		return a.node < b.node
	}, pending: map[int32]float64{}}
	for n := range p.Nodes {
		if len(p.Nodes[n].Children) == 0 {
			q.insert(int32(n), p.Nodes[n].Cost)
		}
	}
	for pops := 0; q.Len() > 0; pops++ {
		if pops&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		n := q.pop()
		c := p.Nodes[n].Class
		prev := infCost
		if sets[c] != nil {
			prev = sets[c].total
		}
		s := price(n, prev)
		if s.total >= prev {
			continue
		}
		sets[c] = s
		for _, e := range l.parentsOf(c) {
			ready := true
			for _, k := range p.Nodes[e].Children {
				if sets[k] == nil {
					ready = false
					break
				}
			}
			if ready {
				q.insert(e, p.Nodes[e].Cost)
			}
		}
	}
	choice := make([]int32, nc)
	for c := range choice {
		choice[c] = -1
		if sets[c] != nil {
			choice[c] = sets[c].choice
		}
	}
	for _, r := range p.Roots {
		if choice[r] < 0 {
			return nil, 0, fmt.Errorf("extract: faster greedy DAG: root class %s gets no choice", p.ClassNames[r])
		}
	}
	s, err := pruneChoices(p, choice)
	if err != nil {
		return nil, 0, fmt.Errorf("extract: faster greedy DAG: %w", err)
	}
	cost, err := s.DAGCost(p)
	if err != nil {
		return nil, 0, fmt.Errorf("extract: faster greedy DAG: %w", err)
	}
	return s, cost, nil
}

// fgItem is a queued node and its priority.
type fgItem struct {
	cost float64
	node int32
}

// fgQueue is the reference's "mostly unique" priority queue: a node
// already waiting at no higher cost is not queued again.
type fgQueue struct {
	items   []fgItem
	less    func(a, b fgItem) bool
	pending map[int32]float64
}

func (q *fgQueue) Len() int           { return len(q.items) }
func (q *fgQueue) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }
func (q *fgQueue) Swap(i, j int)      { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *fgQueue) Push(x any)         { q.items = append(q.items, x.(fgItem)) }
func (q *fgQueue) Pop() any {
	it := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return it
}

func (q *fgQueue) insert(n int32, cost float64) {
	if old, ok := q.pending[n]; ok && old <= cost {
		return
	}
	q.pending[n] = cost
	heap.Push(q, fgItem{cost, n})
}

func (q *fgQueue) pop() int32 {
	it := heap.Pop(q).(fgItem)
	delete(q.pending, it.node)
	return it.node
}
