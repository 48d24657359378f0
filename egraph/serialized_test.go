package egraph

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lumsearch/lumsearch/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sharedDataDir(t testing.TB) string { return shareddata.Dir(t) }

// extractionGymDir is the egraph-serialize corpus inside the shared data.
func extractionGymDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(sharedDataDir(t), "extraction-gym")
	require.DirExists(t, dir, "shared data is present but incomplete")
	return dir
}

// extractionGymFiles lists the corpus as paths relative to extractionGymDir,
// in the "egg/x.json" form that reference-costs.csv uses after "data/".
func extractionGymFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no .json files under %s", dir)
	rel := make([]string, len(files))
	for i, f := range files {
		rel[i], err = filepath.Rel(dir, f)
		require.NoError(t, err)
		rel[i] = filepath.ToSlash(rel[i])
	}
	return rel
}

type serReference struct {
	enodes, eclasses, roots int
}

func readReferenceCosts(t testing.TB, dir string) map[string]serReference {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "reference-costs.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"file", "enodes", "eclasses", "roots"} {
		require.Contains(t, col, name, "reference-costs.csv lacks column %q", name)
	}
	atoi := func(row []string, name string) int {
		n, err := strconv.Atoi(row[col[name]])
		require.NoError(t, err, "reference-costs.csv row %v column %s", row, name)
		return n
	}
	out := map[string]serReference{}
	for _, row := range rows[1:] {
		file := strings.TrimPrefix(row[col["file"]], "data/")
		out[file] = serReference{atoi(row, "enodes"), atoi(row, "eclasses"), atoi(row, "roots")}
	}
	return out
}

func serWrite(t testing.TB, s *Serialized) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, s.Write(&buf))
	return buf.Bytes()
}

func serRead(t testing.TB, data []byte) *Serialized {
	t.Helper()
	s, err := ReadSerialized(bytes.NewReader(data))
	require.NoError(t, err)
	return s
}

// serNormalized copies s with class data compacted, since Write re-indents
// class data and only its whitespace may change across a round trip.
func serNormalized(t testing.TB, s *Serialized) *Serialized {
	t.Helper()
	c := *s
	c.ClassData = nil
	for _, cd := range s.ClassData {
		var buf bytes.Buffer
		require.NoError(t, json.Compact(&buf, cd.Data))
		c.ClassData = append(c.ClassData, SerializedClassData{Class: cd.Class, Data: buf.Bytes()})
	}
	return &c
}

func serSample() *Serialized {
	return &Serialized{
		Nodes: []SerializedNode{
			{ID: "x", Op: "x", Class: "c0", Cost: 1},
			{ID: `n"1`, Op: "Var(\"w\")\n<&>", Class: "c1", Cost: 0.25, Children: []string{"x", "x"}},
			{ID: "z", Op: "é ✓\x01", Class: "c1", Cost: 3.199999991920777e-05, Subsumed: true},
			{ID: "big", Op: "+", Class: "c2", Cost: 1e16, Children: []string{`n"1`}},
			{ID: "neg", Op: "-", Class: "c2", Cost: -2, Children: []string{"z"}},
		},
		Roots: []string{"c2"},
		ClassData: []SerializedClassData{
			{Class: "c1", Data: json.RawMessage(`{"type":"Math","n":[1, 2]}`)},
			{Class: "c0", Data: json.RawMessage(` null `)},
		},
		Comment: "# hand-made",
	}
}

const serSampleText = `{
  "nodes": {
    "x": {
      "op": "x",
      "cost": 1.0,
      "eclass": "c0",
      "children": []
    },
    "n\"1": {
      "op": "Var(\"w\")\n<&>",
      "cost": 0.25,
      "eclass": "c1",
      "children": [
        "x",
        "x"
      ]
    },
    "z": {
      "op": "é ✓\u0001",
      "cost": 3.199999991920777e-05,
      "eclass": "c1",
      "children": [],
      "subsumed": true
    },
    "big": {
      "op": "+",
      "cost": 1e+16,
      "eclass": "c2",
      "children": [
        "n\"1"
      ]
    },
    "neg": {
      "op": "-",
      "cost": -2.0,
      "eclass": "c2",
      "children": [
        "z"
      ]
    }
  },
  "comment": "# hand-made",
  "root_eclasses": [
    "c2"
  ],
  "class_data": {
    "c1": {
      "type": "Math",
      "n": [
        1,
        2
      ]
    },
    "c0": null
  }
}`

