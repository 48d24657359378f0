package corpus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReduced(t *testing.T) {
	for _, name := range ConfigNames() {
		t.Run(name, func(t *testing.T) {
			c, err := EmbeddedConfig(name)
			require.NoError(t, err)
			r := Reduced(c)
			require.NoError(t, r.Validate())
			assert.Equal(t, c.ModelType, r.ModelType)
			assert.Equal(t, c.HiddenAct, r.HiddenAct)
			assert.Equal(t, c.QKVBias, r.QKVBias)
			assert.LessOrEqual(t, r.NumHiddenLayers, 2)
			if c.NumKeyValueHeads < c.NumAttentionHeads {
				assert.Less(t, r.NumKeyValueHeads, r.NumAttentionHeads, "grouped heads stay grouped")
			}
			for _, kind := range Kinds(c) {
				_, err := BuildConfig(name+":"+kind, r, kind, Options{Seq: 4, Past: 2})
				require.NoError(t, err, kind)
			}
		})
	}
}
