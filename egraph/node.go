package egraph

import (
	"fmt"
	"strings"
)

// ClassID names an e-class. Ids are dense and never reused; after unions an
// id may stand for a class whose canonical id is another (see Graph.Find).
type ClassID uint32

// NodeID names an e-node stored in an e-graph. It is stable for the life of
// the e-graph; a node that rebuilding found congruent to another is dropped
// from its class and its id is no longer listed anywhere.
type NodeID uint32

// Payload is the optional operand of an operator that is not a child: a
// constant's value, an interned kernel body, a cost. It is part of the
// node's identity, and it is a plain integer so that nodes hash and compare
// in constant time; languages intern richer payloads into it.
type Payload uint64

// Node is an e-node as callers see it: an operator, its payload, and the
// e-classes of its children.
type Node struct {
	Op       Symbol
	Payload  Payload
	Children []ClassID
}

// String prints the node as an s-expression over class ids, "(+ 3 5)".
func (n Node) String() string {
	var b strings.Builder
	if len(n.Children) > 0 {
		b.WriteByte('(')
	}
	b.WriteString(n.Op.String())
	if n.Payload != 0 {
		fmt.Fprintf(&b, "[%d]", uint64(n.Payload))
	}
	for _, c := range n.Children {
		fmt.Fprintf(&b, " %d", c)
	}
	if len(n.Children) > 0 {
		b.WriteByte(')')
	}
	return b.String()
}

// maxArity bounds the children of one node so that the count fits the
// compact node record.
const maxArity = 1<<16 - 1

// nodeRec is the compact stored form of a node, 32 bytes. Children of
// nodes with at most two live in the record itself, so that matching and
// hash-cons lookups, the hot paths, touch one cache line per node; longer
// child lists live in the graph's shared children arena. Keeping nodes in
// one arena (not one allocation each) is what keeps a million-node e-graph
// small.
type nodeRec struct {
	op    Symbol
	class ClassID // the class the node was added to; Find gives the current one
	arity uint16
	dead  bool // dropped by rebuilding as a duplicate of a congruent node
	// stamp is the Graph.stamp of the rebuild after which the node was
	// added or last recanonicalized (Graph.moved records moves between
	// classes). Incremental matching compares it.
	stamp   uint32
	kid     [inlineKids]ClassID // the children, or kid[0] = their offset in Graph.kids
	payload Payload
}

// inlineKids is how many children a node record holds itself.
const inlineKids = 2

// kids returns the node's children, aliasing its storage.
func (r *nodeRec) kidsIn(arena []ClassID) []ClassID {
	if r.arity <= inlineKids {
		return r.kid[:r.arity:r.arity]
	}
	off := uint32(r.kid[0])
	return arena[off : off+uint32(r.arity) : off+uint32(r.arity)]
}

// hashNode mixes a node's content into a 64-bit hash. The constants are the
// usual odd multipliers of fast non-cryptographic hashes.
func hashNode(op Symbol, p Payload, kids []ClassID) uint64 {
	h := uint64(op)*0x9E3779B97F4A7C15 ^ uint64(p)*0xC2B2AE3D27D4EB4F
	for _, k := range kids {
		h = (h ^ uint64(k)) * 0x100000001B3
		h ^= h >> 29
	}
	h ^= h >> 32
	h *= 0xD6E8FEB86659FD93
	h ^= h >> 32
	return h
}
