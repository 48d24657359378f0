package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Chat templates turn a conversation into the one prompt string the model was
// trained on. Models ship them as Jinja source in tokenizer_config.json, so
// rather than hand-coding each model's layout we run the model's own template
// through a Jinja engine (github.com/ardanlabs/jinja, pure Go, written for
// exactly these templates).

// ChatMessage is one turn of a conversation.
type ChatMessage struct {
	// Role is who speaks: "system", "user", "assistant", "tool", ...; the
	// template decides which roles it accepts.
	Role string
	// Content is the text of the turn, passed to the template unchanged.
	Content string
}

// ChatOptions are the per-render choices a caller makes.
type ChatOptions struct {
	// AddGenerationPrompt ends the prompt with the header of an assistant
	// turn, so that the model's continuation is the reply; the template sees
	// it as add_generation_prompt.
	AddGenerationPrompt bool
	// Vars are further template variables (for example "enable_thinking" or
	// "tools"), converted with jinja.FromGoValue: nil, bool, int, int64,
	// float64, json.Number, string, []any and map[string]any. They may not
	// reuse the names Render sets itself (see ChatReservedVars), since a
	// silent override of messages or bos_token would render a wrong prompt.
	Vars map[string]any
}

// ChatReservedVars are the variables Render provides to every template; a
// ChatOptions.Vars entry with one of these names is an error.
var ChatReservedVars = []string{"messages", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "format"}

// ChatErrNoTemplate is returned (wrapped) by LoadChatTemplate when the
// tokenizer_config.json has no chat_template, as base models' configs do.
var ChatErrNoTemplate = errors.New("no chat_template")

// chatErrEnginePanic marks an error that stands for a panic inside the Jinja
// engine (a bug there, not in the template), so that the fuzz test can tell
// one from an ordinary template error.
var chatErrEnginePanic = errors.New("jinja engine panicked")

// ChatRaiseError is the error Render returns when the template calls
// raise_exception(msg): the template's own way to refuse a conversation
// (for example roles that do not alternate). Message is msg as given, so that
// callers can show the template author's words.
type ChatRaiseError struct {
	Message string
}

// Error implements error.
func (e *ChatRaiseError) Error() string {
	return "chat template raised an exception: " + e.Message
}

// ChatTemplate is a parsed chat template with the special-token strings it
// refers to. It is immutable after parsing, so Render may be called from
// several goroutines at once.
//
// Templates are trusted input (they come with the model): the engine,
// ardanlabs/jinja v1.8.0, kills the process with a Go stack overflow, which
// no recover can catch, on a macro that calls itself without end or on
// printing a value that contains itself ({% set ns.a = ns %}{{ ns }}), and
// it bounds neither loops nor output. Do not render templates that users
// send.
type ChatTemplate struct {
	// Name says where the template came from (file and template name), for
	// error messages.
	Name string
	// Source is the Jinja source as parsed.
	Source string
	// BOS and EOS are the values of bos_token and eos_token in the template
	// ("" when the config has none).
	BOS, EOS string

	tmpl *jinja.Template
}

// ParseChatTemplate parses Jinja source as a chat template; bos and eos are
// what the template sees as bos_token and eos_token. A template the engine
// cannot parse is an error that carries the engine's message (which names the
// construct and line).
func ParseChatTemplate(src string, bos, eos string) (*ChatTemplate, error) {
	return chatParse("chat template", src, bos, eos)
}

func chatParse(name, src, bos, eos string) (t *ChatTemplate, err error) {
	// The engine is third-party code fed arbitrary input; a panic in it must
	// become an error rather than take down a server.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("parse %s: %w: %v", name, chatErrEnginePanic, r)
		}
	}()
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	return &ChatTemplate{Name: name, Source: src, BOS: bos, EOS: eos, tmpl: tmpl}, nil
}

// chatConfig is the part of a Hugging Face tokenizer_config.json that chat
// templates need. The token and template fields take several JSON shapes, so
// they are decoded by hand.
type chatConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
}

// chatNamedTemplate is one entry of the list form of chat_template, which
// models with several templates (e.g. "default", "tool_use", "rag") use.
type chatNamedTemplate struct {
	Name     string `json:"name"`
	Template string `json:"template"`
}

// LoadChatTemplate reads the chat template of a Hugging Face
// tokenizer_config.json: chat_template is either a string or a list of
// {name, template} of which the one named "default" is taken; bos_token and
// eos_token are strings, objects with a "content" field (AddedToken form) or
// null. A config without a chat template gives an error wrapping
// ChatErrNoTemplate.
func LoadChatTemplate(path string) (*ChatTemplate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %w", err)
	}
	var cfg chatConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("load chat template: %s: %w", path, err)
	}
	bos, err := chatTokenString(cfg.BOSToken)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %s: bos_token: %w", path, err)
	}
	eos, err := chatTokenString(cfg.EOSToken)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %s: eos_token: %w", path, err)
	}
	name, src, err := chatPickTemplate(cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %s: %w", path, err)
	}
	return chatParse(fmt.Sprintf("chat template %q of %s", name, path), src, bos, eos)
}

