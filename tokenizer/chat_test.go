package tokenizer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lumsearch/lumsearch/internal/shareddata"
)

// chatDataDir is the tokenizer reference data (shared/data/tokenizers); it
// skips, or fails under LUMSEARCH_REQUIRE_DATA=1, when absent.
func chatDataDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(shareddata.Dir(t), "tokenizers")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		msg := fmt.Sprintf("tokenizer reference data not found at %s", dir)
		if os.Getenv(shareddata.RequireEnv) == "1" {
			t.Fatalf("%s; failing because %s=1", msg, shareddata.RequireEnv)
		}
		t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, shareddata.RequireEnv)
	}
	return dir
}

type chatFixture struct {
	Tokenizer string `json:"tokenizer"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Prompt string `json:"prompt"`
}

// TestChatFixtures renders every conversation of chat.jsonl with its
// tokenizer's template and compares with the reference prompt byte for byte:
// one stray newline changes the tokens the model sees.
func TestChatFixtures(t *testing.T) {
	dir := chatDataDir(t)
	f, err := os.Open(filepath.Join(dir, "chat.jsonl"))
	require.NoError(t, err)
	defer f.Close()

	templates := map[string]*ChatTemplate{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		n++
		var fx chatFixture
		require.NoError(t, json.Unmarshal([]byte(line), &fx), "line %d", n)
		tmpl, ok := templates[fx.Tokenizer]
		if !ok {
			tmpl, err = LoadChatTemplate(filepath.Join(dir, fx.Tokenizer, "tokenizer_config.json"))
			require.NoError(t, err)
			templates[fx.Tokenizer] = tmpl
		}
		msgs := make([]ChatMessage, len(fx.Messages))
		for i, m := range fx.Messages {
			msgs[i] = ChatMessage{Role: m.Role, Content: m.Content}
		}
		got, err := tmpl.Render(msgs, ChatOptions{AddGenerationPrompt: true})
		require.NoError(t, err, "line %d", n)
		assert.Equal(t, fx.Prompt, got, "line %d (%s)", n, fx.Tokenizer)
	}
	require.NoError(t, sc.Err())
	require.NotZero(t, n, "chat.jsonl has no fixtures")
}

func TestChatLoadTokens(t *testing.T) {
	dir := chatDataDir(t)
	l3, err := LoadChatTemplate(filepath.Join(dir, "llama3", "tokenizer_config.json"))
	require.NoError(t, err)
	assert.Equal(t, "<|begin_of_text|>", l3.BOS)
	assert.Equal(t, "<|end_of_text|>", l3.EOS)

	q3, err := LoadChatTemplate(filepath.Join(dir, "qwen3", "tokenizer_config.json"))
	require.NoError(t, err)
	assert.Equal(t, "", q3.BOS, "qwen3's bos_token is null")
	assert.Equal(t, "<|im_end|>", q3.EOS)

	// Llama 2's config (a base model's) has no template: a clear, testable error.
	_, err = LoadChatTemplate(filepath.Join(dir, "llama2", "tokenizer_config.json"))
	require.ErrorIs(t, err, ChatErrNoTemplate)
	assert.Contains(t, err.Error(), "llama2")
}

// TestChatQwen3 checks qwen3's template (no reference prompt exists: the
// reference engine cannot parse it) against what can be read off its source:
// each turn is <|im_start|>role\n...<|im_end|>\n, the generation prompt is
// <|im_start|>assistant\n, the assistant turn after the last user query gets
// a <think> block, and enable_thinking=false adds an empty one.
func TestChatQwen3(t *testing.T) {
	dir := chatDataDir(t)
	q3, err := LoadChatTemplate(filepath.Join(dir, "qwen3", "tokenizer_config.json"))
	require.NoError(t, err)

	got, err := q3.Render([]ChatMessage{
		{Role: "system", Content: "You are Qwen."},
		{Role: "user", Content: "Hi"},
	}, ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", got)

	got, err = q3.Render([]ChatMessage{{Role: "user", Content: "Hi"}}, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>user\nHi<|im_end|>\n", got, "no generation prompt unless asked")

	got, err = q3.Render([]ChatMessage{{Role: "user", Content: "Hi"}},
		ChatOptions{AddGenerationPrompt: true, Vars: map[string]any{"enable_thinking": false}})
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", got)

	// Multi-turn: earlier assistant turns lose their reasoning (split on
	// </think>, lstrip), the last one after the final query keeps it in a
	// <think> block; this exercises namespace, messages[::-1], string methods.
	got, err = q3.Render([]ChatMessage{
		{Role: "user", Content: "2+2?"},
		{Role: "assistant", Content: "<think>\nadd\n</think>\n\n4"},
		{Role: "user", Content: "3+3?"},
		{Role: "assistant", Content: "<think>\nadd again\n</think>\n\n6"},
	}, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t,
		"<|im_start|>user\n2+2?<|im_end|>\n"+
			"<|im_start|>assistant\n4<|im_end|>\n"+
			"<|im_start|>user\n3+3?<|im_end|>\n"+
			"<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n", got)

	// Consecutive tool results are merged into one user turn.
	got, err = q3.Render([]ChatMessage{
		{Role: "user", Content: "weather?"},
		{Role: "assistant", Content: "calling"},
		{Role: "tool", Content: "sunny"},
		{Role: "tool", Content: "20C"},
	}, ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.Contains(t, got, "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n<|im_start|>assistant\n")

	// Tools: a list of JSON objects dumped with tojson into the system turn.
	got, err = q3.Render([]ChatMessage{{Role: "user", Content: "Hi"}}, ChatOptions{
		AddGenerationPrompt: true,
		Vars:                map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}},
	})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "<|im_start|>system\n# Tools\n"), got)
	assert.Contains(t, got, `{"function": {"name": "get_weather"}, "type": "function"}`)
}

// TestChatTemplateFeatures exercises, on small hand-written templates, the
// Jinja the real chat templates rely on, so that an engine upgrade that
// drops one shows up here by name.
func TestChatTemplateFeatures(t *testing.T) {
	msgs := []ChatMessage{
		{Role: "system", Content: "  sys  "},
		{Role: "user", Content: "a"},
		{Role: "assistant", Content: "b"},
		{Role: "user", Content: "c"},
	}
	cases := []struct {
		name, src, want string
		opts            ChatOptions
	}{
		{"loop and conditional", `{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }};{% elif m.role == 'assistant' %}A:{{ m['content'] }};{% else %}S;{% endif %}{% endfor %}`,
			"S;U:a;A:b;U:c;", ChatOptions{}},
		{"slicing", `{% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}{% for m in rest %}{{ m.role }}{% endfor %}|{{ messages[-1].content }}|{% for m in messages[::-1] %}{{ m.content|trim }}{% endfor %}`,
			"userassistantuser|c|cbasys", ChatOptions{}},
		{"namespace", `{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.content %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.last }}`,
			"2 c", ChatOptions{}},
		{"filters", `{{ messages|length }} {{ messages[0].content|trim }} {{ messages[1]|tojson }} {{ 'x'|upper }}`,
			`4 sys {"role": "user", "content": "a"} X`, ChatOptions{}},
		{"loop variables", `{% for m in messages %}{% if loop.first %}[{% endif %}{{ loop.index0 }}{% if not loop.last %},{% else %}]{% endif %}{% endfor %}`,
			"[0,1,2,3]", ChatOptions{}},
		{"string methods", `{{ messages[0].content.strip() }}{{ 'a</think>b'.split('</think>')[-1] }}{{ 'xy'.startswith('x') }}`,
			"sysbTrue", ChatOptions{}},
		{"tokens and generation prompt", `{{ bos_token }}{% for m in messages[1:2] %}{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}GO{% endif %}`,
			"<s>a</s>GO", ChatOptions{AddGenerationPrompt: true}},
		{"format filter", `{{ "%s has %d turns, %.1f%% %r"|format(messages[1].role, messages|length, 12.34, 'q') }}`,
			"user has 4 turns, 12.3% 'q'", ChatOptions{}},
		{"extra variables", `{% if flag is defined and flag is false %}off{% endif %}{{ n + 1 }}`,
			"off3", ChatOptions{Vars: map[string]any{"flag": false, "n": 2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := ParseChatTemplate(c.src, "<s>", "</s>")
			require.NoError(t, err)
			got, err := tmpl.Render(msgs, c.opts)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

// TestChatRaiseException checks that a template's refusal (Mistral's and
// Llama 2's templates raise when roles do not alternate) comes back as an
// error carrying the template's message.
func TestChatRaiseException(t *testing.T) {
	src := `{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}[{{ m.content }}]{% endfor %}`
	tmpl, err := ParseChatTemplate(src, "", "")
	require.NoError(t, err)

	got, err := tmpl.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "[a][b]", got)

	_, err = tmpl.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, ChatOptions{})
	require.Error(t, err)
	var raised *ChatRaiseError
	require.True(t, errors.As(err, &raised), "want a *ChatRaiseError, got %v", err)
	assert.Equal(t, "Conversation roles must alternate user/assistant/user/assistant/...", raised.Message)
	assert.Contains(t, err.Error(), "Conversation roles must alternate")
}

// TestChatMalformed checks that broken templates are refused at parse time
// with the engine's description of what is wrong.
func TestChatMalformed(t *testing.T) {
	cases := []struct{ src, want string }{
		{`{% for m in messages %}{{ m.content }}`, "unclosed for"},
		{`{% if add_generation_prompt %}x`, "unclosed if"},
		{`{{ messages[0].content `, "unclosed"},
		{`{% frobnicate %}`, "frobnicate"},
	}
	for _, c := range cases {
		_, err := ParseChatTemplate(c.src, "", "")
		require.Error(t, err, "%q", c.src)
		assert.Contains(t, err.Error(), c.want, "%q", c.src)
		assert.Contains(t, err.Error(), "chat template")
	}

	// A config file's template names the file in the error.
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer_config.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"chat_template": "{% if x %}"}`), 0o644))
	_, err := LoadChatTemplate(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "unclosed if")
}

