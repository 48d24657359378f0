package rules

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// parseCond parses cond as the condition of a rule whose left side binds
// the class variables ?x, ?y, ?w and the payload variable ?p.
func parseCond(cond string) (*Cond, error) {
	rf, err := ParseRules("c.rules", []byte("rule r: (f[?p] ?x ?y ?w) => ?x if "+cond), nil)
	if err != nil {
		return nil, err
	}
	return rf.Rules[0].Cond, nil
}

func TestParseCond(t *testing.T) {
	for _, tc := range []struct {
		src, want string // want: the condition printed back; "" means src
	}{
		{src: "rank(?x) == 2"},
		{src: "shape(?x) == shape(?y) and dtype(?x) != dtype(?y)"},
		{src: "shape(?x)[0] < shape(?y)[-1] and size(?x) <= 4096 and rank(?y) > 0 and rank(?y) >= 1"},
		{src: "shape(?x)[-1] % 16 == 0"},
		{src: "16 != shape(?x)[ 1 ] % 8", want: "16 != shape(?x)[1] % 8"},
		{src: "const(?y) == -1 and const(?w) < 0.5 and const(?x) >= -1e-05"},
		{src: "const(?y)==1.0", want: "const(?y) == 1"},
		{src: "dtype(?x) == bf16 and bool != dtype(?y) and dtype(?w) == i64"},
		{src: "axis(?p) == -1 and axis(?p) != rank(?x)"},
		{src: "weightonly(?w) and not weightonly(?x)"},
		{src: "weightonly(?w)\n    and\n    rank(?w) == 2", want: "weightonly(?w) and rank(?w) == 2"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			c, err := parseCond(tc.src)
			require.NoError(t, err)
			want := tc.want
			if want == "" {
				want = tc.src
			}
			require.Equal(t, want, c.String())
		})
	}
}

func TestExprType(t *testing.T) {
	c, err := parseCond("rank(?x) == const(?y) and dtype(?x) == f32 and shape(?x) == shape(?y) and weightonly(?w) and 1.5 > 1")
	require.NoError(t, err)
	var got [][2]ExprType
	for _, cmp := range c.Cmps {
		pair := [2]ExprType{cmp.Left.Type()}
		if cmp.Right != nil {
			pair[1] = cmp.Right.Type()
		}
		got = append(got, pair)
	}
	require.Equal(t, [][2]ExprType{
		{TypeInt, TypeFloat}, {TypeDType, TypeDType}, {TypeShape, TypeShape}, {TypeBool, 0}, {TypeFloat, TypeInt},
	}, got)
	require.Equal(t, []CmpOp{CmpEq, CmpEq, CmpEq, CmpTrue, CmpGt}, []CmpOp{c.Cmps[0].Op, c.Cmps[1].Op, c.Cmps[2].Op, c.Cmps[3].Op, c.Cmps[4].Op})
}