// chatPickTemplate returns the template to use and its name ("default" for
// the plain string form, as transformers calls it).
func chatPickTemplate(raw json.RawMessage) (name, src string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", "", ChatErrNoTemplate
	}
	if err := json.Unmarshal(raw, &src); err == nil {
		return "default", src, nil
	}
	var list []chatNamedTemplate
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", "", fmt.Errorf("chat_template is neither a string nor a list of {name, template}: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, t := range list {
		if t.Name == "default" {
			return t.Name, t.Template, nil
		}
		names = append(names, t.Name)
	}
	// Without a "default" there is no way to know which one the model means
	// for plain chat; picking one silently could render the wrong layout.
	return "", "", fmt.Errorf("%w named \"default\" among %q", ChatErrNoTemplate, names)
}

// chatTokenString decodes a special-token field: a string, an AddedToken
// object {"content": ...}, or null/absent (no such token: "").
func chatTokenString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with a \"content\" string, got %s", raw)
	}
	return *obj.Content, nil
}

// Render applies the template to a conversation. The template sees messages
// (a list of dicts with role and content, in that key order), add_generation_prompt,
// bos_token, eos_token, raise_exception and opts.Vars. A raise_exception call
// in the template returns a *ChatRaiseError; other failures carry the
// engine's message.
func (t *ChatTemplate) Render(messages []ChatMessage, opts ChatOptions) (out string, err error) {
	if t == nil || t.tmpl == nil {
		return "", errors.New("render chat template: nil template")
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("render %s: %w: %v", t.Name, chatErrEnginePanic, r)
		}
	}()
	data := make(map[string]jinja.Value, len(opts.Vars)+len(ChatReservedVars))
	for k, v := range opts.Vars {
		data[k] = jinja.FromGoValue(v)
	}
	for _, k := range ChatReservedVars {
		if _, ok := opts.Vars[k]; ok {
			return "", fmt.Errorf("render %s: ChatOptions.Vars may not set %q, which Render sets itself", t.Name, k)
		}
	}
	// Messages are built as ordered dicts (not map[string]any, whose keys the
	// engine sorts) so that a template dumping a message with tojson writes
	// role before content, as Python's dicts would.
	list := make([]jinja.Value, len(messages))
	for i, m := range messages {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	data["messages"] = jinja.NewList(list)
	data["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(t.BOS)
	data["eos_token"] = jinja.NewString(t.EOS)
	// The engine has its own raise_exception, but its error is a bare string;
	// ours is a typed error so that callers can tell a template's refusal
	// from a broken template. User variables shadow the engine's builtins.
	data["raise_exception"] = jinja.NewCallable("raise_exception", chatRaiseException)
	// The engine lacks Jinja's format filter ("%s: %d"|format(a, b)); it
	// looks filters it does not know up as callables in scope, so ours goes
	// there.
	data["format"] = jinja.NewCallable("format", chatFormatFilter)
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("render %s: %w", t.Name, err)
	}
	return out, nil
}

// chatRaiseException implements raise_exception(msg) for templates.
func chatRaiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &ChatRaiseError{Message: "(raise_exception called without a message)"}
	}
	// String() quotes strings Python-repr style; the message is wanted as
	// written.
	msg := args[0].String()
	if args[0].IsString() {
		msg = args[0].AsString()
	}
	return jinja.Undefined(), &ChatRaiseError{Message: msg}
}

// chatFormatFilter implements Jinja's format filter, Python's printf-style
// str % args: conversions s, r, d, i, f, F, e, E, g, G, x, X, o, c and %%, with
// flags, width and precision.
func chatFormatFilter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("format: the filtered value must be a string")
	}
	f, rest := args[0].AsString(), args[1:]
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		j := i + 1
		for j < len(f) && strings.IndexByte("-+ #0123456789.", f[j]) >= 0 {
			j++
		}
		if j == len(f) {
			return jinja.Undefined(), fmt.Errorf("format: incomplete format %q", f[i:])
		}
		spec, conv := f[i+1:j], f[j]
		i = j
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if len(rest) == 0 {
			return jinja.Undefined(), errors.New("format: not enough arguments for format string")
		}
		v := rest[0]
		rest = rest[1:]
		var arg any
		verb := conv
		switch conv {
		case 's':
			arg = chatPyStr(v)
		case 'r':
			arg, verb = v.String(), 's'
		case 'd', 'i', 'x', 'X', 'o', 'c':
			switch {
			case v.IsInt():
				arg = v.AsInt()
			case v.IsFloat():
				arg = int64(v.AsFloat())
			case v.IsBool() && v.AsBool():
				arg = int64(1)
			case v.IsBool():
				arg = int64(0)
			default:
				return jinja.Undefined(), fmt.Errorf("format: %%%c needs a number, not %s", conv, v.String())
			}
			if conv == 'i' {
				verb = 'd'
			}
		case 'f', 'F', 'e', 'E', 'g', 'G':
			switch {
			case v.IsInt():
				arg = float64(v.AsInt())
			case v.IsFloat():
				arg = v.AsFloat()
			default:
				return jinja.Undefined(), fmt.Errorf("format: %%%c needs a number, not %s", conv, v.String())
			}
			if conv == 'F' {
				verb = 'f'
			}
			if !strings.Contains(spec, ".") && (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E') {
				spec += ".6" // Python's default precision; Go's %e differs.
			}
		default:
			return jinja.Undefined(), fmt.Errorf("format: unsupported conversion %%%c", conv)
		}
		fmt.Fprintf(&b, "%"+spec+string(verb), arg)
	}
	if len(rest) > 0 {
		return jinja.Undefined(), errors.New("format: not all arguments converted during string formatting")
	}
	return jinja.NewString(b.String()), nil
}

// chatPyStr is Python's str(v): strings as they are, other values as the
// engine prints them (None, True, [1, 'a'], ...).
func chatPyStr(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}
