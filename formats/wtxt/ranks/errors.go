package ranks

import (
	"errors"
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
)

// Checks of this package: the rule a rank part or an index broke, as the
// Check of a *wtxt.Error. Values are stable (they appear in --json
// output); their last element gives their kind (wtxt.Check.Kind).
const (
	CheckGrammar   wtxt.Check = "ranks/grammar"    // index text, fields, order
	CheckWorldSize wtxt.Check = "ranks/world_size" // W out of range or disagreeing
	CheckRank      wtxt.Check = "ranks/rank"       // rank out of range, missing or claimed twice
	CheckGen       wtxt.Check = "ranks/gen"        // a part of another generation
	CheckChain     wtxt.Check = "ranks/chain"      // a part of another chain, or merkle_prev vs the previous generation
	CheckSHA256All wtxt.Check = "ranks/sha256_all" // root over the ranks
	CheckMerkle    wtxt.Check = "ranks/merkle"     // merkle_this vs its inputs
	CheckSignature wtxt.Check = "ranks/signature"  // Ed25519 over the index
	CheckSigner    wtxt.Check = "ranks/signer"     // signed by an untrusted key
	CheckManifest  wtxt.Check = "ranks/manifest"   // a rank manifest disagrees with its skeleton
	CheckSkeleton  wtxt.Check = "ranks/skeleton"   // a rank skeleton disagrees with the index
)

// ErrInvalid is wrapped by every error of a failed check (it is
// wtxt.ErrInvalid: a multi-rank index is a WTXT sub-format).
var ErrInvalid = wtxt.ErrInvalid

// Fail returns the *wtxt.Error of a failed check: file (index or skeleton
// file, or a registry tag), line (1-based, 0 when not about one line) and
// rank (-1 when not about one rank) locate it.
func Fail(file string, line, rank int, check wtxt.Check, format string, a ...any) *wtxt.Error {
	e := &wtxt.Error{File: file, Line: line, Chunk: -1, Check: check, Msg: fmt.Sprintf(format, a...)}
	if rank >= 0 {
		e.Rank = &rank
	}
	return e
}

func fail(file string, line, rank int, check wtxt.Check, format string, a ...any) *wtxt.Error {
	return Fail(file, line, rank, check, format, a...)
}

// IsCheck reports whether err is (or wraps) a failed check of this
// package: a *wtxt.Error whose Check is one of the checks above. A WTXT
// error of a rank part (a wtxt check) or an I/O error is not.
func IsCheck(err error) bool {
	var e *wtxt.Error
	return errors.As(err, &e) && strings.HasPrefix(string(e.Check), checkPrefix)
}

const checkPrefix = "ranks/"
