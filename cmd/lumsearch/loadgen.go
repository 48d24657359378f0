package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/lumsearch/lumsearch/serve/loadgen"
)

// loadgenCommand drives an OpenAI-compatible server and reports its
// throughput and latencies.
var loadgenCommand = &command{
	name:     "loadgen",
	summary:  "drive an OpenAI-compatible server with streamed requests and report throughput, TTFT and TPOT",
	synopsis: "loadgen [--url URL] [--model NAME] [--chat] [--rate R] [--requests N] [--concurrency C] [--prompt-tokens N --output-tokens M | --workload FILE] [--json]",
	doc: `
Send streamed completion requests (/v1/completions, or /v1/chat/completions
with --chat) to the server at --url (vLLM, SGLang, any OpenAI-compatible
one), at --rate requests per second with Poisson or fixed gaps, or all at
once (--rate 0 or inf) with at most --concurrency in flight, and report the
requests completed and failed, the request and token throughput, and the
time to first token (TTFT), time per output token after the first (TPOT),
inter-token latency (ITL) and end-to-end latency at mean, p50, p90 and p99
(interpolated between ranks, as vLLM's benchmark).

Each request asks for the usage at the end of its stream and sets
ignore_eos (vLLM's extension; --ignore-eos=false leaves it out) so that it
generates its max_tokens. Without --workload, every prompt is
--prompt-tokens words (a client does not know the server's tokenizer),
starting with the request's number so that no prompt reuses another's
cached prefix. A --workload file has one JSON object a line:
{"prompt": "...", "max_tokens": M} or {"prompt_tokens": N, "output_tokens": M}.

The command exits 1 when a request failed, after the report. Ctrl-C stops
sending, cancels the requests in flight and prints the partial report.`,
	example: `
lumsearch loadgen --url http://127.0.0.1:8000 --rate 4 --requests 200 --prompt-tokens 512 --output-tokens 128
lumsearch loadgen --chat --rate inf --concurrency 16 --workload prompts.jsonl --json`,
	setup: func(fs *flag.FlagSet) action {
		var o loadgen.Options
		fs.StringVar(&o.URL, "url", "http://127.0.0.1:8000", "the server's base `URL` (a trailing /v1 is accepted)")
		fs.StringVar(&o.Model, "model", "", "the model `NAME` to ask for (default the first that GET /v1/models lists)")
		fs.BoolVar(&o.Chat, "chat", false, "drive /v1/chat/completions, the prompt as one user message, instead of /v1/completions")
		fs.StringVar(&o.APIKey, "api-key", "", "send `KEY` as a bearer token")
		fs.Float64Var(&o.Rate, "rate", math.Inf(1), "requests per second; 0 or inf sends them all at once, limited by --concurrency")
		arrivals := fs.String("arrivals", string(loadgen.Poisson), "how requests are spaced at --rate: poisson (exponential gaps) or fixed")
		fs.Int64Var(&o.Seed, "seed", 0, "the seed of the Poisson gaps")
		fs.IntVar(&o.Requests, "requests", 100, "requests to send (with --workload, default one for each line, in turn)")
		fs.IntVar(&o.Concurrency, "concurrency", 0, "the most requests in flight (0 for no limit)")
		fs.IntVar(&o.PromptTokens, "prompt-tokens", 128, "each prompt's length in words, about a token each")
		fs.IntVar(&o.OutputTokens, "output-tokens", 128, "each request's max_tokens")
		workload := fs.String("workload", "", "a JSON-lines `FILE` of requests, in place of --prompt-tokens and --output-tokens")
		ignoreEOS := fs.Bool("ignore-eos", true, "send ignore_eos so that each request generates its max_tokens (false for servers that refuse it)")
		asJSON := fs.Bool("json", false, "print the report as JSON")
		return func(ctx context.Context, pos []string, stdout io.Writer) error {
			if len(pos) > 0 {
				return usagef("loadgen takes no arguments, got %q", pos)
			}
			o.Arrivals, o.StopAtEOS = loadgen.Arrivals(*arrivals), !*ignoreEOS
			if *workload != "" {
				given := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
				if given["prompt-tokens"] || given["output-tokens"] {
					return usagef("--workload sets each request's lengths: give it without --prompt-tokens and --output-tokens")
				}
				if !given["requests"] {
					o.Requests = 0
				}
				var err error
				if o.Workload, err = loadgen.ReadWorkload(*workload); err != nil {
					return withCode(exitInput, err)
				}
			}
			rep, err := loadgen.Run(ctx, o)
			var bad *loadgen.OptionError
			if errors.As(err, &bad) {
				return usagef("%v", err)
			}
			if rep != nil {
				if werr := writeReport(stdout, rep, *asJSON); werr != nil {
					return errors.Join(err, werr)
				}
			}
			if err == nil && rep.Failed > 0 {
				return fmt.Errorf("%d of %d requests failed; the first: %s", rep.Failed, rep.Sent, rep.FirstError)
			}
			return err
		}
	},
}

// writeReport prints rep as text or JSON.
func writeReport(w io.Writer, rep *loadgen.Report, asJSON bool) error {
	if asJSON {
		return rep.WriteJSON(w)
	}
	return rep.WriteText(w)
}
