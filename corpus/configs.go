package corpus

import (
	"embed"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
)

// configFS holds the embedded configs: the config.json of real models,
// shapes only, and tiny test models, one per model type. A file's name
// without ".json" is the model's name in the registry.
//
//go:embed configs/*.json
var configFS embed.FS

// embedded parses every embedded config once.
var embedded = sync.OnceValues(func() (map[string]*Config, error) {
	entries, err := configFS.ReadDir("configs")
	if err != nil {
		return nil, err
	}
	out := map[string]*Config{}
	for _, ent := range entries {
		name := strings.TrimSuffix(ent.Name(), ".json")
		data, err := configFS.ReadFile(path.Join("configs", ent.Name()))
		if err != nil {
			return nil, err
		}
		c, err := ParseConfig(data)
		if err != nil {
			return nil, fmt.Errorf("embedded config %s: %w", name, err)
		}
		c.Name = name
		out[name] = c
	}
	return out, nil
})

// ConfigNames lists the embedded configs' names, sorted: llama-3-8b,
// llama-3.2-1b, qwen2.5-0.5b, mistral-7b, gpt2, mixtral-8x7b,
// qwen3-30b-a3b, gpt-oss-20b, gpt-oss-120b and the tiny-* test models.
func ConfigNames() []string {
	m, err := embedded()
	if err != nil {
		panic(err) // the embedded configs are part of the program; tests parse them
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// EmbeddedConfig returns a copy of the embedded config called name.
func EmbeddedConfig(name string) (*Config, error) {
	m, err := embedded()
	if err != nil {
		return nil, err
	}
	c, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("no embedded config %q%s", name, suggest(name, ConfigNames()))
	}
	return c.clone(), nil
}
