package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// The digest a sealed plan.json carries, as its bytes read before the
// hex digits are filled in.
var (
	digestKey    = []byte(`"digest": "sha256:`)
	zeroDigest   = bytes.Repeat([]byte{'0'}, 2*sha256.Size)
	unsealedMark = "sha256:" + string(zeroDigest)
)

// Seal encodes the plan as plan.json with its Digest: the SHA-256 of the
// file's bytes with the digest's hex digits written as zeros, so that a
// change to any other byte, or to the digest, is seen by CheckSeal.
func (p *Plan) Seal() ([]byte, error) {
	q := *p
	q.Digest = unsealedMark
	data, err := q.Encode()
	if err != nil {
		return nil, err
	}
	at := bytes.LastIndex(data, digestKey)
	if at < 0 {
		return nil, fmt.Errorf("seal plan: no digest in the encoded plan")
	}
	sum := sha256.Sum256(data)
	hex.Encode(data[at+len(digestKey):], sum[:])
	return data, nil
}

// CheckSeal checks a sealed plan.json's bytes against their digest; name
// says where they came from.
func CheckSeal(name string, data []byte) error {
	at := bytes.LastIndex(data, digestKey)
	start := at + len(digestKey)
	if at < 0 || start+len(zeroDigest) > len(data) {
		return fmt.Errorf("plan %s has no digest of its own: it was not written by lumsearch optimize or compile", name)
	}
	got := bytes.Clone(data[start : start+len(zeroDigest)])
	unsealed := bytes.Clone(data)
	copy(unsealed[start:], zeroDigest)
	sum := sha256.Sum256(unsealed)
	if want := hex.EncodeToString(sum[:]); string(got) != want {
		return fmt.Errorf("plan %s does not match its own digest: it was edited after lumsearch wrote it (sha256 %s, recorded %s)", name, want, got)
	}
	return nil
}
