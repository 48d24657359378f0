// Package corpus owns where graphs come from: builders that emit ir graphs
// of decoder-only language models (llama, qwen2, mistral and gpt2 layers,
// and the mixtures of experts mixtral, qwen3_moe and gpt_oss; their
// building blocks and whole models, for prefill and for one decode step
// over an in-place KV cache) from a Hugging Face config.json, a set of
// embedded configs of real models and tiny test models, a registry of named
// graphs (MODEL:KIND, see Names and Build) and seeded random weights. ONNX
// import and safetensors weights live in the subpackages onnx and
// safetensors.
//
// The builders emit graphs the way a PyTorch export does, op by op:
// attention is matmul(q, k^T), a multiply by the scale, an additive causal
// mask, a decomposed softmax and matmul with v; RMS and layer norms, SiLU
// and GELU are their elementwise and reduction steps. Finding the fused
// kernels is the search's job, not the builder's. The only composite ops
// they emit are matmul and, for a mixture of experts, route and experts
// (ir.Route, ir.Experts), unless Options.Composite asks for the composite
// softmax, norm and attention ops instead.
//
// A config is built only when lumsearch can honour it: a key the parser
// neither reads nor knows to be harmless (ReadKeys, HarmlessKeys) must be
// absent or off, so that a feature the builders lack (shared experts, dense
// layers between the experts, a quantized checkpoint) is refused by name
// rather than built as another model, and a length beyond
// the config's positions is a PositionsError.
//
// Weights carry the Hugging Face checkpoint names
// (model.layers.0.self_attn.q_proj.weight, transformer.h.0.attn.c_attn.weight)
// so that a safetensors checkpoint can be matched to a graph by name.
//
// The package imports ir and its own subpackages, nothing else of the
// project.
package corpus
