package corpus

import "github.com/lumsearch/lumsearch/quant"

// The packers that turn a float weight into a quantized format's codes,
// scales and zero points, for random weights that look like a real
// checkpoint's: package quant's, which quantize as the formats' reference
// tools do. Whatever packs the bytes, the truth of a quantized model is
// the float64 value of its packed codes (the dequant op's reference
// decoding). They are variables so that a test can plant a broken packer.
var (
	packMXFP4 = quant.PackMXFP4
	packFP8   = quant.PackFP8
	packAWQ   = quant.PackAWQ
	packGPTQ  = quant.PackGPTQ
)
