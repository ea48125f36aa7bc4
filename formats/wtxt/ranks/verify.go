package ranks

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/keys"
)

// CheckPart checks one rank part against the generation it is offered
// for: world size, rank range, generation and chain. name locates it in
// errors (e.g. the registry tag).
func CheckPart(name string, p Part, gen string, world int, chain [32]byte) error {
	if world < 1 || world > MaxWorldSize {
		return fail(name, 0, p.Rank, CheckWorldSize, "world size %d out of range 1..%d", world, MaxWorldSize)
	}
	if p.Rank < 0 || p.Rank >= world {
		return fail(name, 0, -1, CheckRank, "rank %d out of range 0..%d for world size %d", p.Rank, world-1, world)
	}
	if p.Gen != gen {
		return fail(name, 0, p.Rank, CheckGen, "part is of generation %s, not %s", p.Gen, gen)
	}
	if p.MerklePrev != chain {
		return fail(name, 0, p.Rank, CheckChain, "part's merkle_prev %s is not this job's chain id %s", short(p.MerklePrev), short(chain))
	}
	// The part's own merkle_this is checked by the WTXT verifier when its
	// skeleton is assembled (a Part does not carry the build it covers).
	return nil
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Trusted keys; when any is given a valid signature by one of them is
	// required.
	Trusted []ed25519.PublicKey
	// Prev is merkle_this of the previous generation of the ledger (zeros
	// for the first); checked when CheckChain is set.
	Prev       [32]byte
	CheckChain bool
	// Chain, when non-zero, is the job's expected chain id.
	Chain [32]byte
}

// Verify checks the index's signature and chain. name locates errors.
func (ix *Index) Verify(name string, opts VerifyOptions) error {
	if opts.CheckChain && ix.MerklePrev != opts.Prev {
		return fail(name, ix.WorldSize+3, -1, CheckChain, "merkle_prev %s is not the previous generation's merkle_this %s", short(ix.MerklePrev), short(opts.Prev))
	}
	if opts.Chain != ([32]byte{}) && ix.Chain != opts.Chain {
		return fail(name, 2, -1, CheckChain, "chain id %s is not this job's %s", short(ix.Chain), short(opts.Chain))
	}
	if ix.Signature == nil {
		if len(opts.Trusted) > 0 {
			return fail(name, 0, -1, CheckSignature, "unsigned, but trusted keys were given")
		}
		return nil
	}
	for _, k := range opts.Trusted {
		if keys.KeyID(k) == ix.KeyID {
			if !ed25519.Verify(k, ix.Signed, ix.Signature) {
				return fail(name, ix.WorldSize+4, -1, CheckSignature, "Ed25519 signature by keyid %s does not verify", ix.KeyID)
			}
			return nil
		}
	}
	if len(opts.Trusted) > 0 {
		return fail(name, ix.WorldSize+4, -1, CheckSigner, "signed by keyid %s, which is not a trusted key", ix.KeyID)
	}
	return nil
}

// CheckSkeleton checks a rank skeleton's bytes against its index line: its
// SHA-256, and that its WTXT header is the part the index names (gen,
// sha256_all, merkle_prev = chain, merkle_this, keyid).
func (ix *Index) CheckSkeleton(r int, skel []byte, name string) error {
	if r < 0 || r >= ix.WorldSize {
		return fail(name, 0, -1, CheckRank, "rank %d out of range", r)
	}
	p := ix.Ranks[r]
	if sha256.Sum256(skel) != p.SkeletonSHA256 {
		return fail(name, 0, r, CheckSkeleton, "SHA-256 of the skeleton is not the index's skeleton_sha256")
	}
	h, err := SkeletonHeader(skel, name)
	if err != nil {
		return err
	}
	got := PartFromHeader(r, h)
	if err := CheckPart(name, got, ix.Gen, ix.WorldSize, ix.Chain); err != nil {
		return err
	}
	if got.SHA256All != p.SHA256All || got.MerkleThis != p.MerkleThis || got.KeyID != p.KeyID {
		return fail(name, 0, r, CheckSkeleton, "header (sha256_all, merkle_this or keyid) disagrees with the index")
	}
	if got.TS > ix.TS {
		return fail(name, 0, r, CheckSkeleton, "ts is later than the generation's ts")
	}
	return nil
}

// SkeletonHeader parses the WTXT header of a skeleton (after its magic
// line).
func SkeletonHeader(skel []byte, name string) (*wtxt.Header, error) {
	rest, ok := bytes.CutPrefix(skel, []byte(wtxt.SkeletonMagic+"\n"))
	if !ok {
		return nil, fail(name, 1, -1, CheckSkeleton, "does not start with %q", wtxt.SkeletonMagic)
	}
	h, err := wtxt.ReadHeader(bytes.NewReader(rest))
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	if h.Pending {
		return nil, fail(name, 0, -1, CheckSkeleton, "a streamed (root_pending) part cannot be a rank part")
	}
	return h, nil
}
