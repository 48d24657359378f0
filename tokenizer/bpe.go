package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpeModel is a BPE vocabulary with its ranked merges.
type bpeModel struct {
	pieces       []string         // model vocabulary by id
	merges       map[uint64]merge // (left id, right id) -> merge
	byteTokens   [256]int         // id of "<0xXX>" for byte fallback, -1 if absent
	ignoreMerges bool             // a word that is itself a vocab entry is one token
	byteFallback bool             // unknown characters become <0xXX> byte tokens
	fuseUnk      bool             // consecutive unknown characters become one unk
	unkToken     string           // "" when the model has none
	unkID        int              // -1 when the model has none
}

type merge struct {
	rank, id int
}

func pairKey(a, b int) uint64 { return uint64(a)<<32 | uint64(uint32(b)) }

type bpeJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

func parseModel(raw json.RawMessage) (bpeModel, map[string]int, error) {
	var m bpeModel
	typ, err := typeOf(raw)
	if err != nil {
		return m, nil, err
	}
	if typ != "BPE" {
		return m, nil, fmt.Errorf("model type %q is not supported (only BPE)", typ)
	}
	var j bpeJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return m, nil, err
	}
	if j.Dropout != nil && *j.Dropout != 0 {
		return m, nil, fmt.Errorf("BPE dropout is not supported")
	}
	if j.ContinuingSubwordPrefix != nil && *j.ContinuingSubwordPrefix != "" {
		return m, nil, fmt.Errorf("BPE continuing_subword_prefix is not supported")
	}
	if j.EndOfWordSuffix != nil && *j.EndOfWordSuffix != "" {
		return m, nil, fmt.Errorf("BPE end_of_word_suffix is not supported")
	}
	if len(j.Vocab) == 0 {
		return m, nil, fmt.Errorf("empty vocabulary")
	}
	if len(j.Vocab) > 1<<24 {
		return m, nil, fmt.Errorf("vocabulary of %d entries is implausibly large", len(j.Vocab))
	}
	m.pieces = make([]string, len(j.Vocab))
	for s, id := range j.Vocab {
		if id < 0 || id >= len(j.Vocab) {
			return m, nil, fmt.Errorf("vocab entry %q has id %d outside 0..%d", s, id, len(j.Vocab)-1)
		}
		if m.pieces[id] != "" {
			return m, nil, fmt.Errorf("vocab id %d is both %q and %q", id, m.pieces[id], s)
		}
		if s == "" {
			return m, nil, fmt.Errorf("vocab id %d is empty", id)
		}
		m.pieces[id] = s
	}
	m.ignoreMerges, m.byteFallback, m.fuseUnk = j.IgnoreMerges, j.ByteFallback, j.FuseUnk
	m.unkID = -1
	if j.UnkToken != nil {
		m.unkToken = *j.UnkToken
	}
	for b := range m.byteTokens {
		id, ok := j.Vocab[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			id = -1
		}
		m.byteTokens[b] = id
	}
	m.merges = make(map[uint64]merge, len(j.Merges))
	for rank, r := range j.Merges {
		a, b, err := parseMerge(r)
		if err != nil {
			return m, nil, fmt.Errorf("merge %d: %w", rank, err)
		}
		ia, oka := j.Vocab[a]
		ib, okb := j.Vocab[b]
		id, okm := j.Vocab[a+b]
		if !oka || !okb || !okm {
			return m, nil, fmt.Errorf("merge %d (%q %q) names a token not in the vocabulary", rank, a, b)
		}
		k := pairKey(ia, ib)
		if _, dup := m.merges[k]; !dup { // the first (best) rank wins
			m.merges[k] = merge{rank, id}
		}
	}
	return m, j.Vocab, nil
}

// parseMerge reads a merge written as "a b" or as ["a", "b"].
func parseMerge(r json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(r, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two space-separated tokens", s)
		}
		return a, b, nil
	}
	var p []string
	if err := json.Unmarshal(r, &p); err != nil || len(p) != 2 || p[0] == "" || p[1] == "" {
		return "", "", fmt.Errorf("%s is neither \"a b\" nor [\"a\", \"b\"]", r)
	}
	return p[0], p[1], nil
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int
	prev, next int // -1 at the ends
	dead       bool
}

