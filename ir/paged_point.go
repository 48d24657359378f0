package ir

import "fmt"

// Point evaluation of paged attention: verification of a step's kernel at
// real shapes (a pool of gigabytes) compares a sample of its output
// elements, and the reference computes just those. Which pool rows an
// element reads depends on the metadata's values, so the metadata is
// computed whole first (it is small: the table is sequences by blocks),
// then each needed token's query rows and its keys' and values' rows.

// pagedMetaAt decodes n's metadata from values read through at (operand
// k, element j), as PagedTokens checks it.
func pagedMetaAt(n *Node, ins []ValueType, at func(k int, j int64) float64) (*PagedMeta, error) {
	return PagedTokens(n, ins, func(k int, j int64) int64 { return I64.IntOf(at(k, j)) })
}

// demandPaged asks for the metadata whole, then for each needed element's
// query row and every key and value row its token attends (those of its
// key head).
func (pe *pointEval) demandPaged(n *Node, idx []int64) error {
	ins := pe.inputTypes(n)
	meta := make([][]float64, 9)
	for k := 5; k < 9; k++ {
		all := make([]int64, ins[k].Shape.NumElements())
		for j := range all {
			all[j] = int64(j)
		}
		vals, err := pe.valuesAt(n.Inputs[k], all)
		if err != nil {
			return err
		}
		pe.add(n.Inputs[k], all)
		meta[k] = vals
	}
	m, err := pagedMetaAt(n, ins, func(k int, j int64) float64 { return meta[k][j] })
	if err != nil {
		return err
	}
	Hq, D, Hkv := int64(ins[0].Shape[1]), int64(ins[0].Shape[2]), int64(ins[1].Shape[1])
	group := Hq / Hkv
	seen := map[int64]bool{} // token * Hkv + key head whose keys are asked for
	for _, r := range distinctDiv(idx, D) {
		t, h := r/Hq, r%Hq
		tok := m.Tokens[t]
		if tok.Seq < 0 {
			continue // zeros, reading nothing
		}
		for c := range D {
			pe.add1(n.Inputs[0], r*D+c)
		}
		kh := h / group
		if seen[t*Hkv+kh] {
			continue
		}
		seen[t*Hkv+kh] = true
		for j := tok.Lo; j <= tok.Pos; j++ {
			row, pool := m.KeyRow(int(t), j)
			kk, vk := n.Inputs[1], n.Inputs[2]
			if pool {
				kk, vk = n.Inputs[3], n.Inputs[4]
			}
			for c := range D {
				pe.add1(kk, (row*Hkv+kh)*D+c)
				pe.add1(vk, (row*Hkv+kh)*D+c)
			}
		}
		if err := pe.tick((tok.Pos - tok.Lo + 1) * D); err != nil {
			return err
		}
	}
	if len(n.Inputs) > 9 {
		for _, r := range distinctDiv(idx, D) {
			pe.add1(n.Inputs[9], r%Hq)
		}
	}
	return nil
}

// computePaged computes the needed elements as pagedAttention does: per
// query row, the probabilities over the token's keys, then each needed
// column's weighted sum of values; a token of no sequence gets zeros.
func (pe *pointEval) computePaged(n *Node, idx []int64, out *pointStore) error {
	ins := pe.inputTypes(n)
	m, err := pagedMetaAt(n, ins, func(k int, j int64) float64 {
		v, _ := pe.store[n.Inputs[k]].at(j)
		return v
	})
	if err != nil {
		return fmt.Errorf("paged attention: %w", err)
	}
	Hq, D, Hkv := int64(ins[0].Shape[1]), int64(ins[0].Shape[2]), int64(ins[1].Shape[1])
	group := Hq / Hkv
	rows, groups := rowGroups(idx, func(j int64) int64 { return j / D })
	q := newRowBuffers(int(D), pe.magnitude)
	for g, r := range rows {
		t, h := r/Hq, r%Hq
		tok := m.Tokens[t]
		if tok.Seq < 0 {
			for _, p := range groups[g] {
				out.put(p, 0, 0)
			}
			continue
		}
		kh := h / group
		L := tok.Pos - tok.Lo + 1
		gatherRow(pe.store[n.Inputs[0]], r*D, 1, q)
		k := newRowBuffers(int(L*D), pe.magnitude)
		vrows := make([]int64, L) // each key's value row offset
		vstore := make([]*pointStore, L)
		for i := range L {
			row, pool := m.KeyRow(int(t), tok.Lo+i)
			ks, vs := pe.store[n.Inputs[1]], pe.store[n.Inputs[2]]
			if pool {
				ks, vs = pe.store[n.Inputs[3]], pe.store[n.Inputs[4]]
			}
			off := (row*Hkv + kh) * D
			for c := range D {
				x, xm := ks.at(off + c)
				k.x[i*D+c] = x
				if k.xm != nil {
					k.xm[i*D+c] = xm
				}
			}
			vrows[i], vstore[i] = off, vs
		}
		p := make([]float64, L)
		var pm []float64
		if pe.magnitude {
			pm = make([]float64, L)
		}
		var sink *[2]float64
		if len(n.Inputs) > 9 {
			x, xm := pe.store[n.Inputs[9]].at(h)
			sink = &[2]float64{x, xm}
		}
		avg := attentionProbsSink(q.x, q.xm, k.x, k.xm, n.Scale, p, pm, sink)
		col := newRowBuffers(int(L), pe.magnitude)
		for _, pos := range groups[g] {
			d := idx[pos] % D
			for i := range L {
				x, xm := vstore[i].at(vrows[i] + d)
				col.x[i] = x
				if col.xm != nil {
					col.xm[i] = xm
				}
			}
			v, mg := attentionOut(p, pm, avg, col.x, col.xm)
			out.put(pos, v, mg)
		}
		work := L*D + int64(len(groups[g]))*L
		pe.stats.macs += work
		if err := pe.tick(work); err != nil {
			return err
		}
	}
	return nil
}
