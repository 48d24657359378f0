package corpus

import (
	"math"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/quant"
)

// emitter writes one graph: an ir.Builder with the model's config, the
// resolved options and the ops that a PyTorch export of a Hugging Face
// model spells out. Every method returns ir.NoValue once the builder has
// failed, so model code builds straight through and checks at Build.
type emitter struct {
	*ir.Builder
	cfg *Config
	opt Options
	dt  ir.DType // weights and activations
	// q is how the layers' linear weights are stored; nil for the
	// model's dtype.
	q *Quantization

	// rows memoizes the [rows, features] views that affine makes, so that
	// projections of one input (q, k and v; gate and up) share one view.
	rows map[ir.Value]ir.Value
}

func newEmitter(name string, cfg *Config, opt Options, q *Quantization) *emitter {
	return &emitter{Builder: ir.NewBuilder(name), cfg: cfg, opt: opt, dt: opt.DType, q: q, rows: map[ir.Value]ir.Value{}}
}

// ok reports whether every value exists, so that a method can read their
// shapes.
func ok(vs ...ir.Value) bool {
	for _, v := range vs {
		if v < 0 {
			return false
		}
	}
	return true
}

// scalar is a rank-0 constant of dtype dt, rounded to it.
func (e *emitter) scalar(dt ir.DType, v float64) ir.Value { return e.Scalar(dt, dt.Round(v)) }

// weight declares a parameter in the model's dtype.
func (e *emitter) weight(name string, shape ...int) ir.Value {
	dims := make([]ir.Dim, len(shape))
	for i, d := range shape {
		dims[i] = ir.Dim(d)
	}
	return e.Weight(name, e.dt, dims...)
}

// upcast casts x to f32 when the model computes in a lower precision, as
// Hugging Face's norms and softmax do; downcast casts back.
func (e *emitter) upcast(x ir.Value) ir.Value {
	if e.dt == ir.F32 {
		return x
	}
	return e.Cast(x, ir.F32)
}

func (e *emitter) downcast(x ir.Value) ir.Value {
	if e.dt == ir.F32 {
		return x
	}
	return e.Cast(x, e.dt)
}

// last is the extent of x's last axis.
func (e *emitter) last(x ir.Value) int {
	s := e.Shape(x)
	return int(s[len(s)-1])
}

// affine is x @ w (+ bias) over x's last axis, the way aten decomposes a
// linear layer: x is flattened to rows, multiplied by the [in, out] matrix
// w, and reshaped back.
func (e *emitter) affine(x, w, bias ir.Value) ir.Value {
	if !ok(x, w) {
		return ir.NoValue
	}
	xs := e.Shape(x)
	ws := e.Shape(w)
	out := ws[len(ws)-1]
	flat := len(xs) != 2
	if flat {
		r, seen := e.rows[x]
		if !seen {
			r = e.Reshape(x, ir.Dim(xs[:len(xs)-1].NumElements()), xs[len(xs)-1])
			e.rows[x] = r
		}
		x = r
	}
	y := e.MatMul(x, w)
	if bias != ir.NoValue {
		y = e.Add(y, bias)
	}
	if flat {
		y = e.Reshape(y, append(xs[:len(xs)-1].Clone(), out)...)
	}
	return y
}

// linear is a Hugging Face nn.Linear named prefix: weight [out, in],
// applied as x @ transpose(weight), plus bias [out] when asked; a
// quantized weight is its checkpoint's tensors and their dequant (the
// bias stays in the model's dtype).
func (e *emitter) linear(x ir.Value, prefix string, in, out int, bias bool) ir.Value {
	if !e.q.quantizes(prefix, false) {
		return e.floatLinear(x, prefix, in, out, bias)
	}
	b := ir.NoValue
	if bias {
		b = e.weight(prefix+".bias", out)
	}
	if e.q.Acts != nil && e.q.Format == quant.FP8 {
		// W8A8: the quantized activations times the weight, in f32.
		if bias {
			b = e.upcast(b)
		}
		return e.downcast(e.affine(e.quantizedActs(x, prefix, in), e.dequantizedAs(prefix+".weight", nil, out, in, 1, ir.F32), b))
	}
	return e.affine(x, e.dequantized(prefix+".weight", nil, out, in, 1), b)
}

// floatLinear is linear with its weight in the model's dtype, whatever
// the quantization (a router's).
func (e *emitter) floatLinear(x ir.Value, prefix string, in, out int, bias bool) ir.Value {
	w := e.weight(prefix+".weight", out, in)
	b := ir.NoValue
	if bias {
		b = e.weight(prefix+".bias", out)
	}
	return e.affine(x, e.Transpose(w, 0, 1), b)
}

