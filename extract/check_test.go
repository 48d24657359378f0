package extract

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkProblem is a hand-made problem: c2 = (n2 c1 c0), c1 = (n1 c0 c0) or
// a leaf, c0 = a leaf or (n3 c2), which can close a cycle; c3 is not
// needed.
func checkProblem() *Problem {
	return &Problem{
		Nodes: []Node{
			{Class: 0, Cost: 1},
			{Class: 1, Cost: 2, Children: []int32{0, 0}},
			{Class: 2, Cost: 3, Children: []int32{1, 0}},
			{Class: 0, Cost: 0, Children: []int32{2}},
			{Class: 1, Cost: 5},
			{Class: 3, Cost: 1},
		},
		ClassNodes: [][]int32{{0, 3}, {1, 4}, {2}, {5}},
		Roots:      []int32{2},
		ClassNames: []string{"c0", "c1", "c2", "c3"},
	}
}

func TestCheck(t *testing.T) {
	p := checkProblem()
	for _, tc := range []struct {
		name   string
		choice []int32
		err    string
	}{
		{"valid", []int32{0, 1, 2, -1}, ""},
		{"unneeded class chosen", []int32{0, 1, 2, 5}, ""},
		{"root without choice", []int32{0, 1, -1, -1}, "class c2 is needed but has no valid choice"},
		{"child without choice", []int32{-1, 1, 2, -1}, "class c0 is needed but has no valid choice"},
		{"cycle", []int32{3, 1, 2, -1}, "the choices form a cycle"},
		{"node of another class", []int32{0, 0, 2, -1}, "class c1 is needed but has no valid choice"},
		{"node out of range", []int32{0, 99, 2, -1}, "class c1 is needed but has no valid choice"},
		{"wrong length", []int32{0, 1, 2}, "solution for 3 classes, problem has 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&Solution{Choice: tc.choice}).Check(p)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestCosts(t *testing.T) {
	p := checkProblem()
	s := &Solution{Choice: []int32{0, 1, 2, 5}}
	dag, err := s.DAGCost(p)
	require.NoError(t, err)
	assert.Equal(t, 6.0, dag, "c0, c1 and c2 once each; c3 is not needed")
	tree, err := s.TreeCost(p)
	require.NoError(t, err)
	assert.Equal(t, 8.0, tree, "c2 = 3 + c1 + c0 = 3 + (2+1+1) + 1")
}

func TestCheckedSolutionReportsBugs(t *testing.T) {
	p := checkProblem()
	_, err := checkedSolution(p, "Test", []int32{3, 1, 2, -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "extract: bug: Test produced an invalid solution")
	s, err := checkedSolution(p, "Test", []int32{0, 1, 2, 5})
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 1, 2, -1}, s.Choice, "unneeded classes are dropped")
}
