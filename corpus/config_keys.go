package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A config.json key is one of three things to lumsearch: read (the
// parser reads it, and the builders implement every value Validate
// accepts), harmless (lumsearch does not read it because it does not change
// what the model computes at inference), or unknown. An unknown key is
// refused unless its value is the one that turns its feature off, so that a
// config asking for something the builders do not implement (Mixtral's
// num_local_experts under model_type mistral, a partial rotary embedding)
// is refused by name instead of being built as another model.
// quantization_config is read (quant_config.go), its own keys checked
// the same way. The lists follow the transformers config classes
// (LlamaConfig, Qwen2Config, MistralConfig, MixtralConfig, Qwen3MoeConfig,
// GptOssConfig, GPT2Config and their base, PretrainedConfig).

// keySet lists one model type's keys.
type keySet struct {
	// read are the keys the parser reads.
	read []string
	// harmless are the model type's own keys that change nothing at
	// inference; commonHarmless are every type's.
	harmless []string
}

// llamaRead are the keys the parser reads for every llama-family config.
var llamaRead = []string{
	"model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
	"num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "tie_word_embeddings",
	"rms_norm_eps", "hidden_act", "rope_theta", "rope_scaling", "rope_parameters", "quantization_config",
}

// configKeys are the keys of each model type.
var configKeys = map[string]keySet{
	Llama: {
		read: append(slices.Clone(llamaRead), "attention_bias", "mlp_bias"),
		// pretraining_tp > 1 makes transformers split each projection
		// into slices whose products it sums: the same function.
		// Dropout is off at inference.
		harmless: []string{"pretraining_tp", "attention_dropout"},
	},
	Qwen2: {
		read:     append(slices.Clone(llamaRead), "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"),
		harmless: []string{"attention_dropout"},
	},
	Mistral: {
		read:     append(slices.Clone(llamaRead), "sliding_window"),
		harmless: []string{"attention_dropout"},
	},
	Mixtral: {
		read: append(slices.Clone(llamaRead), "sliding_window", "num_local_experts", "num_experts_per_tok", "router_jitter_noise"),
		// The router's auxiliary loss is a training loss; Mixtral's
		// router jitter is read, since a model trained with it is refused.
		harmless: []string{"attention_dropout", "router_aux_loss_coef", "output_router_logits"},
	},
	Qwen3MoE: {
		read: append(slices.Clone(llamaRead), "attention_bias", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
			"norm_topk_prob", "use_sliding_window", "sliding_window", "max_window_layers", "decoder_sparse_step", "mlp_only_layers"),
		harmless: []string{"attention_dropout", "router_aux_loss_coef", "output_router_logits"},
	},
	GPTOSS: {
		read: append(slices.Clone(llamaRead), "attention_bias", "sliding_window", "layer_types", "num_local_experts",
			"num_experts_per_tok", "swiglu_limit", "swiglu_alpha"),
		harmless: []string{
			"attention_dropout", "router_aux_loss_coef", "output_router_logits",
			// openai's own spellings of num_experts_per_tok and
			// rope_scaling's original_max_position_embeddings, which
			// transformers keeps and never reads.
			"experts_per_token", "initial_context_length",
		},
	},
	GPT2: {
		read: []string{
			"model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "n_inner",
			"layer_norm_epsilon", "tie_word_embeddings", "activation_function", "scale_attn_weights",
			"quantization_config",
		},
		harmless: []string{
			// Dropout is off at inference.
			"resid_pdrop", "embd_pdrop", "attn_pdrop",
			// The sequence summary of GPT2DoubleHeadsModel's
			// classification head, which the LM does not have.
			"summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
			// The context size of old configs; transformers sizes
			// everything by n_positions.
			"n_ctx",
			// Computes the same attention with the scale applied
			// before the product and the scores in f32.
			"reorder_and_upcast_attn",
		},
	},
}

// commonHarmless are PretrainedConfig's keys (and lumsearch's own
// annotation) that change nothing a forward pass computes: provenance,
// token ids, training and output switches, generation defaults and the
// labels of classification heads.
var commonHarmless = []string{
	// Provenance and dtype (lumsearch's dtype is --dtype).
	"_source", "_name_or_path", "_commit_hash", "architectures", "transformers_version",
	"torch_dtype", "dtype", "use_bfloat16",
	// Token ids, read by tokenizers and generate.
	"bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
	// Training, and what a forward pass returns besides its outputs.
	"initializer_range", "use_cache", "tf_legacy_loss", "gradient_checkpointing",
	"return_dict", "use_return_dict", "output_attentions", "output_hidden_states", "torchscript",
	"is_decoder", "_attn_implementation", "attn_implementation", "_attn_implementation_autoset",
	// Feed-forward chunking computes the same rows in pieces.
	"chunk_size_feed_forward",
	// Generation defaults, read by generate.
	"max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
	"diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
	"length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
	"num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
	"forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
	"suppress_tokens", "begin_suppress_tokens",
	// Classification heads and tokenizer hints.
	"finetuning_task", "id2label", "label2id", "num_labels", "problem_type", "task_specific_params",
	"tokenizer_class", "prefix",
}

// ropeKeys are the keys of rope_scaling and rope_parameters that the
// parser reads.
var ropeKeys = []string{
	"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
	"beta_fast", "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim",
}

// offValues are unknown keys whose documented off value is not the
// generic one (null, false, 0 or empty): a value of 1 leaves the rotary
// embedding over the whole head.
var offValues = map[string]float64{
	"partial_rotary_factor": 1,
}

// ReadKeys lists the config.json keys lumsearch reads for a model type,
// sorted; HarmlessKeys those it ignores because they change nothing at
// inference. Any other key must be absent or at its off value.
func ReadKeys(modelType string) []string {
	return sorted(configKeys[modelType].read)
}

// HarmlessKeys lists the keys lumsearch ignores for a model type because
// they change nothing at inference, sorted (see ReadKeys).
func HarmlessKeys(modelType string) []string {
	ks, ok := configKeys[modelType]
	if !ok {
		return nil
	}
	return sorted(append(slices.Clone(commonHarmless), ks.harmless...))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// checkKeys refuses the keys of f that are neither read (known) nor
// harmless and are not at their off value, naming each with its value.
// prefix names a nested object ("rope_scaling.") in errors.
func checkKeys(f fields, prefix string, known, harmless []string) error {
	var bad []string
	for _, k := range sorted(mapKeys(f)) {
		if slices.Contains(known, k) || slices.Contains(harmless, k) || isOff(k, f[k]) {
			continue
		}
		bad = append(bad, fmt.Sprintf("%q: %s", prefix+k, shortJSON(f[k])))
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("lumsearch does not implement %s (a key it neither reads nor knows to be harmless must be absent or off: null, false, 0 or empty)",
		strings.Join(bad, ", "))
}

// checkConfigKeys is checkKeys for a whole config of model type mt.
func checkConfigKeys(mt string, f fields) error {
	ks := configKeys[mt]
	if err := checkKeys(f, "", ks.read, append(slices.Clone(commonHarmless), ks.harmless...)); err != nil {
		return fmt.Errorf("model_type %q: %w", mt, err)
	}
	return nil
}

func mapKeys(f fields) []string {
	out := make([]string, 0, len(f))
	for k := range f {
		out = append(out, k)
	}
	return out
}

// isOff says whether raw is key's off value: null, false, a zero, an empty
// string, array or object, or the key's documented off value.
func isOff(key string, raw json.RawMessage) bool {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case json.Number:
		x, err := v.Float64()
		if err != nil {
			return false
		}
		if off, ok := offValues[key]; ok {
			return x == off
		}
		return x == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// shortJSON is raw compacted, cut to a length an error can carry.
func shortJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	const limit = 60
	if r := []rune(b.String()); len(r) > limit {
		return string(r[:limit]) + "..."
	}
	return b.String()
}
