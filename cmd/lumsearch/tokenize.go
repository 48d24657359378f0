package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/lumsearch/lumsearch/tokenizer"
)

// tokenizeStdin is what "tokenize --json" reads without TEXT; tests replace it.
var tokenizeStdin io.Reader = os.Stdin

// tokenizeCommand encodes text with a Hugging Face tokenizer.json.
var tokenizeCommand = &command{
	name:     "tokenize",
	summary:  "encode text with a Hugging Face tokenizer.json and print its ids and pieces",
	synopsis: "tokenize DIR|tokenizer.json [TEXT] [--add-special] [--json]",
	doc: `
Load the tokenizer in DIR (its tokenizer.json, and tokenizer_config.json for
the bos/eos tokens) or the tokenizer.json given, encode TEXT and print its
token ids and pieces. Special tokens written in TEXT (such as <|im_start|>)
are always recognised; --add-special also adds those the tokenizer's
post-processor adds (Llama 2's <s>).

With --json, print one JSON object {"ids":[...],"tokens":[...]}; without
TEXT, read one JSON string per line from stdin and write one object per line,
for scripts that tokenize many texts with one load.`,
	example: `
lumsearch tokenize ../shared/data/tokenizers/llama3 "Hello, world!"
echo '"Hello"' | lumsearch tokenize ../shared/data/tokenizers/qwen3 --json`,
	setup: func(fs *flag.FlagSet) action {
		addSpecial := fs.Bool("add-special", false, "add the special tokens of the tokenizer's post-processor (as Hugging Face's add_special_tokens)")
		asJSON := fs.Bool("json", false, "print JSON; without TEXT, read one JSON string per line from stdin")
		return func(_ context.Context, pos []string, stdout io.Writer) error {
			if len(pos) == 0 || len(pos) > 2 {
				return usagef("want DIR|tokenizer.json [TEXT], got %d arguments", len(pos))
			}
			if len(pos) == 1 && !*asJSON {
				return usagef("missing TEXT (or --json to read JSON strings from stdin)")
			}
			tk, err := tokenizer.Load(pos[0])
			if err != nil {
				return withCode(exitInput, err)
			}
			if len(pos) == 2 {
				return writeEncoding(stdout, tk, pos[1], *addSpecial, *asJSON)
			}
			sc := bufio.NewScanner(tokenizeStdin)
			sc.Buffer(nil, 64<<20)
			for line := 1; sc.Scan(); line++ {
				if strings.TrimSpace(sc.Text()) == "" {
					continue
				}
				var text string
				if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
					return fmt.Errorf("stdin line %d: want a JSON string: %w", line, err)
				}
				if err := writeEncoding(stdout, tk, text, *addSpecial, true); err != nil {
					return fmt.Errorf("stdin line %d: %w", line, err)
				}
			}
			return sc.Err()
		}
	},
}

// writeEncoding encodes text and prints its ids and pieces, as text or as
// one JSON object on one line.
func writeEncoding(w io.Writer, tk *tokenizer.Tokenizer, text string, addSpecial, asJSON bool) error {
	ids, toks, err := tk.EncodeTokens(text, addSpecial)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false) // keep "<|im_start|>" readable
		return enc.Encode(struct {
			IDs    []int    `json:"ids"`
			Tokens []string `json:"tokens"`
		}{ids, toks})
	}
	idText := make([]string, len(ids))
	quoted := make([]string, len(toks))
	for i := range ids {
		idText[i] = strconv.Itoa(ids[i])
		quoted[i] = strconv.Quote(toks[i])
	}
	_, err = fmt.Fprintf(w, "ids:    %s\ntokens: %s\ncount:  %d\n", strings.Join(idText, " "), strings.Join(quoted, " "), len(ids))
	return err
}
