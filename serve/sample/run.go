package sample

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lumsearch/lumsearch/cuda/emu"
)

// Result is one sequence's sampled token and its raw logprob.
type Result struct {
	// Token is the sampled token id, in [0, vocab).
	Token int32
	// Logprob is the token's raw log-probability, log_softmax(logits)
	// before temperature and the cuts (see the package comment).
	Logprob float32
}

// Run samples one token for each of S = len(params) sequences, sequence s
// from logits[s*vocab:(s+1)*vocab] with params[s] for its index[s]-th
// token, by running the kernel under the CPU emulation (package cuda/emu)
// with opt. Every row must hold no NaN or +Inf and at least one finite
// logit.
func Run(ctx context.Context, logits []float32, vocab int, params []Params, index []uint64, opt emu.Options) ([]Result, error) {
	s := len(params)
	if err := checkInputs(logits, vocab, params, index); err != nil {
		return nil, err
	}
	if s == 0 {
		return []Result{}, nil
	}
	temp := make([]float32, s)
	topK := make([]int32, s)
	topP := make([]float32, s)
	seed := make([]uint64, s)
	for i, p := range params {
		temp[i], topK[i], topP[i] = p.KernelArgs(vocab)
		seed[i] = p.Seed
	}
	bufs := []emu.Buffer{
		{Bytes: 4 * len(logits), Data: f32Bytes(logits)},
		{Bytes: 4 * s, Data: f32Bytes(temp)},
		{Bytes: 4 * s, Data: i32Bytes(topK)},
		{Bytes: 4 * s, Data: f32Bytes(topP)},
		{Bytes: 8 * s, Data: u64Bytes(seed)},
		{Bytes: 8 * s, Data: u64Bytes(index)},
		{Bytes: 4 * s},
		{Bytes: 4 * s},
	}
	args := []emu.Arg{
		{Buffer: 0}, {Int: int64(vocab), IsInt: true}, {Int: int64(vocab), IsInt: true},
		{Buffer: 1}, {Buffer: 2}, {Buffer: 3}, {Buffer: 4}, {Buffer: 5}, {Buffer: 6}, {Buffer: 7},
	}
	opt.Discard = []int{0, 1, 2, 3, 4, 5}
	out, err := emu.Run(ctx, KernelSource(), []emu.Kernel{EmuKernel()}, bufs,
		[]emu.Launch{{Kernel: KernelName, Grid: [3]int{s, 1, 1}, Block: [3]int{BlockThreads, 1, 1}, Args: args}}, opt)
	if err != nil {
		return nil, fmt.Errorf("sample: run the kernel on %d sequences of %d logits: %w", s, vocab, err)
	}
	res := make([]Result, s)
	for i := range res {
		if emu.Unwritten(out[6], 4*i, 4) {
			return nil, fmt.Errorf("sample: the kernel wrote no token for sequence %d", i)
		}
		res[i].Token = int32(binary.LittleEndian.Uint32(out[6][4*i:]))
		res[i].Logprob = math.Float32frombits(binary.LittleEndian.Uint32(out[7][4*i:]))
		if res[i].Token < 0 || int(res[i].Token) >= vocab {
			return nil, fmt.Errorf("sample: the kernel chose token %d of %d for sequence %d", res[i].Token, vocab, i)
		}
	}
	return res, nil
}

// checkInputs validates Run's arguments.
func checkInputs(logits []float32, vocab int, params []Params, index []uint64) error {
	s := len(params)
	if len(index) != s {
		return fmt.Errorf("sample: %d token indices for %d sequences", len(index), s)
	}
	if vocab <= 0 || vocab > math.MaxInt32 {
		return fmt.Errorf("sample: vocabulary size %d out of [1, %d]", vocab, math.MaxInt32)
	}
	if s > math.MaxInt32 || len(logits)/vocab != s || len(logits)%vocab != 0 {
		return fmt.Errorf("sample: %d logits are not %d sequences of %d", len(logits), s, vocab)
	}
	for i, p := range params {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("sample: sequence %d: %w", i, err)
		}
	}
	for i := range s {
		finite := false
		for j, v := range logits[i*vocab : (i+1)*vocab] {
			f := float64(v)
			if math.IsNaN(f) || math.IsInf(f, 1) {
				return fmt.Errorf("sample: sequence %d: logit %d is %v", i, j, v)
			}
			finite = finite || !math.IsInf(f, -1)
		}
		if !finite {
			return fmt.Errorf("sample: sequence %d: every logit is -Inf", i)
		}
	}
	return nil
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func i32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func u64Bytes(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}
