// Package openai owns the OpenAI-compatible wire format at the edge of the
// server: the JSON shapes of requests, responses, stream chunks, model lists
// and errors, the validation of incoming requests, and the server-sent-event
// framing of streams.
//
// It knows nothing about scheduling, tokenizers or HTTP routing. A handler
// decodes a body with [DecodeCompletion] or [DecodeChat], reads the normalized
// sampling parameters with Sampling, and replies with [Completion],
// [ChatCompletion] or the chunk types through [EventWriter]. Every failure a
// client can cause comes back as an [*Error] that serializes exactly as
// OpenAI's own error objects do, so the official clients surface it with the
// right status, message and param.
//
// Field names follow the OpenAI API reference; top_k, min_tokens and
// ignore_eos follow vLLM's extensions.
package openai
