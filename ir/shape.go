package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Dim is one dimension's extent. It is static for now; it is its own type
// so that symbolic dimensions can be added without rewriting every user.
type Dim int64

// Shape is a tensor's dimensions, outermost first. A scalar has rank 0.
type Shape []Dim

// Rank is the number of dimensions.
func (s Shape) Rank() int { return len(s) }

// NumElements is the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int64 {
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n
}

// Equal reports whether two shapes are the same.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy that does not share memory with s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Strides are the row-major element strides of a contiguous tensor.
func (s Shape) Strides() []int64 {
	st := make([]int64, len(s))
	n := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = n
		n *= int64(s[i])
	}
	return st
}

// String prints the shape as in the text format: [2,3,4], [] for a scalar.
func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(d), 10))
	}
	b.WriteByte(']')
	return b.String()
}

// Check reports a negative dimension or a shape too large to index.
func (s Shape) Check() error {
	n := int64(1)
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("shape %v: dimension %d is negative", s, i)
		}
		if d != 0 && n > (1<<62)/int64(d) {
			return fmt.Errorf("shape %v: more than 2^62 elements", s)
		}
		n *= int64(d)
	}
	return nil
}

// normAxis turns a possibly negative axis into one in [0, rank).
func normAxis(axis, rank int) (int, error) {
	if axis < -rank || axis >= rank {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += rank
	}
	return axis, nil
}

// BroadcastShapes returns the shape that numpy-style broadcasting of a and
// b gives, or an error naming both.
func BroadcastShapes(a, b Shape) (Shape, error) {
	n := max(len(a), len(b))
	out := make(Shape, n)
	for i := range n {
		da, db := Dim(1), Dim(1)
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}