func TestSerializedWriteSample(t *testing.T) {
	s := serSample()
	out := serWrite(t, s)
	assert.Equal(t, serSampleText, string(out))

	back := serRead(t, out)
	assert.Equal(t, serNormalized(t, s), serNormalized(t, back))
	assert.Equal(t, string(out), string(serWrite(t, back)), "Write→Read→Write must be byte-identical")
	assert.Equal(t, map[string]int{"x": 0, `n"1`: 1, "z": 2, "big": 3, "neg": 4}, back.NodeIndex())
}

func TestSerializedWriteMinimal(t *testing.T) {
	out := serWrite(t, &Serialized{})
	assert.Equal(t, "{\n  \"nodes\": {},\n  \"root_eclasses\": []\n}", string(out))
	back := serRead(t, out)
	assert.Equal(t, &Serialized{}, back)
}

func TestSerializedWriteRejects(t *testing.T) {
	tests := []struct {
		name string
		s    Serialized
		want string
	}{
		{"NaN cost", Serialized{Nodes: []SerializedNode{{ID: "a", Class: "0", Cost: math.NaN()}}}, `$.nodes["a"].cost: want a finite number, got NaN`},
		{"Inf cost", Serialized{Nodes: []SerializedNode{{ID: "a", Class: "0", Cost: math.Inf(-1)}}}, `$.nodes["a"].cost: want a finite number, got -Inf`},
		{"duplicate id", Serialized{Nodes: []SerializedNode{{ID: "a", Class: "0"}, {ID: "a", Class: "1"}}}, `$.nodes["a"]: duplicate node id`},
		{"bad class data", Serialized{ClassData: []SerializedClassData{{Class: "0", Data: json.RawMessage(`{"a":`)}}}, `$.class_data["0"]: invalid JSON`},
		{"two values", Serialized{ClassData: []SerializedClassData{{Class: "0", Data: json.RawMessage(`1 2`)}}}, `$.class_data["0"]: invalid JSON`},
		{"empty class data", Serialized{ClassData: []SerializedClassData{{Class: "0"}}}, `$.class_data["0"]: empty value`},
		{"duplicate class data", Serialized{ClassData: []SerializedClassData{{Class: "0", Data: json.RawMessage(`1`)}, {Class: "0", Data: json.RawMessage(`2`)}}}, `$.class_data["0"]: duplicate e-class`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Write(&bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestSerializedWriteInvalidUTF8(t *testing.T) {
	s := &Serialized{Nodes: []SerializedNode{{ID: "a\xff", Op: "o", Class: "0", Cost: 1}}}
	back := serRead(t, serWrite(t, s))
	assert.Equal(t, "a\uFFFD", back.Nodes[0].ID)
}

func TestSerializedFloatFormat(t *testing.T) {
	// Expected strings are Python's repr, which wrote the corpus files.
	tests := []struct {
		f    float64
		want string
	}{
		{1, "1.0"},
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{0.1, "0.1"},
		{1e-4, "0.0001"},
		{0.00012345, "0.00012345"},
		{9.99e-5, "9.99e-05"},
		{1e15, "1000000000000000.0"},
		{9999999999999998, "9999999999999998.0"},
		{1e16, "1e+16"},
		{1.5e300, "1.5e+300"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{12109.344144546427, "12109.344144546427"},
		{-2.5, "-2.5"},
		{123456789.125, "123456789.125"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got := string(serAppendFloat(nil, tt.f))
			assert.Equal(t, tt.want, got)
			back, err := strconv.ParseFloat(got, 64)
			require.NoError(t, err)
			assert.Equal(t, math.Float64bits(tt.f), math.Float64bits(back))
		})
	}
}

func TestReadSerializedAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Serialized
	}{
		{"empty nodes", `{"nodes": {}}`, &Serialized{}},
		{"whitespace everywhere", " \r\n\t{ \"nodes\" : { } , \"root_eclasses\" : [ ] } \n", &Serialized{}},
		{
			"defaults and unknown fields",
			`{"nodes": {"a": {"eclass": "0", "op": "x", "extra": {"deep": [1, {"x": null}]}}}, "future": [true], "root_eclasses": ["0"]}`,
			&Serialized{Nodes: []SerializedNode{{ID: "a", Op: "x", Class: "0", Cost: 1}}, Roots: []string{"0"}},
		},
		{
			"file order kept and forward references",
			`{"nodes": {"z": {"op": "f", "eclass": "1", "children": ["b", "a"], "cost": 0}, "b": {"op": "b", "eclass": "0", "cost": -1.5e0}, "a": {"op": "a", "eclass": "0", "subsumed": true}}}`,
			&Serialized{Nodes: []SerializedNode{
				{ID: "z", Op: "f", Class: "1", Cost: 0, Children: []string{"b", "a"}},
				{ID: "b", Op: "b", Class: "0", Cost: -1.5},
				{ID: "a", Op: "a", Class: "0", Cost: 1, Subsumed: true},
			}},
		},
		{
			"escapes",
			`{"nodes": {"\u0061\"": {"op": "\ud83d\ude00\/\t", "eclass": "é", "children": ["a\""]}}, "comment": "c\u00e9"}`,
			&Serialized{Nodes: []SerializedNode{{ID: `a"`, Op: "😀/\t", Class: "é", Cost: 1, Children: []string{`a"`}}}, Comment: "cé"},
		},
		{
			"invalid UTF-8 becomes U+FFFD as in encoding/json",
			"{\"nodes\": {\"a\xff\": {\"op\": \"o\", \"eclass\": \"0\"}}}",
			&Serialized{Nodes: []SerializedNode{{ID: "a\uFFFD", Op: "o", Class: "0", Cost: 1}}},
		},
		{
			"class data kept verbatim in order",
			`{"nodes": {}, "class_data": {"9": {"type" : "Math"}, "1": [1,2], "x": "s"}}`,
			&Serialized{ClassData: []SerializedClassData{
				{Class: "9", Data: json.RawMessage(`{"type" : "Math"}`)},
				{Class: "1", Data: json.RawMessage(`[1,2]`)},
				{Class: "x", Data: json.RawMessage(`"s"`)},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadSerialized(strings.NewReader(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestReadSerializedMalformed(t *testing.T) {
	node := func(body string) string { return `{"nodes": {"1": {` + body + `}}}` }
	deep := `{"nodes": {}, "x": ` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`
	tests := []struct {
		name string
		in   string
		want string // substring of the error, starting with its JSON path
	}{
		{"empty input", ``, `$: syntax error at byte offset 0: unexpected end of input`},
		{"only whitespace", "  \n", `$: syntax error at byte offset 3: unexpected end of input`},
		{"top-level array", `[]`, `$: want an object, got array`},
		{"top-level null", `null`, `$: want an object, got null`},
		{"unquoted key", `{nodes: {}}`, `$: syntax error at byte offset 1: invalid character 'n' looking for beginning of object key string`},
		{"trailing garbage", `{"nodes": {}} x`, `$: syntax error at byte offset 14: invalid character 'x' after top-level value`},
		{"two documents", `{"nodes": {}}{"nodes": {}}`, `$: syntax error at byte offset 13: invalid character '{' after top-level value`},
		{"missing nodes", `{"root_eclasses": []}`, `$.nodes: missing`},
		{"nodes not object", `{"nodes": []}`, `$.nodes: want an object, got array`},
		{"duplicate nodes field", `{"nodes": {}, "nodes": {}}`, `$.nodes: duplicate field`},
		{"node not object", `{"nodes": {"1": 5}}`, `$.nodes["1"]: want an object, got number`},
		{"missing eclass", node(`"op": "a"`), `$.nodes["1"].eclass: missing`},
		{"missing op", node(`"eclass": "0"`), `$.nodes["1"].op: missing`},
		{"op not string", node(`"op": 1, "eclass": "0"`), `$.nodes["1"].op: want a string, got number`},
		{"eclass not string", node(`"op": "a", "eclass": 0`), `$.nodes["1"].eclass: want a string, got number`},
		{"cost string", `{"nodes": {"3": {"op": "a", "eclass": "0", "cost": "1"}}}`, `$.nodes["3"].cost: want a number, got string`},
		{"cost null", node(`"op": "a", "eclass": "0", "cost": null`), `$.nodes["1"].cost: want a number, got null`},
		{"cost NaN", node(`"op": "a", "eclass": "0", "cost": NaN`), `$.nodes["1"].cost: syntax error at byte offset 51: invalid character 'N' looking for beginning of value`},
		{"cost Infinity", node(`"op": "a", "eclass": "0", "cost": Infinity`), `$.nodes["1"].cost: syntax error at byte offset 51: invalid character 'I'`},
		{"cost out of range", node(`"op": "a", "eclass": "0", "cost": 1e999`), `$.nodes["1"].cost: number 1e999 out of range`},
		{"cost leading zero", node(`"op": "a", "eclass": "0", "cost": 01`), `$.nodes["1"]: syntax error at byte offset 52: invalid character '1' after object key:value pair`},
		{"cost bare minus", node(`"op": "a", "eclass": "0", "cost": -}`), `$.nodes["1"].cost: syntax error at byte offset 52: invalid character '}' in numeric literal`},
		{"cost bad fraction", node(`"op": "a", "eclass": "0", "cost": 1.}`), `$.nodes["1"].cost: syntax error at byte offset 53: invalid character '}' after decimal point in numeric literal`},
		{"cost bad exponent", node(`"op": "a", "eclass": "0", "cost": 1e+}`), `$.nodes["1"].cost: syntax error at byte offset 54: invalid character '}' in exponent of numeric literal`},
		{"children not array", node(`"op": "a", "eclass": "0", "children": "2"`), `$.nodes["1"].children: want an array, got string`},
		{"children null", node(`"op": "a", "eclass": "0", "children": null`), `$.nodes["1"].children: want an array, got null`},
		{"child not string", `{"nodes": {"12__0": {"op": "a", "eclass": "0", "children": ["12__0", 3]}}}`, `$.nodes["12__0"].children[1]: want a string, got number`},
		{"children trailing comma", node(`"op": "a", "eclass": "0", "children": ["1",]`), `$.nodes["1"].children[1]: syntax error at byte offset 60: invalid character ']' looking for beginning of value`},
		{"children missing comma", node(`"op": "a", "eclass": "0", "children": ["1" "1"]`), `$.nodes["1"].children: syntax error at byte offset 60: invalid character '"' after array element`},
		{"unknown child", `{"nodes": {"1": {"op": "a", "eclass": "0", "children": ["7"]}}}`, `$.nodes["1"].children[0]: unknown node "7"`},
		{"unknown root", `{"nodes": {"1": {"op": "a", "eclass": "0"}}, "root_eclasses": ["99"]}`, `$.root_eclasses[0]: unknown e-class "99"`},
		{"root is a node id not a class", `{"nodes": {"1": {"op": "a", "eclass": "0"}}, "root_eclasses": ["0", "1"]}`, `$.root_eclasses[1]: unknown e-class "1"`},
		{"root not string", `{"nodes": {}, "root_eclasses": ["0", null]}`, `$.root_eclasses[1]: want a string, got null`},
		{"roots not array", `{"nodes": {}, "root_eclasses": "0"}`, `$.root_eclasses: want an array, got string`},
		{"duplicate node id", `{"nodes": {"1": {"op": "a", "eclass": "0"}, "1": {"op": "b", "eclass": "0"}}}`, `$.nodes["1"]: duplicate node id`},
		{"duplicate node field", node(`"op": "a", "op": "b", "eclass": "0"`), `$.nodes["1"].op: duplicate field`},
		{"subsumed not bool", node(`"op": "a", "eclass": "0", "subsumed": "yes"`), `$.nodes["1"].subsumed: want a boolean, got string`},
		{"subsumed bad literal", node(`"op": "a", "eclass": "0", "subsumed": tru}`), `$.nodes["1"].subsumed: syntax error at byte offset 58: invalid character '}' in literal true`},
		{"comment not string", `{"nodes": {}, "comment": 1}`, `$.comment: want a string, got number`},
		{"class_data not object", `{"nodes": {}, "class_data": []}`, `$.class_data: want an object, got array`},
		{"class_data duplicate", `{"nodes": {}, "class_data": {"0": 1, "0": 2}}`, `$.class_data["0"]: duplicate e-class`},
		{"class_data bad value", `{"nodes": {}, "class_data": {"0": {"a" 1}}}`, `$.class_data["0"]: syntax error at byte offset 39: invalid character '1' after object key`},
		{"bad escape", node(`"op": "\x", "eclass": "0"`), `$.nodes["1"].op: syntax error at byte offset 25: invalid character 'x' in string escape code`},
		{"bad unicode escape", node(`"op": "\u12g4", "eclass": "0"`), `$.nodes["1"].op: syntax error at byte offset 28: invalid character 'g' in \u hexadecimal character escape`},
		{"control character in string", node("\"op\": \"a\nb\", \"eclass\": \"0\""), `$.nodes["1"].op: syntax error at byte offset 25: invalid character '\n' in string literal`},
		{"unterminated string", `{"nodes": {"1": {"op": "abc`, `$.nodes["1"].op: syntax error at byte offset 27: unexpected end of input`},
		{"truncated node", `{"nodes": {"1": {"op": "a"`, `$.nodes["1"]: syntax error at byte offset 26: unexpected end of input`},
		{"truncated nodes", `{"nodes": {"1": {"op": "a", "eclass": "0"}`, `$.nodes: syntax error at byte offset 42: unexpected end of input`},
		{"double comma", `{"nodes": {"1": {"op": "a",, }}}`, `$.nodes["1"]: syntax error at byte offset 27: invalid character ',' looking for beginning of object key string`},
		{"trailing comma in node", node(`"op": "a", "eclass": "0",`), `$.nodes["1"]: syntax error at byte offset 42: invalid character '}' looking for beginning of object key string`},
		{"missing colon", `{"nodes" {}}`, `$: syntax error at byte offset 9: invalid character '{' after object key`},
		{"bad unknown node field", node(`"op": "a", "eclass": "0", "x": [1 2]`), `$.nodes["1"].x: syntax error at byte offset 51: invalid character '2' after array element`},
		{"bad unknown field name", `{"nodes": {}, "a b": {"k": ]}}`, `$["a b"]: syntax error at byte offset 27: invalid character ']' looking for beginning of value`},
		{"nesting too deep", deep, `$.x: syntax error at byte offset 10018: exceeded max depth`},
		{"BOM", "\ufeff{\"nodes\": {}}", `$: syntax error at byte offset 0: invalid character 'ï' looking for beginning of value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadSerialized(strings.NewReader(tt.in))
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "$"), "error %q does not start with a JSON path", err)
			var syn *serSyntaxError
			if errors.As(err, &syn) {
				assert.False(t, json.Valid([]byte(tt.in)), "reported a syntax error in valid JSON")
			} else {
				assert.True(t, json.Valid([]byte(tt.in)), "malformed JSON not reported as a syntax error")
			}
		})
	}
}

func TestReadSerializedFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"nodes": {"1": {"op": 1}}}`), 0o644))
	_, err := ReadSerializedFile(bad)
	require.Error(t, err)
	assert.Equal(t, bad+`: $.nodes["1"].op: want a string, got number`, err.Error())

	missing := filepath.Join(dir, "missing.json")
	_, err = ReadSerializedFile(missing)
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), missing)
}

func TestSerializedExtractionGym(t *testing.T) {
	dir := extractionGymDir(t)
	ref := readReferenceCosts(t, dir)
	files := extractionGymFiles(t, dir)
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, filepath.FromSlash(name))
			orig, err := os.ReadFile(path)
			require.NoError(t, err)
			start := time.Now()
			s, err := ReadSerializedFile(path)
			elapsed := time.Since(start)
			require.NoError(t, err)
			if len(orig) > 1<<20 {
				t.Logf("read %s (%d bytes, %d nodes) in %v", name, len(orig), len(s.Nodes), elapsed)
			}

			r, ok := ref[name]
			require.True(t, ok, "%s has no row in reference-costs.csv", name)
			assert.Equal(t, r.enodes, len(s.Nodes), "enodes")
			classes := map[string]bool{}
			for _, n := range s.Nodes {
				classes[n.Class] = true
			}
			assert.Equal(t, r.eclasses, len(classes), "eclasses")
			assert.Equal(t, r.roots, len(s.Roots), "roots")
			assert.NotEmpty(t, s.Comment)

			out := serWrite(t, s)
			// The corpus was written in the layout Write produces, so
			// rewriting must reproduce each file exactly.
			assert.True(t, bytes.Equal(orig, out), "Write does not reproduce %s", name)
			assert.True(t, bytes.Equal(out, serWrite(t, serRead(t, out))), "Write→Read→Write differs for %s", name)
		})
	}
	for name := range ref {
		assert.Contains(t, files, name, "reference-costs.csv names a file that is not in %s", dir)
	}
}

