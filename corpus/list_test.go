package corpus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHumanCount(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, ""},
		{999, ""},
		{1000, "1.0K"},
		{1536, "1.5K"},
		{999_999, "1000.0K"},
		{1_000_000, "1.0M"},
		{124_439_808, "124.4M"},
		{1_000_000_000, "1.00B"},
		{8_030_261_248, "8.03B"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, HumanCount(tt.n), "%d", tt.n)
	}
}

func TestListingWrite(t *testing.T) {
	tests := []struct {
		name     string
		l        Listing
		wantText string
		wantJSON string
	}{
		{
			name:     "names wider than the header",
			l:        Listing{{Name: "tiny-llama:softmax", Ops: 8, Params: 0}, {Name: "gpt2:model", Ops: 1234, Params: 124_439_808}},
			wantText: "NAME                   OPS       PARAMS\ntiny-llama:softmax       8            0\ngpt2:model            1234    124439808  124.4M\n",
			wantJSON: "[\n  {\n    \"name\": \"tiny-llama:softmax\",\n    \"ops\": 8,\n    \"params\": 0\n  },\n  {\n    \"name\": \"gpt2:model\",\n    \"ops\": 1234,\n    \"params\": 124439808\n  }\n]\n",
		},
		{
			name:     "a name narrower than the header",
			l:        Listing{{Name: "x", Ops: 1, Params: 2000}},
			wantText: "NAME     OPS       PARAMS\nx          1         2000  2.0K\n",
			wantJSON: "[\n  {\n    \"name\": \"x\",\n    \"ops\": 1,\n    \"params\": 2000\n  }\n]\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var text, js strings.Builder
			require.NoError(t, tt.l.WriteText(&text))
			assert.Equal(t, tt.wantText, text.String())
			require.NoError(t, tt.l.WriteJSON(&js))
			assert.Equal(t, tt.wantJSON, js.String())
		})
	}
}

func TestList(t *testing.T) {
	l, err := List(context.Background(), Options{Seq: 4})
	require.NoError(t, err)
	require.Len(t, l, len(Names()))
	for i, name := range Names() {
		assert.Equal(t, name, l[i].Name)
	}
	byName := map[string]Entry{}
	for _, e := range l {
		byName[e.Name] = e
	}
	g, err := Build("tiny-llama:layer", Options{Seq: 4})
	require.NoError(t, err)
	assert.Equal(t, Entry{Name: "tiny-llama:layer", Ops: len(g.Nodes), Params: g.NumParams()}, byName["tiny-llama:layer"])
	assert.Equal(t, int64(8_030_261_248), byName["llama-3-8b:model"].Params)

	var back Listing
	var b strings.Builder
	require.NoError(t, l.WriteJSON(&b))
	require.NoError(t, json.Unmarshal([]byte(b.String()), &back))
	assert.Equal(t, l, back)

	// Past the tiny models' 256 positions, their graphs are skipped.
	long, err := List(context.Background(), Options{Seq: 300})
	require.NoError(t, err)
	require.Len(t, long, len(Names()))
	for _, e := range long {
		switch {
		case strings.HasPrefix(e.Name, "tiny-gpt2:"):
			assert.Equal(t, Entry{Name: e.Name, Skipped: "only 256 positions (n_positions)"}, e)
		case strings.HasPrefix(e.Name, "tiny-"):
			assert.Equal(t, Entry{Name: e.Name, Skipped: "only 256 positions (max_position_embeddings)"}, e)
		default:
			assert.Empty(t, e.Skipped, e.Name)
			assert.Positive(t, e.Ops, e.Name)
		}
	}
	var text strings.Builder
	require.NoError(t, long.WriteText(&text))
	assert.Contains(t, text.String(), "tiny-llama:model")
	assert.Regexp(t, `(?m)^tiny-llama:model +- +- +skipped: only 256 positions \(max_position_embeddings\)$`, text.String())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = List(ctx, Options{Seq: 4})
	assert.ErrorIs(t, err, context.Canceled)
}
