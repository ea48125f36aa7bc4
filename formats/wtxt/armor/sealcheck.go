package armor

import (
	"errors"
	"io"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Check is the one verification of an armored file through its seal s,
// used by `snapd verify` and verify-repo: the armor's form, size and
// SHA-256 (Scan, reading armored to its end), then Verify. It never
// decrypts. A Scan failure is a *SealError with Check "armor" (its
// message names the line); the others are Verify's.
//
// The report is never nil; its Signature says what became of the seal's
// signature: wtxt.SigVerified, wtxt.SigAbsent (the seal is unsigned),
// wtxt.SigUnchecked (signed, but not checked: no trusted keys were given,
// or the armor did not scan) or wtxt.SigFailed.
func (s *Seal) Check(armored io.Reader, opts VerifyOptions) (*SealReport, error) {
	d, err := Scan(armored)
	if err != nil {
		rep := &SealReport{Signature: wtxt.SigAbsent}
		if s.Sig != nil {
			rep.Signature = wtxt.SigUnchecked
		}
		return rep, &SealError{Check: "armor", Msg: strings.TrimPrefix(err.Error(), "armor: ")}
	}
	rep, err := s.Verify(d, opts)
	var se *SealError
	switch {
	case rep.Signed:
		rep.Signature = wtxt.SigVerified
	case s.Sig == nil:
		rep.Signature = wtxt.SigAbsent
	case len(opts.Trusted) == 0:
		rep.Signature = wtxt.SigUnchecked
	case errors.As(err, &se) && se.Check == "signature":
		rep.Signature = wtxt.SigFailed
	}
	return rep, err
}
