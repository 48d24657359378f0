package emu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

// bf16Ref rounds f to bfloat16 by comparing the distances to the two
// neighbouring bfloat16 values in float64 (ties to the even one); NaN becomes
// the canonical 0x7fff. It shares no code with the bit trick in emu.h.
func bf16Ref(f float32) uint16 {
	if f != f {
		return 0x7fff
	}
	bits := math.Float32bits(f)
	lo := bits &^ 0xffff
	if lo == bits {
		return uint16(bits >> 16)
	}
	hi := lo + 0x10000
	val := func(b uint32) float64 {
		if b&0x7fffffff == 0x7f800000 { // rounding up past the largest finite value
			return math.Copysign(math.Ldexp(1, 128), float64(math.Float32frombits(b)))
		}
		return float64(math.Float32frombits(b))
	}
	dlo, dhi := math.Abs(float64(f)-val(lo)), math.Abs(float64(f)-val(hi))
	switch {
	case dlo < dhi:
		return uint16(lo >> 16)
	case dhi < dlo:
		return uint16(hi >> 16)
	case (lo>>16)&1 == 0:
		return uint16(lo >> 16)
	}
	return uint16(hi >> 16)
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func bytesU16(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

// convert runs kernel over n elements of in.
func convert(t *testing.T, kernel string, in []byte, n, outSize int) []byte {
	t.Helper()
	out, err := run(t, []Buffer{{len(in), in}, {n * outSize, nil}},
		[]Launch{launch1(kernel, (n+255)/256, 256, buf(0), buf(1), intArg(int64(n)))}, Options{})
	require.NoError(t, err)
	return out[1]
}

func f32(bits uint32) float32 { return math.Float32frombits(bits) }

// halfInputs are f32 values around every rounding boundary of f16 and bf16,
// followed by random values over the whole exponent range.
func halfInputs() []float32 {
	v := []float32{
		0, f32(0x80000000), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), f32(0xffc00001),
		1 + 0x1p-11, 1 + 3*0x1p-11, 1 + 0x1p-11 + 0x1p-20, 1 - 0x1p-12, // f16 ties and near-ties
		65504, 65519.996, 65520, -65520, 1e10, // f16 largest finite, overflow boundary
		0x1p-14, 0x1p-14 - 0x1p-25, 0x1p-24, 0x1p-25, 1.5 * 0x1p-25, 3 * 0x1p-25, 0x1p-26, 5 * 0x1p-26, // f16 subnormals
		1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-8 + 0x1p-20, // bf16 ties
		f32(0x7f7fffff), f32(0x7f7f8000), f32(0x7f7f7fff), f32(0xff7f8000), // bf16 overflow boundary
		f32(0x00008000), f32(0x00018000), f32(0x00000001), f32(0x807fffff), // f32 subnormals
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 4000 {
		v = append(v, f32(rng.Uint32()))
	}
	return v
}

func TestF32ToF16(t *testing.T) {
	t.Parallel()
	x := halfInputs()
	got := bytesU16(convert(t, "f32_to_f16", f32Bytes(x), len(x), 2))
	for i, f := range x {
		if f != f {
			assert.Equal(t, uint16(0x7fff), got[i], "NaN %#08x", math.Float32bits(f))
			continue
		}
		assert.Equal(t, float16.Fromfloat32(f).Bits(), got[i], "%g (%#08x)", f, math.Float32bits(f))
	}
	// Spot checks written out, independent of the reference library.
	want := map[float32]uint16{1 + 0x1p-11: 0x3c00, 1 + 3*0x1p-11: 0x3c02, 65519.996: 0x7bff, 65520: 0x7c00,
		0x1p-24: 0x0001, 0x1p-25: 0x0000, 1.5 * 0x1p-25: 0x0001, 3 * 0x1p-25: 0x0002, 0x1p-14 - 0x1p-25: 0x0400}
	for i, f := range x {
		if w, ok := want[f]; ok {
			assert.Equal(t, w, got[i], "%g", f)
		}
	}
}

func TestF16ToF32AllPatterns(t *testing.T) {
	t.Parallel()
	in := make([]uint16, 1<<16)
	for i := range in {
		in[i] = uint16(i)
	}
	got := bytesF32(convert(t, "f16_to_f32", u16Bytes(in), len(in), 4))
	for i, h := range in {
		want := float16.Frombits(h).Float32()
		if want != want {
			require.True(t, got[i] != got[i], "%#04x must stay NaN, got %g", h, got[i])
			continue
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "%#04x", h)
		// And back: every f16 value survives the round trip.
		require.Equal(t, h, float16.Fromfloat32(got[i]).Bits())
	}
}

func TestF32ToBF16(t *testing.T) {
	t.Parallel()
	x := halfInputs()
	got := bytesU16(convert(t, "f32_to_bf16", f32Bytes(x), len(x), 2))
	for i, f := range x {
		assert.Equal(t, bf16Ref(f), got[i], "%g (%#08x)", f, math.Float32bits(f))
	}
	want := map[uint32]uint16{0x3f808000: 0x3f80, 0x3f818000: 0x3f82, 0x7f7f8000: 0x7f80, 0x7f7f7fff: 0x7f7f,
		0xff7f8000: 0xff80, 0x00008000: 0x0000, 0x00018000: 0x0002, 0x7f800000: 0x7f80}
	for i, f := range x {
		if w, ok := want[math.Float32bits(f)]; ok {
			assert.Equal(t, w, got[i], "%#08x", math.Float32bits(f))
		}
	}
}

func TestBF16RoundTripAllPatterns(t *testing.T) {
	t.Parallel()
	in := make([]uint16, 1<<16)
	for i := range in {
		in[i] = uint16(i)
	}
	wide := convert(t, "bf16_to_f32", u16Bytes(in), len(in), 4)
	back := bytesU16(convert(t, "f32_to_bf16", wide, len(in), 2))
	for i, h := range in {
		f := bytesF32(wide[4*i : 4*i+4])[0]
		require.Equal(t, uint32(h)<<16, math.Float32bits(f), "%#04x widens exactly", h)
		if f != f {
			require.Equal(t, uint16(0x7fff), back[i], "%#04x: NaN narrows to the canonical NaN", h)
			continue
		}
		require.Equal(t, h, back[i], "%#04x survives the round trip", h)
	}
}
