package onnx

import "slices"

// sinceVersions lists, for every operator of the default domain that the
// importer implements, each opset version in which the operator's
// definition changed (its "since_version"s), oldest first, as the ONNX
// operator changelog (docs/Changelog.md, docs/Operators.md) records them
// through ONNX 1.22 (opset 27). Many operators were re-versioned only to
// admit new element types (bfloat16 at 13, float8 at 19 and 21, 4-bit
// types at 21 and 23, float8e8m0 at 24, 2-bit types at 25); a version's
// meaning is given by the handler, which switches on the version in effect
// where the semantics changed.
//
// The version of an operator in effect for a model is the largest entry
// not above the model's opset of the default domain. Which of these
// versions are implemented is said where each handler is registered
// (opsets.go); a model whose version in effect is not implemented is
// refused with an error naming the node, the operator and the opset.
var sinceVersions = map[string][]int64{
	"Abs":                   {1, 6, 13},
	"Add":                   {1, 6, 7, 13, 14},
	"And":                   {1, 7},
	"ArgMax":                {1, 11, 12, 13},
	"ArgMin":                {1, 11, 12, 13},
	"Attention":             {23, 24, 25},
	"BatchNormalization":    {1, 6, 7, 9, 14, 15},
	"Cast":                  {1, 6, 9, 13, 19, 21, 23, 24, 25},
	"CastLike":              {15, 19, 21, 23, 24, 25},
	"Ceil":                  {1, 6, 13},
	"Celu":                  {12},
	"Clip":                  {1, 6, 11, 12, 13},
	"Concat":                {1, 4, 11, 13},
	"Constant":              {1, 9, 11, 12, 13, 19, 21, 23, 24, 25},
	"ConstantOfShape":       {9, 20, 21, 23, 24, 25},
	"Cos":                   {7, 22},
	"CumSum":                {11, 14},
	"Div":                   {1, 6, 7, 13, 14},
	"Elu":                   {1, 6, 22},
	"Equal":                 {1, 7, 11, 13, 19},
	"Erf":                   {9, 13},
	"Exp":                   {1, 6, 13},
	"Expand":                {8, 13},
	"Flatten":               {1, 9, 11, 13, 21, 23, 24, 25},
	"Floor":                 {1, 6, 13},
	"Gather":                {1, 11, 13},
	"GatherElements":        {11, 13},
	"Gelu":                  {20},
	"Gemm":                  {1, 6, 7, 9, 11, 13},
	"Greater":               {1, 7, 9, 13},
	"GreaterOrEqual":        {12, 16},
	"GroupNormalization":    {18, 21},
	"HardSigmoid":           {1, 6, 22},
	"HardSwish":             {14, 22},
	"Identity":              {1, 13, 14, 16, 19, 21, 23, 24, 25},
	"InstanceNormalization": {1, 6, 22},
	"LayerNormalization":    {17},
	"LeakyRelu":             {1, 6, 16},
	"Less":                  {1, 7, 9, 13},
	"LessOrEqual":           {12, 16},
	"Log":                   {1, 6, 13},
	"LogSoftmax":            {1, 11, 13},
	"MatMul":                {1, 9, 13},
	"Max":                   {1, 6, 8, 12, 13},
	"Mean":                  {1, 6, 8, 13},
	"Min":                   {1, 6, 8, 12, 13},
	"Mish":                  {18, 22},
	"Mod":                   {10, 13},
	"Mul":                   {1, 6, 7, 13, 14},
	"Neg":                   {1, 6, 13},
	"Not":                   {1},
	"Or":                    {1, 7},
	"Pad":                   {1, 2, 11, 13, 18, 19, 21, 23, 24, 25},
	"Pow":                   {1, 7, 12, 13, 15},
	"RMSNormalization":      {23},
	"Range":                 {11},
	"Reciprocal":            {1, 6, 13},
	"ReduceMax":             {1, 11, 12, 13, 18, 20},
	"ReduceMean":            {1, 11, 13, 18},
	"ReduceMin":             {1, 11, 12, 13, 18, 20},
	"ReduceSum":             {1, 11, 13},
	"ReduceSumSquare":       {1, 11, 13, 18},
	"Relu":                  {1, 6, 13, 14},
	"Reshape":               {1, 5, 13, 14, 19, 21, 23, 24, 25},
	"RotaryEmbedding":       {23},
	"Selu":                  {1, 6, 22},
	"Shape":                 {1, 13, 15, 19, 21, 23, 24, 25},
	"Sigmoid":               {1, 6, 13},
	"Sign":                  {9, 13},
	"Sin":                   {7, 22},
	"Size":                  {1, 13, 19, 21, 23, 24, 25},
	"Slice":                 {1, 10, 11, 13},
	"Softmax":               {1, 11, 13},
	"Softplus":              {1, 22},
	"Softsign":              {1, 22},
	"Split":                 {1, 2, 11, 13, 18},
	"Sqrt":                  {1, 6, 13},
	"Squeeze":               {1, 11, 13, 21, 23, 24, 25},
	"Sub":                   {1, 6, 7, 13, 14},
	"Sum":                   {1, 6, 8, 13},
	"Tanh":                  {1, 6, 13},
	"Transpose":             {1, 13, 21, 23, 24, 25},
	"Trilu":                 {14},
	"Unsqueeze":             {1, 11, 13, 21, 23, 24, 25},
	"Where":                 {9, 16},
	"Xor":                   {1, 7},
}

// versionInEffect returns the since_version of op that a model importing
// opset of the default domain uses, and false when op did not exist yet
// at that opset (or is not in the table).
func versionInEffect(op string, opset int64) (int64, bool) {
	vs := sinceVersions[op]
	i, found := slices.BinarySearch(vs, opset)
	if found {
		return vs[i], true
	}
	if i == 0 {
		return 0, false
	}
	return vs[i-1], true
}
