package egraph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ac4File = "testdata/ac4.json"

func TestSummarizeFile(t *testing.T) {
	sum, err := SummarizeFile(context.Background(), ac4File, "")
	require.NoError(t, err)
	assert.Equal(t, ac4File, sum.File)
	assert.Equal(t, 15, sum.EClasses)
	assert.Equal(t, 54, sum.ENodes)
	assert.Equal(t, []string{"6"}, sum.Roots)
	assert.Equal(t, 5, sum.Operators)
	assert.Empty(t, sum.Dot)
	assert.Equal(t, sum.LoadTime.Seconds(), sum.LoadSeconds)

	dot := filepath.Join(t.TempDir(), "ac4.dot")
	sum, err = SummarizeFile(context.Background(), ac4File, dot)
	require.NoError(t, err)
	assert.Equal(t, dot, sum.Dot)
	data, err := os.ReadFile(dot)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "digraph egraph {"))
}

func TestSummarizeFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"nodes": {"a": {"op": 1, "cost": 1, "eclass": "0", "children": []}}, "root_eclasses": ["0"]}`), 0o644))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		path string
		dot  string
		want []string
	}{
		{"missing file", context.Background(), filepath.Join(dir, "none.json"), "", []string{"read e-graph: ", "none.json"}},
		{"malformed file", context.Background(), bad, "", []string{"read e-graph: ", bad, `$.nodes["a"].op`}},
		{"dot into a missing folder", context.Background(), ac4File, filepath.Join(dir, "no", "x.dot"), []string{"write dot: "}},
		{"canceled", canceled, ac4File, "", []string{"context canceled"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sum, err := SummarizeFile(tt.ctx, tt.path, tt.dot)
			require.Error(t, err)
			assert.Nil(t, sum)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestWriteDotFileRefusesBigGraphs(t *testing.T) {
	g := NewPlain()
	for i := range 2001 {
		g.MustAdd(Node{Op: Intern("x"), Payload: Payload(i + 1)})
	}
	g.Rebuild()
	path := filepath.Join(t.TempDir(), "big.dot")
	err := WriteDotFile(path, &g.Graph)
	require.ErrorContains(t, err, "cannot write "+path+": dot: the e-graph has 2001 e-nodes")
	assert.NoFileExists(t, path, "a refused drawing leaves no file")
}

func TestFileSummaryWriteText(t *testing.T) {
	many := make([]string, 12)
	for i := range many {
		many[i] = fmt.Sprintf("r%d", i)
	}
	for _, tt := range []struct {
		name  string
		sum   FileSummary
		roots string
		dot   bool
	}{
		{"no roots", FileSummary{}, "roots:     0\n", false},
		{"quoted roots", FileSummary{Roots: []string{"a", "", "b c", "d,e"}}, `roots:     4 (a, "", "b c", "d,e")` + "\n", false},
		{"more than ten", FileSummary{Roots: many}, "roots:     12 (r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, ... 2 more)\n", false},
		{"with dot", FileSummary{Roots: []string{"x"}, Dot: "x.dot"}, "roots:     1 (x)\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.sum
			s.File, s.EClasses, s.ENodes, s.Operators = "f.json", 3, 4, 2
			s.LoadTime = 1234567 * time.Nanosecond
			var b bytes.Buffer
			require.NoError(t, s.WriteText(&b))
			want := "file:      f.json\ne-classes: 3\ne-nodes:   4\n" + tt.roots + "operators: 2\nload time: 1.235ms\n"
			if tt.dot {
				want += "dot:       x.dot\n"
			}
			assert.Equal(t, want, b.String())
		})
	}
}

func TestFileSummaryJSON(t *testing.T) {
	s := FileSummary{File: "f", EClasses: 1, ENodes: 2, Roots: []string{"r"}, Operators: 3, LoadSeconds: 0.5, LoadTime: time.Second}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Equal(t, `{"file":"f","eclasses":1,"enodes":2,"roots":["r"],"operators":3,"load_seconds":0.5}`, string(data))
}

func TestQuoteName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"x", "x"},
		{"12", "12"},
		{"", `""`},
		{"a b", `"a b"`},
		{"a,b", `"a,b"`},
		{"f(x)", `"f(x)"`},
		{`say "hi"`, `"say \"hi\""`},
		{"tab\there", `"tab\there"`},
	} {
		assert.Equal(t, tt.want, QuoteName(tt.in), "QuoteName(%q)", tt.in)
	}
}
