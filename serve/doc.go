// Package serve owns what surrounds a compiled serving step: the
// scheduler (continuous batching, first come first served: admission by
// free KV blocks and a per-step token budget, chunked prefill mixed with
// decodes, preemption by recompute), the KV block allocator, the
// sampling parameters each sequence brings to the step (sampling itself
// runs on the device, beside the step: package serve/sample), the
// OpenAI-compatible HTTP API (the wire format is package serve/openai)
// and its Prometheus metrics. Text goes through package tokenizer.
//
// The behaviour follows vLLM's scheduler and the OpenAI API; the Go shape
// follows Ollama's server and net/http. The engine that runs the step is
// an interface: a compiled folder under the CPU emulation (OpenFolder) or
// a simulated step (SimulatedEngine) that takes a given time and returns
// deterministic logits computed through the batch's own block tables.
package serve
