package armor

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"

	"filippo.io/age"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// SealedOptions say what VerifySealed checks an armored file against.
type SealedOptions struct {
	// Seal is the seal's check: trusted keys, whether a signature is
	// required, the previous generation's merkle_this.
	Seal VerifyOptions
	// Identities, when not nil, is called once the seal has checked out;
	// the armored file is then decrypted with the identities it returns
	// and the plaintext verified. Its error ends VerifySealed and is
	// returned as it is. nil: verify-only, nothing is decrypted.
	Identities func() ([]age.Identity, error)
	// Plaintext verifies a decrypted WTXT (File names it in failures; its
	// WSUM is taken from the WSUM callback).
	Plaintext wtxt.VerifyOptions
	// WSUM, when not nil, is called before a decrypted WTXT is verified
	// and returns its WSUM (nil: none). Its error ends VerifySealed and is
	// returned as it is.
	WSUM func() ([]byte, error)
}

// SealedReport is what VerifySealed established.
type SealedReport struct {
	// Seal is the seal's check (Seal.Check); never nil.
	Seal *SealReport
	// Decrypted: the file was decrypted and its plaintext read to its end
	// (age authenticates every chunk) and, for a WTXT, verified.
	Decrypted bool
	// Plaintext is the report of a decrypted WTXT (nil otherwise); its
	// Failures is never nil.
	Plaintext *wtxt.Report
	// Failures are the failed checks in order (empty: all passed). Each
	// names its file: name for the armor, the ciphertext and the
	// plaintext, SealPath(name) for the seal. A plaintext failure is a
	// *wtxt.Error; a plaintext that is not the one the seal describes is a
	// *SealError with Check "plaintext".
	Failures []error
}

// VerifySealed is the one verification of an armored file through its
// seal s: Seal.Check of the armored bytes and, with opts.Identities once
// that passed, decryption and a full verification of the plaintext: a
// WTXT (s.Kind KindWTXT) with wtxt.Verify and then MatchHeader, any other
// kind by reading it to its end. armored is read from offset 0 to its end,
// twice when decrypting; name is the armored file's name in failures.
//
// A failed check is in the report's Failures, not the error; the error is
// only a callback's (opts.Identities, opts.WSUM) or ctx's.
func VerifySealed(ctx context.Context, name string, armored io.ReaderAt, s *Seal, opts SealedOptions) (*SealedReport, error) {
	whole := func() io.Reader { return io.NewSectionReader(armored, 0, math.MaxInt64) }
	srep, err := s.Check(whole(), opts.Seal)
	out := &SealedReport{Seal: srep}
	if err != nil {
		file := SealPath(name)
		if se := (*SealError)(nil); errors.As(err, &se) && se.Check == "armor" {
			file = name
		}
		out.Failures = append(out.Failures, fmt.Errorf("%s: %w", file, err))
		return out, nil
	}
	if opts.Identities == nil {
		return out, nil
	}
	ids, err := opts.Identities()
	if err != nil {
		return out, err
	}
	pr, err := Decrypt(whole(), ids...)
	if err != nil {
		out.Failures = append(out.Failures, fmt.Errorf("%s: %w", name, err))
		return out, nil
	}
	out.Decrypted = true
	if s.Kind != KindWTXT {
		if _, err := io.Copy(io.Discard, pr); err != nil {
			out.Failures = append(out.Failures, fmt.Errorf("%s: decrypt: %w", name, err))
		}
		return out, nil
	}
	vo := opts.Plaintext
	if opts.WSUM != nil {
		if vo.WSUM, err = opts.WSUM(); err != nil {
			return out, err
		}
	}
	rep, verr := wtxt.Verify(ctx, pr, vo)
	var werr *wtxt.Error
	switch {
	case verr != nil && !errors.As(verr, &werr):
		out.Failures = append(out.Failures, fmt.Errorf("%s: decrypt: %w", name, verr))
	case verr != nil:
		out.Failures = append(out.Failures, verr)
	default:
		if err := s.MatchHeader(rep); err != nil {
			out.Failures = append(out.Failures, err)
		}
	}
	if rep != nil && rep.Failures == nil {
		rep.Failures = []*wtxt.Error{}
	}
	out.Plaintext = rep
	return out, nil
}

// MatchHeader checks that a verified plaintext (its wtxt.Verify report)
// is the generation the seal describes: gen, ts, build, sha256_all,
// merkle_prev and merkle_this equal. A mismatch is a *SealError with
// Check "plaintext".
func (s *Seal) MatchHeader(rep *wtxt.Report) error {
	if rep == nil || rep.Header == nil {
		return sealErr("plaintext", "the decrypted snapshot has no header to compare with the seal")
	}
	h := rep.Header
	all, _ := hex.DecodeString(rep.SHA256All)
	this, _ := hex.DecodeString(rep.MerkleThis)
	prev, _ := hex.DecodeString(rep.MerklePrev)
	if h.Gen != s.Gen || h.TS != s.TS || h.Meta.Build != s.Build || !bytes.Equal(all, s.SHA256All[:]) ||
		!bytes.Equal(this, s.MerkleThis[:]) || !bytes.Equal(prev, s.MerklePrev[:]) {
		return sealErr("plaintext", "the decrypted snapshot (gen %s, merkle_this %s) is not the one the seal describes (gen %s, merkle_this %x)", h.Gen, rep.MerkleThis, s.Gen, s.MerkleThis)
	}
	return nil
}