// candidate is a possible merge of the symbol at pos with its successor.
type candidate struct {
	rank, pos, id int
}

// candHeap is a binary min-heap of candidates, typed rather than through
// container/heap, whose interface boxing dominated long-word profiles.
type candHeap []candidate

func (h candHeap) less(i, j int) bool {
	// Lowest rank first; among equal ranks the leftmost, as Hugging Face.
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}

func (h *candHeap) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candHeap) pop() candidate {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q.less(l, m) {
			m = l
		}
		if l+1 < n && q.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// shortWord is the length up to which a plain scan for the best pair beats
// the heap; both give the same merges.
const shortWord = 24

// mergeShort merges a short word by repeatedly scanning for the best pair.
func (m *bpeModel) mergeShort(ids []int, out []int) []int {
	var buf [shortWord]int
	w := append(buf[:0], ids...)
	for len(w) > 1 {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(w); i++ {
			if mg, ok := m.merges[pairKey(w[i], w[i+1])]; ok && (at < 0 || mg.rank < best.rank) {
				best, at = mg, i
			}
		}
		if at < 0 {
			break
		}
		w[at] = best.id
		w = append(w[:at+1], w[at+2:]...)
	}
	return append(out, w...)
}

// mergeSymbols applies the ranked merges to a word's initial symbol ids and
// appends the resulting ids to out. A heap of candidate merges over a linked
// list keeps a long word O(n log n) instead of the naive O(n^2).
func (m *bpeModel) mergeSymbols(ids []int, out []int) []int {
	if len(ids) <= shortWord {
		return m.mergeShort(ids, out)
	}
	return m.mergeLong(ids, out)
}

// mergeLong is mergeSymbols for long words.
func (m *bpeModel) mergeLong(ids []int, out []int) []int {
	syms := make([]symbol, len(ids))
	h := make(candHeap, 0, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: i - 1, next: i + 1}
		if i > 0 {
			if mg, ok := m.merges[pairKey(ids[i-1], id)]; ok {
				h.push(candidate{mg.rank, i - 1, mg.id})
			}
		}
	}
	syms[len(ids)-1].next = -1
	for len(h) > 0 {
		c := h.pop()
		left := &syms[c.pos]
		if left.dead || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		// The candidate is stale if either side has merged since it was
		// pushed: the pair no longer produces the same token.
		if mg, ok := m.merges[pairKey(left.id, right.id)]; !ok || mg.id != c.id || mg.rank != c.rank {
			continue
		}
		left.id = c.id
		right.dead = true
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = c.pos
		}
		if left.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h.push(candidate{mg.rank, left.prev, mg.id})
			}
		}
		if left.next >= 0 {
			if mg, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h.push(candidate{mg.rank, c.pos, mg.id})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// encodeChars BPE-encodes a word whose initial symbols are its characters
// (the SentencePiece-style models), with byte fallback or unk for
// characters outside the vocabulary.
func (m *bpeModel) encodeChars(word string, vocab map[string]int, out []int) ([]int, error) {
	if m.ignoreMerges {
		if id, ok := vocab[word]; ok && id < len(m.pieces) {
			return append(out, id), nil
		}
	}
	ids := make([]int, 0, len(word))
	lastUnk := false
	for i, w := 0, 0; i < len(word); i += w {
		_, w = utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+w]
		if id, ok := vocab[ch]; ok && id < len(m.pieces) {
			ids = append(ids, id)
			lastUnk = false
			continue
		}
		if m.byteFallback {
			ok := true
			for j := 0; j < len(ch); j++ {
				ok = ok && m.byteTokens[ch[j]] >= 0
			}
			if ok {
				for j := 0; j < len(ch); j++ {
					ids = append(ids, m.byteTokens[ch[j]])
				}
				lastUnk = false
				continue
			}
		}
		if m.unkID < 0 {
			return out, fmt.Errorf("character %q is not in the vocabulary and the model has no unk token", ch)
		}
		if !(m.fuseUnk && lastUnk) {
			ids = append(ids, m.unkID)
		}
		lastUnk = true
	}
	return m.mergeSymbols(ids, out), nil
}
