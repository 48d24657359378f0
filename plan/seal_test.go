package plan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSealSeesEveryByte seals a plan and flips each byte of the file in
// turn (a seeded random change): CheckSeal or Parse refuses every one,
// and accepts the file as written.
func TestSealSeesEveryByte(t *testing.T) {
	p := &Plan{Format: FormatVersion, Version: "v1.2.3", Model: "tiny-llama:mlp", Target: "h100-sxm", Arch: "sm_90",
		Outputs: map[string]int{}, Files: map[string]string{"kernels.cu": "sha256:" + string(zeroDigest)}}
	data, err := p.Seal()
	require.NoError(t, err)
	require.NoError(t, CheckSeal("plan.json", data))
	got, err := Parse("plan.json", data)
	require.NoError(t, err)
	assert.Equal(t, p.Model, got.Model)
	assert.NotEqual(t, unsealedMark, got.Digest)
	r := rand.New(rand.NewPCG(21, 9))
	for i := range data {
		flipped := append([]byte(nil), data...)
		flipped[i] ^= byte(1 + r.IntN(255))
		if CheckSeal("plan.json", flipped) == nil {
			t.Errorf("byte %d (%q) flipped: the seal still holds", i, data[i])
		}
	}
}

// TestParseRefusesOtherFormats: a plan without a format (an older
// lumsearch's) or of another format asks for a new compile.
func TestParseRefusesOtherFormats(t *testing.T) {
	for _, format := range []int{0, 1, FormatVersion + 1} {
		p := &Plan{Format: format, Version: "v0.9.0", Model: "m", Outputs: map[string]int{}}
		data, err := p.Encode()
		require.NoError(t, err)
		_, err = Parse("plan.json", data)
		require.Error(t, err, "format %d", format)
		assert.Contains(t, err.Error(), "compile the model again")
		assert.Contains(t, err.Error(), "lumsearch v0.9.0")
	}
}
