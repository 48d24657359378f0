package ir

// Point evaluation of paged attention: which keys an output element reads
// depends on the metadata's values, so the metadata is computed first,
// whole (it is small: a table row per sequence), as a gather's indices are.

// pagedMetaAt decodes paged attention's metadata from values read by
// value(k, j).
func pagedMetaAt(pe *pointEval, n *Node, value func(k int, j int64) int64) (*PagedMeta, error) {
	return PagedTokens(n, pe.inputTypes(n), value)
}

func (pe *pointEval) demandPagedAttention(n *Node, idx []int64) error {
	vals := make(map[int][]float64, 4)
	for k := 5; k <= 8; k++ {
		all := make([]int64, pe.g.Node(n.Inputs[k]).Shape.NumElements())
		for j := range all {
			all[j] = int64(j)
		}
		v, err := pe.valuesAt(n.Inputs[k], all)
		if err != nil {
			return err
		}
		vals[k] = v
		pe.add(n.Inputs[k], all)
	}
	meta, err := pagedMetaAt(pe, n, func(k int, j int64) int64 { return I64.IntOf(vals[k][j]) })
	if err != nil {
		return err
	}
	g := pagedGeometry(pe, n)
	for _, f := range idx {
		t, h, d := f/(g.Hq*g.D), f/g.D%g.Hq, f%g.D
		tok := meta.Tokens[t]
		if tok.Seq < 0 {
			continue
		}
		for c := range g.D {
			pe.add1(n.Inputs[0], (t*g.Hq+h)*g.D+c)
		}
		kh := h / (g.Hq / g.Hkv)
		for j := tok.Lo; j <= tok.Pos; j++ {
			row, pool := meta.KeyRow(int(t), j)
			kk, vk := 1, 2
			if pool {
				kk, vk = 3, 4
			}
			base := (row*g.Hkv + kh) * g.D
			for c := range g.D {
				pe.add1(n.Inputs[kk], base+c)
			}
			pe.add1(n.Inputs[vk], base+d)
		}
	}
	return nil
}

func (pe *pointEval) computePagedAttention(n *Node, idx []int64, out *pointStore) error {
	meta, err := pagedMetaAt(pe, n, func(k int, j int64) int64 {
		v, _ := pe.store[n.Inputs[k]].at(j)
		return I64.IntOf(v)
	})
	if err != nil {
		return err
	}
	g := pagedGeometry(pe, n)
	D := int(g.D)
	q := newRowBuffers(D, pe.magnitude)
	for p, f := range idx {
		t, h, d := f/(g.Hq*g.D), f/g.D%g.Hq, f%g.D
		tok := meta.Tokens[t]
		if tok.Seq < 0 {
			out.put(p, 0, 0)
			continue
		}
		gatherRow(pe.store[n.Inputs[0]], (t*g.Hq+h)*g.D, 1, q)
		kh := h / (g.Hq / g.Hkv)
		L := int(tok.Pos - tok.Lo + 1)
		k := newRowBuffers(L*D, pe.magnitude)
		col := newRowBuffers(L, pe.magnitude)
		for i := range L {
			row, pool := meta.KeyRow(int(t), tok.Lo+int64(i))
			kk, vk := 1, 2
			if pool {
				kk, vk = 3, 4
			}
			base := (row*g.Hkv + kh) * g.D
			for c := range D {
				v, m := pe.store[n.Inputs[kk]].at(base + int64(c))
				k.x[i*D+c] = v
				if k.xm != nil {
					k.xm[i*D+c] = m
				}
			}
			v, m := pe.store[n.Inputs[vk]].at(base + d)
			col.x[i] = v
			if col.xm != nil {
				col.xm[i] = m
			}
		}
		pr := make([]float64, L)
		var pm []float64
		if pe.magnitude {
			pm = make([]float64, L)
		}
		avg := attentionProbs(q.x, q.xm, k.x, k.xm, n.Scale, pr, pm)
		v, m := attentionOut(pr, pm, avg, col.x, col.xm)
		out.put(p, v, m)
		if err := pe.tick(int64(L * (D + 1))); err != nil {
			return err
		}
	}
	return nil
}

// pagedDims are paged attention's extents.
type pagedDims struct{ Hq, Hkv, D int64 }

func pagedGeometry(pe *pointEval, n *Node) pagedDims {
	q, k := pe.g.Node(n.Inputs[0]).Shape, pe.g.Node(n.Inputs[1]).Shape
	return pagedDims{Hq: int64(q[1]), Hkv: int64(k[1]), D: int64(q[2])}
}