func TestChatLoadConfigForms(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}

	// List form, AddedToken objects for the special tokens.
	p := write("list.json", `{
		"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}"}],
		"bos_token": {"content": "<s>", "lstrip": false},
		"eos_token": {"__type": "AddedToken", "content": "</s>"}
	}`)
	tmpl, err := LoadChatTemplate(p)
	require.NoError(t, err)
	got, err := tmpl.Render(nil, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "<s>D</s>", got)
	assert.Contains(t, tmpl.Name, `"default"`)

	// List form without a default.
	_, err = LoadChatTemplate(write("nodefault.json", `{"chat_template": [{"name": "rag", "template": "R"}]}`))
	require.ErrorIs(t, err, ChatErrNoTemplate)
	assert.Contains(t, err.Error(), "rag")

	// Missing and null templates.
	_, err = LoadChatTemplate(write("none.json", `{"bos_token": "<s>"}`))
	require.ErrorIs(t, err, ChatErrNoTemplate)
	_, err = LoadChatTemplate(write("null.json", `{"chat_template": null}`))
	require.ErrorIs(t, err, ChatErrNoTemplate)

	// Wrong shapes are errors, not silent "".
	_, err = LoadChatTemplate(write("badtok.json", `{"chat_template": "x", "bos_token": 3}`))
	require.ErrorContains(t, err, "bos_token")
	_, err = LoadChatTemplate(write("badtmpl.json", `{"chat_template": 3}`))
	require.ErrorContains(t, err, "chat_template")
	_, err = LoadChatTemplate(write("notjson.json", `{`))
	require.Error(t, err)
	_, err = LoadChatTemplate(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestChatFormatErrors(t *testing.T) {
	for src, want := range map[string]string{
		`{{ "%d"|format('a') }}`:    "needs a number",
		`{{ "%s %s"|format('a') }}`: "not enough arguments",
		`{{ "%s"|format('a', 1) }}`: "not all arguments converted",
		`{{ "%q"|format(1) }}`:      "unsupported conversion",
		`{{ "%5"|format(1) }}`:      "incomplete format",
		`{{ 3|format(1) }}`:         "must be a string",
	} {
		tmpl, err := ParseChatTemplate(src, "", "")
		require.NoError(t, err, src)
		_, err = tmpl.Render(nil, ChatOptions{})
		require.ErrorContains(t, err, want, src)
	}
}

func TestChatReservedVars(t *testing.T) {
	tmpl, err := ParseChatTemplate(`{{ bos_token }}`, "<s>", "")
	require.NoError(t, err)
	for _, k := range ChatReservedVars {
		_, err := tmpl.Render(nil, ChatOptions{Vars: map[string]any{k: "x"}})
		require.Error(t, err, k)
		assert.Contains(t, err.Error(), k)
	}
	var nilTmpl *ChatTemplate
	_, err = nilTmpl.Render(nil, ChatOptions{})
	require.Error(t, err)
}

// TestChatConcurrentRender renders one template from several goroutines, as
// a server would; run under -race.
func TestChatConcurrentRender(t *testing.T) {
	tmpl, err := ParseChatTemplate(`{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.content %}{% endfor %}{{ ns.s }}`, "", "")
	require.NoError(t, err)
	done := make(chan string, 8)
	for i := range 8 {
		go func() {
			out, err := tmpl.Render([]ChatMessage{{Role: "user", Content: fmt.Sprint(i)}, {Role: "user", Content: "x"}}, ChatOptions{})
			if err != nil {
				out = err.Error()
			}
			done <- out
		}()
	}
	seen := map[string]bool{}
	for range 8 {
		seen[<-done] = true
	}
	for i := range 8 {
		assert.True(t, seen[fmt.Sprint(i)+"x"], "goroutine %d", i)
	}
}

// chatFuzzOutOfScope reports sources the fuzz test leaves out because they
// can be valid Jinja that the engine (ardanlabs/jinja v1.8.0) cannot fail
// cleanly on:
//   - recursion (macro, call blocks): a macro calling itself overflows the Go
//     stack, a fatal error no recover can catch (Python raises RecursionError);
//   - values that contain themselves, made by attribute assignment
//     ({% set ns.a = ns %}) or mutating methods (l.append(l)): printing one
//     recurses in Value.String until the same fatal stack overflow;
//   - range and *, which can ask for arbitrarily long loops or strings.
//
// Model chat templates come from model configs, not from users, so these are
// not reachable from Render's callers in practice; a server that accepted
// templates from users would need the engine fixed first.
func chatFuzzOutOfScope(src string) bool {
	if chatFuzzAttrSet.MatchString(src) {
		return true
	}
	for _, w := range []string{"macro", "call", "append", "update", "insert", "extend", "setdefault", "range", "*"} {
		if strings.Contains(src, w) {
			return true
		}
	}
	return false
}

var chatFuzzAttrSet = regexp.MustCompile(`set\s*[\w.\[\]'"]+\.\w+\s*=`)

// FuzzChatTemplate feeds arbitrary template sources through parse and render:
// errors are expected, panics are not (Parse and Render must turn any engine
// panic into an error, which the fuzzer would still report as a failure here
// so that engine bugs are noticed).
func FuzzChatTemplate(f *testing.F) {
	seeds := []string{
		`{% for m in messages %}{{ m.role }}: {{ m.content|trim }}{% endfor %}`,
		`{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}`,
		`{{ messages[1:] }}{{ messages[::-1]|length }}{{ messages[0]|tojson }}`,
		`{{ raise_exception('no') }}`,
		`{% if add_generation_prompt %}{{ bos_token ~ eos_token }}{% endif %}`,
		`{{ 'a b'.split(' ')[-1].upper() }}{{ range(3)|list }}`,
		`{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}`,
		`{{ "%s %5.2f %x %%"|format('a', 1, 255) }}`,
		`{% for`, `{{`, `{#`, `{% if %}`, `{{ 1/0 }}`, `{{ messages[99] }}`,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	msgs := []ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}}
	f.Fuzz(func(t *testing.T, src string) {
		if chatFuzzOutOfScope(src) {
			t.Skip()
		}
		tmpl, err := ParseChatTemplate(src, "<s>", "</s>")
		if err != nil {
			if errors.Is(err, chatErrEnginePanic) {
				t.Fatalf("parse: %v", err)
			}
			return
		}
		_, err = tmpl.Render(msgs, ChatOptions{AddGenerationPrompt: true})
		if errors.Is(err, chatErrEnginePanic) {
			t.Fatalf("render: %v", err)
		}
	})
}

