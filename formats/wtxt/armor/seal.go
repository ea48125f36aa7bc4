package armor

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/where"
	"github.com/snapd-ml/snapd/keys"
)

// SealSuffix is appended to an armored file's path to name its seal.
const SealSuffix = ".wseal"

// SealPath returns the path of the seal of the armored file at path.
func SealPath(path string) string { return path + SealSuffix }

// Kinds of sealed file.
const (
	KindWTXT  = "wtxt"
	KindDelta = "delta"
	KindWSUM  = "wsum"
)

// Seal is the verify-only sidecar of one armored file (format WSEAL 1, see
// the package documentation).
type Seal struct {
	Kind   string
	Bytes  int64
	SHA256 [32]byte // of the armored bytes
	// Root is the sealed generation's chain values: gen and ts as written
	// in the WTXT meta line ("000123", "2025-10-09T03:12:45Z"), build,
	// sha256_all, merkle_prev, merkle_this.
	wtxt.Root
	KeyID string // empty when unsigned
	Sig   []byte // 64 bytes, nil when unsigned
}

// ErrSealUnsigned is returned by Verify for a seal without signature when a
// signature is required.
var ErrSealUnsigned = errors.New("seal is unsigned")

// SealError is a failed check of a seal, naming the check. A seal is
// parsed from bytes: the caller names the file (where.At locates the
// error in it).
type SealError struct {
	Check string // grammar, signature, bytes, sha256, armor, merkle, chain (wtxt.CheckChain), plaintext
	Msg   string
}

func (e *SealError) Error() string { return "seal: " + e.Check + ": " + e.Msg }

// Unwrap returns wtxt.ErrChain for the chain check (the one chain check
// of the project), nil otherwise.
func (e *SealError) Unwrap() error {
	if e.Check == string(wtxt.CheckChain) {
		return wtxt.ErrChain
	}
	return nil
}

// Where locates the failure (internal/where): the check as
// "seal/<check>"; the seal file is the caller's (where.At).
func (e *SealError) Where() where.Where {
	w := where.None()
	w.Check = where.Check(where.Seal, e.Check)
	return w
}

func sealErr(check, format string, a ...any) error {
	return &SealError{Check: check, Msg: fmt.Sprintf(format, a...)}
}

// signedPart is the line up to (not including) " keyid=".
func (s *Seal) signedPart() string {
	return fmt.Sprintf("WSEAL 1 kind=%s bytes=%d sha256=%x gen=%s ts=%s build=%s sha256_all=%x merkle_prev=%x merkle_this=%x",
		s.Kind, s.Bytes, s.SHA256, s.Gen, s.TS, s.Build, s.SHA256All, s.MerklePrev, s.MerkleThis)
}

// Sign sets KeyID and Sig with priv.
func (s *Seal) Sign(priv ed25519.PrivateKey) {
	s.KeyID = keys.KeyID(priv.Public().(ed25519.PublicKey))
	s.Sig = ed25519.Sign(priv, []byte(s.signedPart()))
}

// Marshal returns the seal line with its LF.
func (s *Seal) Marshal() []byte {
	var b strings.Builder
	b.WriteString(s.signedPart())
	if s.Sig != nil {
		fmt.Fprintf(&b, " keyid=%s sign=%s", s.KeyID, base64.StdEncoding.EncodeToString(s.Sig))
	}
	b.WriteByte('\n')
	return []byte(b.String())
}

// MaxSealSize bounds what ParseSeal reads.
const MaxSealSize = 4096