func TestParseCondErrors(t *testing.T) {
	// The condition starts at column 35: "rule r: (f[?p] ?x ?y ?w) => ?x if ".
	for _, tc := range []struct {
		src, want string
	}{
		{"rank(?z) == 1", "c.rules:1:40: ?z is not bound by the left side"},
		{"rank(?p) == 1", "c.rules:1:40: rank needs a class variable, but ?p is a payload variable"},
		{"weightonly(?p)", "c.rules:1:46: weightonly needs a class variable, but ?p is a payload variable"},
		{"axis(?x) == 1", "c.rules:1:40: axis needs a payload variable (sum[?p]), but ?x is a class variable"},
		{"foo(?x) == 1", "c.rules:1:35: unknown function foo (want shape, rank, size, dtype, const, weightonly or axis)"},
		{"dtype(?x) == f64", `c.rules:1:48: unknown dtype "f64" (want f32, f16, bf16, i32, i64, bool or u8)`},
		{"dtype(?x) == 1", "c.rules:1:45: cannot compare dtype(?x) (a dtype) with 1 (an integer)"},
		{"shape(?x) == 4", "c.rules:1:45: cannot compare shape(?x) (a shape) with 4 (an integer)"},
		{"const(?x) == f32", "c.rules:1:45: cannot compare const(?x) (a number) with f32 (a dtype)"},
		{"dtype(?x) < f32", "c.rules:1:45: dtypes compare only with == and !="},
		{"shape(?x) >= shape(?y)", "c.rules:1:45: shapes compare only with == and !="},
		{"weightonly(?w) == 1", "c.rules:1:50: weightonly(?w) is a condition by itself and cannot be compared: write weightonly(?w) or not weightonly(?w)"},
		{"not rank(?x) == 1", "c.rules:1:35: 'not' applies only to weightonly(...); for rank(?x), use != or the opposite comparison"},
		{"rank(?x)", "c.rules:1:43: want a comparison (==, !=, <, <=, > or >=) after rank(?x), got the end of the condition"},
		{"rank(?x) = 1", "c.rules:1:44: unknown operator = (want ==, !=, <, <=, > or >=)"},
		{"rank(?x) => 1", "c.rules:1:44: unknown operator = (want ==, !=, <, <=, > or >=)"},
		{"rank(?x)[0] == 1", "c.rules:1:43: only shape(...) can be indexed"},
		{"shape(?x)[?y] == 1", "c.rules:1:45: want an integer index, got '?y'"},
		{"shape(?x)[1.5] == 1", "c.rules:1:45: want an integer index, got '1.5'"},
		{"shape(?x)[0 == 1", "c.rules:1:47: want ']' after the index, got '=='"},
		{"shape(?x == 1", "c.rules:1:44: want ')' after shape(?x, got '=='"},
		{"shape() == 1", "c.rules:1:41: shape takes one variable, as in shape(?x); got ')'"},
		{"shape == 1", "c.rules:1:35: shape needs a variable: shape(?x)"},
		{"const(?x) % 2 == 0", "c.rules:1:45: % takes integers, but const(?x) is a number"},
		{"rank(?x) % 0 == 0", "c.rules:1:44: % by zero"},
		{"rank(?x) == 1 or rank(?x) == 2", "c.rules:1:49: 'or' is not supported: write two rules"},
		{"rank(?x) == 1, rank(?y) == 1", `c.rules:1:48: unexpected ',' in condition`},
		{"rank(?x) == 1 rank(?y) == 1", "c.rules:1:49: want 'and' or the end of the condition, got 'rank'"},
		{"rank(?x) == 1 and", "c.rules:1:52: want a number, a dtype or a function such as shape(?x), got the end of the condition"},
		{"rank(?x) == 12abc", "c.rules:1:47: bad number \"12abc\""},
		{"rank(?x) == -", `c.rules:1:47: bad number "-"`},
		{"rank(?x) == 99999999999999999999", "c.rules:1:47: integer 99999999999999999999 out of range"},
		{"rank(?) == 1", "c.rules:1:40: variable without a name"},
		{"rank(?x) == 1 and\n\tsize(?q) > 2", "c.rules:2:7: ?q is not bound by the left side"},
		{"rank(?x) == 1 & rank(?y) == 2", `c.rules:1:49: unexpected '&' in condition`},
	} {
		t.Run(tc.src, func(t *testing.T) {
			_, err := parseCond(tc.src)
			require.EqualError(t, err, tc.want)
		})
	}
}

// fakeFacts answers from maps; a missing key is an unknown fact.
type fakeFacts struct {
	shapes map[string][]int64
	dtypes map[string]string
	consts map[string]float64
	weight map[string]bool
	axes   map[string]int64
}

func (f fakeFacts) Shape(v string) ([]int64, bool) { s, ok := f.shapes[v]; return s, ok }
func (f fakeFacts) DType(v string) (string, bool)  { d, ok := f.dtypes[v]; return d, ok }
func (f fakeFacts) Const(v string) (float64, bool) { c, ok := f.consts[v]; return c, ok }
func (f fakeFacts) WeightOnly(v string) bool       { return f.weight[v] }
func (f fakeFacts) Axis(pv string) (int64, bool)   { a, ok := f.axes[pv]; return a, ok }

