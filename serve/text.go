package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/lumsearch/lumsearch/tokenizer"
)

// Text is what turns requests into token ids and ids back into text for
// one model: its tokenizer, its chat template (nil when it has none: chat
// requests are then refused, as vLLM refuses them) and the ids that end a
// generation (generation_config.json's eos_token_id, else the tokenizer's
// EOS).
type Text struct {
	Tokenizer *tokenizer.Tokenizer
	Chat      *tokenizer.ChatTemplate
	EOS       []int64
}

// TextOptions say where a model's text files are.
type TextOptions struct {
	// Folder is the Hugging Face folder (tokenizer.json,
	// tokenizer_config.json, generation_config.json).
	Folder string
	// Tokenizer, when set, is a tokenizer.json to use instead of the
	// folder's; its tokenizer_config.json is looked for beside it.
	Tokenizer string
	// ChatTemplate, when set, is a file holding a Jinja chat template
	// (or a tokenizer_config.json with one) to use instead of the
	// tokenizer's.
	ChatTemplate string
}

// LoadText loads a model's text files and checks them against a vocabulary
// of vocab ids: a tokenizer with an id the model has no row for is refused.
func LoadText(o TextOptions, vocab int) (*Text, error) {
	path := o.Tokenizer
	if path == "" {
		if o.Folder == "" {
			return nil, fmt.Errorf("no tokenizer: the model comes from no Hugging Face folder; give --tokenizer PATH/tokenizer.json")
		}
		path = filepath.Join(o.Folder, "tokenizer.json")
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if n := tok.VocabSize(); n > vocab {
		return nil, fmt.Errorf("tokenizer %s has %d ids; the model's vocabulary has %d rows: this tokenizer is not the model's", path, n, vocab)
	}
	t := &Text{Tokenizer: tok}
	if t.Chat, err = loadChatTemplate(o.ChatTemplate, filepath.Join(filepath.Dir(path), "tokenizer_config.json")); err != nil {
		return nil, err
	}
	if o.Folder != "" {
		if t.EOS, err = generationEOS(filepath.Join(o.Folder, "generation_config.json")); err != nil {
			return nil, err
		}
	}
	if len(t.EOS) == 0 && tok.Special.EOS.Token != "" {
		t.EOS = []int64{int64(tok.Special.EOS.ID)}
	}
	for _, id := range t.EOS {
		if id < 0 || id >= int64(vocab) {
			return nil, fmt.Errorf("end-of-sequence id %d is outside the model's vocabulary of %d", id, vocab)
		}
	}
	return t, nil
}

// loadChatTemplate reads an explicit template file (Jinja source, or a
// tokenizer_config.json holding one) or else the tokenizer's config; a
// config without a template leaves none.
func loadChatTemplate(explicit, config string) (*tokenizer.ChatTemplate, error) {
	if explicit != "" {
		data, err := os.ReadFile(explicit)
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		if json.Valid(data) {
			return tokenizer.LoadChatTemplate(explicit)
		}
		bos, eos := "", ""
		if t, err := tokenizer.LoadChatTemplate(config); err == nil {
			bos, eos = t.BOS, t.EOS
		}
		t, err := tokenizer.ParseChatTemplate(string(data), bos, eos)
		if err != nil {
			return nil, fmt.Errorf("chat template %s: %w", explicit, err)
		}
		return t, nil
	}
	t, err := tokenizer.LoadChatTemplate(config)
	switch {
	case errors.Is(err, tokenizer.ChatErrNoTemplate), errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return t, nil
}

// generationEOS reads generation_config.json's eos_token_id (an id or a
// list of ids); a missing file gives none.
func generationEOS(path string) ([]int64, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("generation config %s: %w", path, err)
	}
	if len(cfg.EOS) == 0 || string(cfg.EOS) == "null" {
		return nil, nil
	}
	var one int64
	if err := json.Unmarshal(cfg.EOS, &one); err == nil {
		return []int64{one}, nil
	}
	var many []int64
	if err := json.Unmarshal(cfg.EOS, &many); err != nil {
		return nil, fmt.Errorf("generation config %s: eos_token_id is %s; want an id or a list of ids", path, cfg.EOS)
	}
	return many, nil
}

// IsEOS says whether id ends a generation.
func (t *Text) IsEOS(id int64) bool { return slices.Contains(t.EOS, id) }