// ParseSeal parses a seal file strictly: one line, fixed field order,
// lowercase hex, LF-terminated.
func ParseSeal(b []byte) (*Seal, error) {
	if len(b) > MaxSealSize {
		return nil, sealErr("grammar", "%d bytes, limit %d", len(b), MaxSealSize)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' || bytes.IndexByte(b[:len(b)-1], '\n') >= 0 {
		return nil, sealErr("grammar", "want exactly one LF-terminated line")
	}
	for i, c := range b[:len(b)-1] {
		if c < 0x20 || c > 0x7e {
			return nil, sealErr("grammar", "byte 0x%02x at column %d is not printable ASCII", c, i+1)
		}
	}
	f := strings.Split(string(b[:len(b)-1]), " ")
	if len(f) < 2 || f[0] != "WSEAL" || f[1] != "1" {
		return nil, sealErr("grammar", `line must start "WSEAL 1 "`)
	}
	f = f[2:]
	names := []string{"kind", "bytes", "sha256", "gen", "ts", "build", "sha256_all", "merkle_prev", "merkle_this", "keyid", "sign"}
	if len(f) != 9 && len(f) != 11 {
		return nil, sealErr("grammar", "%d fields, want 9 (unsigned) or 11", len(f))
	}
	v := make([]string, len(f))
	for i, kv := range f {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k != names[i] || val == "" {
			return nil, sealErr("grammar", "field %d: want %s=<value> (got %d bytes)", i+1, names[i], len(kv))
		}
		v[i] = val
	}
	s := &Seal{Kind: v[0], Root: wtxt.Root{Gen: v[3], TS: v[4], Build: v[5]}}
	switch s.Kind {
	case KindWTXT, KindDelta, KindWSUM:
	default:
		return nil, sealErr("grammar", "kind: want wtxt, delta or wsum (got %d bytes)", len(s.Kind))
	}
	n, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != v[1] {
		return nil, sealErr("grammar", "bytes: not a canonical decimal (got %d bytes)", len(v[1]))
	}
	s.Bytes = n
	for _, f := range [...]struct {
		i   int
		dst *[32]byte
	}{{2, &s.SHA256}, {6, &s.SHA256All}, {7, &s.MerklePrev}, {8, &s.MerkleThis}} {
		if err := parseHex32(v[f.i], f.dst); err != nil {
			return nil, sealErr("grammar", "%s: %v", names[f.i], err)
		}
	}
	if len(s.Gen) < 6 || strings.Trim(s.Gen, "0123456789") != "" || (len(s.Gen) > 6 && s.Gen[0] == '0') {
		return nil, sealErr("grammar", "gen: want a decimal zero-padded to 6 digits (got %d bytes)", len(s.Gen))
	}
	if t, err := time.Parse("2006-01-02T15:04:05Z", s.TS); err != nil || t.Format("2006-01-02T15:04:05Z") != s.TS {
		return nil, sealErr("grammar", "ts: want YYYY-MM-DDTHH:MM:SSZ, a valid UTC time (got %d bytes)", len(s.TS))
	}
	if !wtxt.IsToken(s.Build) {
		return nil, sealErr("grammar", "build: want one or more of A-Z a-z 0-9 . _ - / : + (got %d bytes, not a token)", len(s.Build))
	}
	if len(f) == 11 {
		if len(v[9]) != 16 || strings.Trim(v[9], "0123456789abcdef") != "" {
			return nil, sealErr("grammar", "keyid: want 16 lowercase hex digits (got %d bytes)", len(v[9]))
		}
		s.KeyID = v[9]
		sig, err := base64.StdEncoding.Strict().DecodeString(v[10])
		if err != nil || len(sig) != ed25519.SignatureSize {
			return nil, sealErr("grammar", "sign: want base64 of a 64-byte Ed25519 signature")
		}
		s.Sig = sig
	}
	if !bytes.Equal(s.Marshal(), b) {
		return nil, sealErr("grammar", "not in canonical form")
	}
	return s, nil
}

func parseHex32(s string, dst *[32]byte) error {
	if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return fmt.Errorf("want 64 lowercase hex digits (got %d bytes)", len(s))
	}
	_, err := hex.Decode(dst[:], []byte(s))
	return err
}

// VerifyOptions say what a seal is checked against.
type VerifyOptions struct {
	// Trusted are the public keys a signature may come from.
	Trusted []ed25519.PublicKey
	// RequireSignature fails unsigned seals.
	RequireSignature bool
	// PrevMerkle, when set, must equal the seal's merkle_prev.
	PrevMerkle *[32]byte
}

// SealReport says what Verify established.
type SealReport struct {
	Signed bool
	KeyID  string
	// Signature is set by Check (wtxt.SigVerified, SigAbsent, SigUnchecked
	// or SigFailed); Verify leaves it empty.
	Signature string
}

// Verify checks a seal against the digest of its armored file (see Scan)
// without decrypting: signature, size and hash, the seal's own Merkle
// consistency, and chain continuity when opts.PrevMerkle is set.
func (s *Seal) Verify(d Digest, opts VerifyOptions) (*SealReport, error) {
	rep := &SealReport{}
	if s.Sig == nil {
		if opts.RequireSignature {
			return rep, &SealError{Check: "signature", Msg: ErrSealUnsigned.Error()}
		}
	} else {
		var key ed25519.PublicKey
		for _, k := range opts.Trusted {
			if keys.KeyID(k) == s.KeyID {
				key = k
				break
			}
		}
		if key == nil {
			return rep, sealErr("signature", "keyid %s is not among the %d trusted key(s)", s.KeyID, len(opts.Trusted))
		}
		if !ed25519.Verify(key, []byte(s.signedPart()), s.Sig) {
			return rep, sealErr("signature", "Ed25519 signature does not verify with key %s", s.KeyID)
		}
		rep.Signed, rep.KeyID = true, s.KeyID
	}
	if d.Bytes != s.Bytes {
		return rep, sealErr("bytes", "armored file has %d bytes, seal says %d", d.Bytes, s.Bytes)
	}
	if d.SHA256 != s.SHA256 {
		return rep, sealErr("sha256", "armored file sha256 %x, seal says %x", d.SHA256, s.SHA256)
	}
	if m := s.Root.Merkle(); m != s.MerkleThis {
		return rep, sealErr("merkle", "merkle_this %x does not follow from the seal's values (want %x)", s.MerkleThis, m)
	}
	if opts.PrevMerkle != nil && *opts.PrevMerkle != s.MerklePrev {
		return rep, sealErr(string(wtxt.CheckChain), "merkle_prev %x does not continue the previous generation's merkle_this %x", s.MerklePrev, *opts.PrevMerkle)
	}
	return rep, nil
}
