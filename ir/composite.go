package ir

// rows splits a tensor of the node's shape into rows along axis: it
// returns the number of rows, the row length and the stride between a
// row's elements, and a function giving row r's first element.
func rowsAlong(shape Shape, axis int) (count, length int, stride int64, first func(r int) int64) {
	ax, _ := normAxis(axis, len(shape))
	inner := int64(1)
	for _, d := range shape[ax+1:] {
		inner *= int64(d)
	}
	length = int(shape[ax])
	count = int(shape.NumElements() / max(int64(length), 1))
	if length == 0 {
		count = 0
	}
	return count, length, inner, func(r int) int64 {
		o, i := int64(r)/inner, int64(r)%inner
		return o*int64(length)*inner + i
	}
}
