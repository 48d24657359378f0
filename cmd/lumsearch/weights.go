package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lumsearch/lumsearch/ir"
	"github.com/lumsearch/lumsearch/lower"
	"github.com/lumsearch/lumsearch/safetensors"
)

// weightsFile is the name of the prepared weights in compile's output
// folder.
const weightsFile = "weights.safetensors"

// The metadata keys of the prepared weights file besides the program
// digest (lower.DigestMetadataKey), which the host library checks.
const (
	versionMetadataKey = "lumsearch.version"
	modelMetadataKey   = "lumsearch.model"
)

// writePreparedWeights writes DIR/weights.safetensors for the lowered
// program lp of model: the weights its run reads and the weights prepared
// from them at load time (lower.PrepareWeights), with lumsearch's version,
// the model's name and the program's digest as metadata. The host
// library's lum_load_prepared loads it in place of lum_load_weights and
// lum_prepare. DIR must exist.
func writePreparedWeights(ctx context.Context, model, dir string, lp *lower.Program, weights map[string]*ir.Tensor, stdout io.Writer) error {
	stored, err := lower.PrepareWeights(ctx, lp, weights)
	if err != nil {
		return err
	}
	digest, err := lower.WeightsDigest(lp)
	if err != nil {
		return err
	}
	name := lp.Name
	if name == "" {
		name = filepath.Base(model)
	}
	meta := map[string]string{versionMetadataKey: versionString(), modelMetadataKey: name, lower.DigestMetadataKey: digest}
	path := filepath.Join(dir, weightsFile)
	if err := safetensors.WriteFile(path, stored, meta); err != nil {
		return err
	}
	bufs, err := lower.StoredBuffers(lp)
	if err != nil {
		return err
	}
	var nw, np int
	var bytes int64
	for _, b := range bufs {
		if b.Kind == lower.Weight {
			nw++
		} else {
			np++
		}
		bytes += b.Bytes
	}
	fmt.Fprintf(stdout, "  prepared weights: %d weights and %d computed at load, %d bytes, in %s (lum_load_prepared loads them)\n",
		nw, np, bytes, path)
	return nil
}