// TestReadSerializedMatchesEncodingJSON checks the hand-written reader
// against encoding/json on the corpus.
func TestReadSerializedMatchesEncodingJSON(t *testing.T) {
	dir := extractionGymDir(t)
	for _, name := range extractionGymFiles(t, dir) {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
			require.NoError(t, err)
			var want struct {
				Nodes map[string]struct {
					Op       string   `json:"op"`
					Cost     *float64 `json:"cost"`
					Eclass   string   `json:"eclass"`
					Children []string `json:"children"`
				} `json:"nodes"`
				Roots   []string `json:"root_eclasses"`
				Comment string   `json:"comment"`
			}
			require.NoError(t, json.Unmarshal(data, &want))
			got := serRead(t, data)
			require.Len(t, got.Nodes, len(want.Nodes))
			for _, n := range got.Nodes {
				w, ok := want.Nodes[n.ID]
				require.True(t, ok, "node %q", n.ID)
				assert.Equal(t, w.Op, n.Op)
				assert.Equal(t, w.Eclass, n.Class)
				cost := 1.0
				if w.Cost != nil {
					cost = *w.Cost
				}
				assert.Equal(t, cost, n.Cost)
				assert.Equal(t, len(w.Children), len(n.Children))
				if len(w.Children) > 0 {
					assert.Equal(t, w.Children, n.Children)
				}
			}
			assert.Equal(t, want.Roots, got.Roots)
			assert.Equal(t, want.Comment, got.Comment)
		})
	}
}

