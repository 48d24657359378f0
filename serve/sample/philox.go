package sample

// The generator is Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND,
// JAX and PyTorch): a bijection of a 128-bit counter under a 64-bit key,
// made of 32-bit multiplies, xors and adds only, so that Go and CUDA
// compute it bit for bit alike. Being counter-based, the draw for token i
// of a request is computed from (seed, i) alone: no state to carry across
// steps, batches or preemptions.

const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9 // golden ratio
	philoxW1 = 0xBB67AE85 // sqrt(3) - 1
)

// Philox4x32 is Philox4x32-10: ten rounds of ctr under key, the key bumped
// by the Weyl constants between rounds. It matches Random123's
// known-answer vectors.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for r := range 10 {
		if r > 0 {
			k0 += philoxW0
			k1 += philoxW1
		}
		p0 := uint64(philoxM0) * uint64(c0)
		p1 := uint64(philoxM1) * uint64(c2)
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Uniform is the draw for token index of a request seeded with seed: the
// counter is (index low, index high, 0, 0), the key (seed low, seed high),
// and u is the top 53 bits of the first two output words (word 1 high) times
// 2^-53, so u is in [0, 1), exact in float64, and the kernel's lum_sample_u
// computes the same value.
func Uniform(seed, index uint64) float64 {
	x := Philox4x32([4]uint32{uint32(index), uint32(index >> 32), 0, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})
	bits := uint64(x[1])<<32 | uint64(x[0])
	return float64(bits>>11) * 0x1p-53
}