func TestCondEval(t *testing.T) {
	facts := fakeFacts{
		shapes: map[string][]int64{"?x": {2, 3, 64}, "?y": {2, 3, 64}, "?w": {64, 1 << 40, 1 << 40}},
		dtypes: map[string]string{"?x": "f32", "?y": "f16"},
		consts: map[string]float64{"?y": 1, "?w": math.NaN()},
		weight: map[string]bool{"?w": true},
		axes:   map[string]int64{"?p": -1},
	}
	for _, tc := range []struct {
		cond string
		want bool
	}{
		{"rank(?x) == 3", true},
		{"rank(?x) != 3", false},
		{"shape(?x)[0] == 2 and shape(?x)[-1] == 64 and shape(?x)[-3] == 2", true},
		{"shape(?x)[3] == 0", false},  // out of range
		{"shape(?x)[-4] != 0", false}, // out of range
		{"shape(?x) == shape(?y)", true},
		{"shape(?x) != shape(?w)", true},
		{"shape(?x)[-1] % 16 == 0 and shape(?x)[1] % 2 == 1", true},
		{"shape(?x)[-1] % shape(?w)[1] == 64", true},
		{"rank(?x) % shape(?x)[0] < 2", true},
		{"size(?x) == 384 and size(?x) > 383.5", true},
		{"size(?w) > 0", false}, // overflows: unknown
		{"dtype(?x) == f32 and dtype(?y) == f16", true},
		{"dtype(?x) == dtype(?y)", false},
		{"dtype(?x) != dtype(?y)", true},
		{"dtype(?w) != f32", false}, // unknown dtype
		{"const(?y) == 1 and const(?y) <= 1 and const(?y) >= 1.0", true},
		{"const(?y) < 1", false},
		{"const(?y) > 0.5", true},
		{"const(?x) == 0", false}, // not a constant
		{"const(?x) != 0", false}, // still not known
		{"const(?w) == 0", false}, // NaN
		{"const(?w) != 0", true},  // NaN
		{"const(?w) >= 0", false}, // NaN
		{"weightonly(?w)", true},
		{"weightonly(?x)", false},
		{"not weightonly(?x)", true},
		{"not weightonly(?w)", false},
		{"axis(?p) == -1 and axis(?p) < 0", true},
		{"rank(?x) == 3 and rank(?x) == 2", false},
		{"1 < 2 and -3 >= -3 and 2 > 1 and 1 <= 1", true},
	} {
		t.Run(tc.cond, func(t *testing.T) {
			c, err := parseCond(tc.cond)
			require.NoError(t, err)
			got, err := c.Eval(facts)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	t.Run("nil condition holds", func(t *testing.T) {
		var c *Cond
		ok, err := c.Eval(facts)
		require.NoError(t, err)
		require.True(t, ok)
	})
	t.Run("no axis fact", func(t *testing.T) {
		c, err := parseCond("axis(?p) == 0")
		require.NoError(t, err)
		ok, err := c.Eval(fakeFacts{})
		require.NoError(t, err)
		require.False(t, ok)
	})
}

// TestCondEvalMalformed checks that a hand-built Cond the parser would
// reject is an error, not a panic.
func TestCondEvalMalformed(t *testing.T) {
	dt := &Expr{Kind: ExprDType, DType: "f32"}
	one := &Expr{Kind: ExprInt, Int: 1}
	for _, tc := range []struct {
		name string
		cmp  *Cmp
		want string
	}{
		{"dtype with integer", &Cmp{Op: CmpEq, Left: dt, Right: one}, "f32 == 1: cannot compare a dtype with an integer"},
		{"ordered dtypes", &Cmp{Op: CmpLt, Left: dt, Right: dt}, "f32 < f32: cannot compare a dtype with a dtype"},
		{"test of an integer", &Cmp{Op: CmpTrue, Left: one}, "1: 1 is not a boolean"},
		{"missing right side", &Cmp{Op: CmpEq, Left: one}, "comparison without a right operand: 1"},
		{"unknown kind", &Cmp{Op: CmpEq, Left: &Expr{Kind: 99}, Right: one}, "unknown expression kind 99"},
		{"modulo of a dtype", &Cmp{Op: CmpEq, Left: &Expr{Kind: ExprMod, X: dt, Y: one}, Right: one}, "f32 % 1: % takes integers"},
		{"unknown operator", &Cmp{Op: 42, Left: one, Right: one}, "unknown comparison operator 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := (&Cond{Cmps: []*Cmp{tc.cmp}}).Eval(noFacts{})
			require.EqualError(t, err, tc.want)
			require.False(t, ok)
		})
	}
}