func BenchmarkReadSerializedBert(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(extractionGymDir(b), "tensat", "bert.json"))
	require.NoError(b, err)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadSerialized(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteSerializedBert(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(extractionGymDir(b), "tensat", "bert.json"))
	require.NoError(b, err)
	s := serRead(b, data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := s.Write(&buf); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzReadSerialized(f *testing.F) {
	seeds := []string{
		``,
		`{}`,
		`[]`,
		`{"nodes": {}}`,
		`{"nodes": {"a": {"op": "x", "eclass": "0"}}, "root_eclasses": ["0"]}`,
		`{"nodes": {"a": {"op": "x", "eclass": "0", "cost": 2.5, "children": ["a", "b"]}, "b": {"op": "y", "eclass": "1", "subsumed": true}}, "comment": "c", "root_eclasses": ["1"], "class_data": {"0": {"type": "T"}, "1": null}}`,
		`{"nodes": {"\u0061\"": {"op": "\ud83d\ude00", "eclass": "é", "children": ["a\""]}}, "x": [1, {"y": [true, false, null]}]}`,
		`{"nodes": {"1": {"op": "a", "eclass": "0", "children": ["7"]}}}`,
		`{"nodes": {"1": {"op": "a", "eclass": "0"}}, "root_eclasses": ["99"]}`,
		`{"nodes": {"1": {"op": "a", "eclass": "0", "cost": "1"}}}`,
		`{"nodes": {"1": {"op": "a", "eclass": "0", "cost": 1e999}}}`,
		`{"nodes": {"1": {"op": "a", "eclass": "0", "cost": -0.0}}}`,
		`{"nodes": {"1": {"op": "a",, }}}`,
		`{"nodes": {"1": {"op": "a\x"`,
		"{\"nodes\": {\"\xff\": {\"op\": \"\", \"eclass\": \"\"}}, \"root_eclasses\": [\"\"]}",
		`{"nodes": {}, "class_data": {"0": [[[{"a": [1e5, -0, "\n"]}]]]}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	// Small corpus files, when present, give the fuzzer realistic shapes.
	if dir, err := filepath.Abs(filepath.Join("..", "..", "shared", "data", "extraction-gym", "egg")); err == nil {
		for _, name := range []string{"integ_one.json", "math_diff_same.json", "lambda_if_simple.json"} {
			if data, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSerialized(bytes.NewReader(data))
		if err != nil {
			require.Nil(t, s)
			require.True(t, strings.HasPrefix(err.Error(), "$"), "error %q does not start with a JSON path", err)
			var syn *serSyntaxError
			// A shape error may be found before a later syntax error, so
			// only this direction holds.
			if errors.As(err, &syn) {
				require.False(t, json.Valid(data), "syntax error in JSON that encoding/json accepts: %v", err)
			}
			return
		}
		require.True(t, json.Valid(data), "accepted JSON that encoding/json rejects")
		out := serWrite(t, s)
		back, err := ReadSerialized(bytes.NewReader(out))
		require.NoError(t, err, "cannot read back:\n%s", out)
		require.Equal(t, serNormalized(t, s), serNormalized(t, back))
		require.Equal(t, string(out), string(serWrite(t, back)))
	})
}