// The chat templates of Llama 2 and Mistral 7B Instruct v0.1 as their Hugging
// Face configs carried them (the shared data's llama2 config has none). No
// reference prompt exists here, so the expected strings are read off the
// templates; what this checks is that the engine runs them as written
// (messages[1:], != false, .strip(), raise_exception on bad role order).
const (
	chatLlama2Template  = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
	chatMistralTemplate = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

func TestChatLlama2Mistral(t *testing.T) {
	l2, err := ParseChatTemplate(chatLlama2Template, "<s>", "</s>")
	require.NoError(t, err)
	got, err := l2.Render([]ChatMessage{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: " Hi "},
		{Role: "assistant", Content: "Hello."},
		{Role: "user", Content: "Bye"},
	}, ChatOptions{AddGenerationPrompt: true})
	require.NoError(t, err)
	// strip() applies to the joined string, so the space before "Hi" stays (as in Python).
	assert.Equal(t, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello. </s><s>[INST] Bye [/INST]", got)
	got, err = l2.Render([]ChatMessage{{Role: "user", Content: "Hi"}}, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "<s>[INST] Hi [/INST]", got)

	mi, err := ParseChatTemplate(chatMistralTemplate, "<s>", "</s>")
	require.NoError(t, err)
	got, err = mi.Render([]ChatMessage{
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello"},
		{Role: "user", Content: "Again"},
	}, ChatOptions{})
	require.NoError(t, err)
	assert.Equal(t, "<s>[INST] Hi [/INST]Hello</s> [INST] Again [/INST]", got)

	_, err = mi.Render([]ChatMessage{{Role: "system", Content: "x"}}, ChatOptions{})
	var raised *ChatRaiseError
	require.ErrorAs(t, err, &raised)
	assert.Equal(t, "Conversation roles must alternate user/assistant/user/assistant/...", raised.Message)
	_, err = mi.Render([]ChatMessage{{Role: "user", Content: "x"}, {Role: "tool", Content: "y"}}, ChatOptions{})
	require.ErrorAs(t, err, &raised)
	assert.Equal(t, "Only user and assistant roles are supported!", raised.Message)
}

// TestChatStrftimeNow checks the engine's strftime_now, which Llama 3.1+
// templates call for the "Today Date" line.
func TestChatStrftimeNow(t *testing.T) {
	tmpl, err := ParseChatTemplate(`{{ strftime_now('%Y') }}`, "", "")
	require.NoError(t, err)
	got, err := tmpl.Render(nil, ChatOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^20\d\d$`, got)
}