// conv1d is GPT-2's Conv1D named prefix: weight stored [in, out], plus
// bias [out]: addmm(bias, x, weight).
func (e *emitter) conv1d(x ir.Value, prefix string, in, out int) ir.Value {
	w := e.weight(prefix+".weight", in, out)
	b := e.weight(prefix+".bias", out)
	return e.affine(x, w, b)
}

// rmsNorm is LlamaRMSNorm named prefix over the last axis: in f32,
// x * rsqrt(mean(x*x) + eps), cast back, times the weight.
func (e *emitter) rmsNorm(x ir.Value, prefix string, eps float64) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	w := e.weight(prefix+".weight", e.last(x))
	if e.opt.Composite {
		return e.RMSNorm(x, w, eps)
	}
	h := e.upcast(x)
	v := e.Mean(e.Mul(h, h), -1)
	r := e.Rsqrt(e.Add(v, e.scalar(ir.F32, eps)))
	if e.cfg.ModelType == GPTOSS {
		// GptOssRMSNorm multiplies by the weight before the cast back.
		return e.downcast(e.Mul(e.upcast(w), e.Mul(h, r)))
	}
	return e.Mul(w, e.downcast(e.Mul(h, r)))
}

// layerNorm is nn.LayerNorm named prefix over the last axis: in f32,
// (x - mean) * rsqrt(mean((x - mean)^2) + eps), cast back, times the
// weight plus the bias.
func (e *emitter) layerNorm(x ir.Value, prefix string, eps float64) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	n := e.last(x)
	w := e.weight(prefix+".weight", n)
	b := e.weight(prefix+".bias", n)
	if e.opt.Composite {
		return e.LayerNorm(x, w, b, eps)
	}
	h := e.upcast(x)
	c := e.Sub(h, e.Mean(h, -1))
	v := e.Mean(e.Mul(c, c), -1)
	r := e.Rsqrt(e.Add(v, e.scalar(ir.F32, eps)))
	return e.Add(e.Mul(e.downcast(e.Mul(c, r)), w), b)
}

// softmax normalizes exp(x) along the last axis, in f32, as aten
// decomposes it: exp(x - max(x)) / sum(exp(x - max(x))).
func (e *emitter) softmax(x ir.Value) ir.Value {
	if !ok(x) {
		return ir.NoValue
	}
	axis := len(e.Shape(x)) - 1
	if e.opt.Composite {
		return e.Softmax(x, axis)
	}
	h := e.upcast(x)
	ex := e.Exp(e.Sub(h, e.ReduceMax(h, axis)))
	return e.downcast(e.Div(ex, e.Sum(ex, axis)))
}

// activation applies an Act function elementwise.
func (e *emitter) activation(x ir.Value, act string) ir.Value {
	switch act {
	case ActSiLU:
		return e.Mul(x, e.Sigmoid(x))
	case ActGELU:
		// aten's gelu: x * 0.5 * (1 + erf(x * M_SQRT1_2)).
		half := e.Mul(x, e.scalar(e.dt, 0.5))
		return e.Mul(half, e.Add(e.scalar(e.dt, 1), e.Erf(e.Mul(x, e.scalar(e.dt, 1/math.Sqrt2)))))
	case ActGELUTanh:
		// transformers' NewGELUActivation:
		// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
		cube := e.Pow(x, e.scalar(e.dt, 3))
		inner := e.Mul(e.scalar(e.dt, math.Sqrt(2/math.Pi)), e.Add(x, e.Mul(e.scalar(e.dt, 0.044715), cube)))
		half := e.Mul(e.scalar(e.dt, 0.5), x)
		return e.Mul(half, e.Add(e.scalar(e.dt, 1), e.Tanh(inner)))
	case ActReLU:
		return e.Relu(x)
	}
	return e.Mul(x, e.Sigmoid(x)) // Validate admits no other activation
}

// gatedMLP is LlamaMLP named prefix: down(act(gate(x)) * up(x)), SwiGLU
// when the activation is silu.
func (e *emitter) gatedMLP(x ir.Value, prefix string) ir.Value {
	c := e.cfg
	g := e.linear(x, prefix+".gate_proj", c.HiddenSize, c.IntermediateSize, c.MLPBias)
	u := e.linear(x, prefix+".up_proj", c.HiddenSize, c.IntermediateSize, c.MLPBias)
	h := e.Mul(e.activation(g, c.HiddenAct), u)
	return e.linear(h, prefix+".down_proj", c.IntermediateSize, c.HiddenSize, c.MLPBias)
}

// gpt2MLP is GPT2MLP named prefix: c_proj(act(c_fc(x))).
func (e *emitter) gpt2MLP(x ir.Value, prefix string) ir.Value {
	c := e.cfg
	h := e.conv1d(x, prefix+".c_fc", c.HiddenSize, c.IntermediateSize)
	return e.conv1d(e.activation(h, c.HiddenAct), prefix+".c_proj", c.IntermediateSize, c.HiddenSize)
}
