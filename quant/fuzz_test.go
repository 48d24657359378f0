package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzRoundE4M3 checks RoundE4M3 against its definition: NaN for NaN and
// past 464, else the sign of x and a finite code no other finite code is
// strictly nearer to, the even one of two at a tie.
func FuzzRoundE4M3(f *testing.F) {
	for _, tt := range roundE4M3Golden {
		f.Add(tt.x)
	}
	f.Add(0x1p-9)
	f.Add(-0x1p-1074)
	f.Add(447.99)
	f.Fuzz(func(t *testing.T, x float64) {
		c := RoundE4M3(x)
		if got, want := c&0x80 != 0, math.Signbit(x); got != want {
			t.Fatalf("RoundE4M3(%v) = %#x: sign %v, want %v", x, c, got, want)
		}
		a := math.Abs(x)
		if math.IsNaN(x) || a > 464 {
			if c&0x7F != 0x7F {
				t.Fatalf("RoundE4M3(%v) = %#x, want NaN", x, c)
			}
			return
		}
		m := c & 0x7F
		if m == 0x7F {
			t.Fatalf("RoundE4M3(%v) = NaN, want a finite code", x)
		}
		d := math.Abs(a - E4M3(m))
		for o := uint8(0); o < 0x7F; o++ {
			switch do := math.Abs(a - E4M3(o)); {
			case do < d:
				t.Fatalf("RoundE4M3(%v) = %#x (%v), but %#x (%v) is nearer", x, c, E4M3(m), o, E4M3(o))
			case do == d && o != m && m&1 != 0:
				t.Fatalf("RoundE4M3(%v) = %#x, odd, at a tie with %#x", x, c, o)
			}
		}
	})
}

// FuzzPackMXFP4 packs weights made of arbitrary float64 bits: it never
// panics, refuses exactly the weights it cannot hold (non-finite, or a
// block past e8m0's scales), and otherwise decodes every weight within
// the bound of mxfp4Bound.
func FuzzPackMXFP4(f *testing.F) {
	seed := make([]byte, 0, 8*len(mxfp4BlockGolden.values))
	for _, x := range mxfp4BlockGolden.values {
		seed = binary.LittleEndian.AppendUint64(seed, math.Float64bits(x))
	}
	f.Add(seed, uint8(1), uint8(0))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.Float64bits(0x1p131)), uint8(2), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0, 0x7f}, uint8(1), uint8(2))
	f.Add([]byte{1, 2, 3}, uint8(3), uint8(5))
	f.Fuzz(func(t *testing.T, raw []byte, rowsByte, colsByte uint8) {
		rows, cols := int(rowsByte%3)+1, 32*(int(colsByte%3)+1)
		vals := make([]float64, max(len(raw)/8, 1))
		for i := range len(raw) / 8 {
			vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		w := make([]float64, rows*cols)
		for i := range w {
			w[i] = vals[i%len(vals)]
		}
		// The sizes are the caller's: wrong ones are errors too.
		if _, _, err := PackMXFP4(w, rows, cols+int(colsByte%32)+1); err == nil {
			t.Fatalf("PackMXFP4 of %d values as %d×%d: no error", len(w), rows, cols+int(colsByte%32)+1)
		}
		holdable := true
		for b := 0; b < len(w); b += 32 {
			amax := 0.0
			for _, x := range w[b : b+32] {
				amax = max(amax, math.Abs(x))
			}
			holdable = holdable && !math.IsNaN(amax) && amax < 0x1p130
		}
		blocks, scales, err := PackMXFP4(w, rows, cols)
		if !holdable {
			if err == nil {
				t.Fatalf("PackMXFP4 of unholdable weights: no error")
			}
			return
		}
		if err != nil {
			t.Fatalf("PackMXFP4: %v", err)
		}
		got, err := DecodeMXFP4(blocks, scales, rows, cols)
		if err != nil {
			t.Fatalf("DecodeMXFP4: %v", err)
		}
		for i, x := range w {
			if X := E8M0(scales[i/32]); math.Abs(got[i]-x) > mxfp4Bound(x, X) {
				t.Fatalf("element %d = %g decodes to %g (scale %g), past the bound %g", i, x, got[i], X, mxfp4Bound(x, X))
			}
		}
	})
}
