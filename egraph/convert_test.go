package egraph

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// classContents describes every class of an e-graph by names: for each class
// name, the sorted list of its nodes as "op cost child-class-names".
func classContents(g *Graph, name func(ClassID) string, op func(Node) string) map[string][]string {
	out := map[string][]string{}
	for _, c := range g.Classes() {
		var nodes []string
		for _, nid := range g.ClassNodes(c) {
			n := g.Node(nid)
			var b strings.Builder
			fmt.Fprintf(&b, "%s %v", op(n), CostOf(n))
			for _, k := range n.Children {
				b.WriteString(" " + name(k))
			}
			nodes = append(nodes, b.String())
		}
		slices.Sort(nodes)
		out[name(c)] = nodes
	}
	return out
}

// fileContents is classContents for the file itself.
func fileContents(s *Serialized) map[string][]string {
	index := s.NodeIndex()
	out := map[string][]string{}
	for _, n := range s.Nodes {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %v", n.Op, n.Cost)
		for _, k := range n.Children {
			b.WriteString(" " + s.Nodes[index[k]].Class)
		}
		out[n.Class] = append(out[n.Class], b.String())
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

func TestSerializedRoundTripThroughEGraph(t *testing.T) {
	dir := extractionGymDir(t)
	ref := readReferenceCosts(t, dir)
	for _, name := range extractionGymFiles(t, dir) {
		t.Run(name, func(t *testing.T) {
			s1, err := ReadSerializedFile(filepath.Join(dir, name))
			require.NoError(t, err)
			im1, err := FromSerialized(s1)
			require.NoError(t, err)
			g1 := &im1.Graph.Graph
			// Rebuilding merged nothing: the files are congruence-closed.
			require.Equal(t, ref[name].eclasses, g1.NumClasses())
			require.Equal(t, ref[name].enodes, g1.NumNodes())
			checkInvariants(t, im1.Graph)
			opName := func(n Node) string { return n.Op.String() }
			named := func(c ClassID) string { return im1.ClassName[g1.Find(c)] }
			require.Equal(t, fileContents(s1), classContents(g1, named, opName), "the e-graph differs from the file")

			var buf bytes.Buffer
			require.NoError(t, im1.Serialize().Write(&buf))
			s2, err := ReadSerialized(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			im2, err := FromSerialized(s2)
			require.NoError(t, err)
			g2 := &im2.Graph.Graph
			// The second file names classes by the first e-graph's ids.
			byID := func(c ClassID) string { return fmt.Sprint(g1.Find(c)) }
			named2 := func(c ClassID) string { return im2.ClassName[g2.Find(c)] }
			require.Equal(t, classContents(g1, byID, opName), classContents(g2, named2, opName))
			require.Len(t, im2.Roots, len(im1.Roots))
			for i := range im1.Roots {
				require.Equal(t, byID(im1.Roots[i]), named2(im2.Roots[i]))
			}
			var buf2 bytes.Buffer
			require.NoError(t, im2.Serialize().Write(&buf2))
			require.Equal(t, len(buf.Bytes()), len(buf2.Bytes()))
		})
	}
}

func TestFromSerializedMergesCongruentClasses(t *testing.T) {
	s := &Serialized{
		Nodes: []SerializedNode{
			{ID: "x", Op: "x", Class: "cx", Cost: 1},
			{ID: "f1", Op: "f", Class: "c1", Cost: 2, Children: []string{"x"}},
			{ID: "f2", Op: "f", Class: "c2", Cost: 2, Children: []string{"x"}},
			{ID: "g", Op: "g", Class: "c2", Cost: 3, Children: []string{"f2"}},
		},
		Roots: []string{"c2"},
	}
	im, err := FromSerialized(s)
	require.NoError(t, err)
	require.Equal(t, 2, im.Graph.NumClasses())
	require.Equal(t, 3, im.Graph.NumNodes())
	require.Equal(t, "c1", im.ClassName[im.Roots[0]], "the merged class keeps the first name")
}
