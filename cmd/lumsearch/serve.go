package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lumsearch/lumsearch/search"
	"github.com/lumsearch/lumsearch/serve"
)

// serveCommand serves a compiled step folder behind an OpenAI-compatible API.
var serveCommand = &command{
	name:     "serve",
	summary:  "serve a compiled step folder behind an OpenAI-compatible HTTP API, with continuous batching",
	synopsis: "serve DIR [--host HOST] [--port N] [--tokenizer PATH] [--chat-template FILE] [--served-model-name NAME] [--device auto|gpu|emulated] [--max-num-batched-tokens N] [--num-gpu-blocks-override N] [--max-waiting N] [--drain D]",
	doc: `
"serve DIR" serves the program that "compile MODEL:step" (or "optimize")
wrote into DIR: /v1/completions and /v1/chat/completions (streaming as
server-sent events), /v1/models, /health and /metrics (Prometheus), in the
OpenAI API's conventions and vLLM's flags. Requests are batched
continuously: every step carries the running sequences' next tokens and
chunks of new prompts, first come first served, within the step's tokens
and the KV cache's blocks; when the blocks run out, the newest sequence is
preempted and later recomputed (its tokens do not change). Tokens are drawn
beside the step (greedy, temperature, top_k, top_p, a per-request seed).

Text goes through the tokenizer of the Hugging Face folder the model was
compiled from, or --tokenizer (a tokenizer.json or its folder); a tokenizer
with ids outside the model's vocabulary is refused. Chat needs a chat
template: the tokenizer's, or --chat-template. The step runs on GPU 0 (the
folder's CUBIN, or its PTX on another architecture; the sampling kernel
compiled by NVRTC beside it), or without a GPU under the CPU emulation,
which the startup line says: fine for tiny models.

SIGTERM or Ctrl-C stops admitting (new requests get 503), lets the requests
in flight finish within --drain, then exits.

To try it without a GPU, from the repository root, compile the tiny
random-weight model (the Llama 2 vocabulary) first, then run the example:

  lumsearch compile serve/testdata/tiny-llama2/config.json:step --max-tokens 64 --max-seq 128 -o _tiny/`,
	example: `
lumsearch serve _tiny/ --tokenizer ../shared/data/tokenizers/llama2 --chat-template serve/testdata/tiny-llama2/chat_template.jinja
curl -s localhost:8000/v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 8}'
lumsearch loadgen --url http://127.0.0.1:8000 --requests 32 --prompt-tokens 24 --output-tokens 16`,
	setup: func(fs *flag.FlagSet) action {
		var o serve.FolderOptions
		fs.StringVar(&o.Host, "host", "", "the `HOST` to listen on (default: every interface)")
		fs.IntVar(&o.Port, "port", 8000, "the TCP `PORT` to listen on (0: any free port)")
		fs.StringVar(&o.Tokenizer, "tokenizer", "", "a tokenizer.json or its folder (`PATH`), instead of the model folder's")
		fs.StringVar(&o.ChatTemplate, "chat-template", "", "a Jinja chat template `FILE` (or a tokenizer_config.json), instead of the tokenizer's")
		fs.StringVar(&o.ServedModelName, "served-model-name", "", "the model's `NAME` in the API (default: the model folder's name)")
		fs.IntVar(&o.Batcher.TokenBudget, "max-num-batched-tokens", 0, "the most tokens a step carries, `N` (default: the step's maximum)")
		fs.IntVar(&o.Batcher.KVBlocks, "num-gpu-blocks-override", 0, "use at most `N` of the KV pool's blocks (default: all)")
		fs.IntVar(&o.Batcher.MaxWaiting, "max-waiting", 4096, "the most requests waiting, `N`; past it requests get 429")
		fs.StringVar(&o.Device, "device", serve.DeviceAuto, "where the step runs: `auto` (a GPU when there is one), gpu or emulated (the CPU emulation)")
		fs.DurationVar(&o.Drain, "drain", 30*time.Second, "how long a shutdown lets requests in flight finish, `D`")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) != 1 {
				return usagef("want: serve DIR")
			}
			if o.Port < 0 || o.Port > 65535 {
				return usagef("--port %d: want 0..65535", o.Port)
			}
			logf := func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) }
			err := serve.ServeFolder(ctx, pos[0], o, logf)
			if search.KindOf(err) == search.KindInput {
				return withCode(exitInput, err)
			}
			return err
		}
	},
}
