package ranks

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/keys"
)

// IndexMagic is the first line of a generation index.
const IndexMagic = "WTXT-RANKS 1"

// RootMagic starts the root text hashed into a generation's sha256_all.
const RootMagic = "snapd-ranks/1"

// MaxWorldSize bounds W (a bigger world size is refused before anything
// is allocated for it).
const MaxWorldSize = 1 << 16

// MaxIndexBytes bounds an index file read from Git or disk: one rank line
// is at most ~420 bytes, so 2^16 ranks fit in 32 MiB.
const MaxIndexBytes = 32 << 20

// Check names the rule a rank part or an index broke. Values are stable.
type Check string

// Checks of this package.
const (
	CheckGrammar   Check = "grammar"    // index text, fields, order
	CheckWorldSize Check = "world_size" // W out of range or disagreeing
	CheckRank      Check = "rank"       // rank out of range, missing or claimed twice
	CheckGen       Check = "gen"        // a part of another generation
	CheckChain     Check = "chain"      // a part of another chain, or merkle_prev vs the previous generation
	CheckSHA256All Check = "sha256_all" // root over the ranks
	CheckMerkle    Check = "merkle"     // merkle_this vs its inputs
	CheckSignature Check = "signature"  // Ed25519 over the index
	CheckSigner    Check = "signer"     // signed by an untrusted key
	CheckManifest  Check = "manifest"   // a rank manifest disagrees with its skeleton
	CheckSkeleton  Check = "skeleton"   // a rank skeleton disagrees with the index
)

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("invalid multi-rank generation")

// Error is a failed check, located.
type Error struct {
	File  string // index or skeleton file, or a registry tag
	Line  int    // 1-based, 0 when not about one line
	Rank  int    // -1 when not about one rank
	Check Check
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Rank >= 0 {
		fmt.Fprintf(&b, "rank %d: ", e.Rank)
	}
	fmt.Fprintf(&b, "%s: %s", e.Check, e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

func fail(file string, line, rank int, check Check, format string, a ...any) *Error {
	return &Error{File: file, Line: line, Rank: rank, Check: check, Msg: fmt.Sprintf(format, a...)}
}

// ChainID returns the chain id of a job: SHA-256("snapd-ranks-chain/1\n" ||
// job). Every rank part of the job carries it as its merkle_prev.
func ChainID(job string) [32]byte {
	return sha256.Sum256([]byte("snapd-ranks-chain/1\n" + job))
}

// Part is what the index records about one rank part: its WTXT header
// values, and where its skeleton and rank manifest are.
type Part struct {
	Rank           int
	Gen            string // meta gen as written (DEC6)
	TS             string
	SHA256All      [32]byte
	MerklePrev     [32]byte // must be the chain id
	MerkleThis     [32]byte
	KeyID          string // "" when unsigned
	Skeleton       string // file name beside the index
	SkeletonSHA256 [32]byte
	Manifest       string // sha256:<hex64> of the rank manifest
}

// PartFromHeader fills a Part's header values from a rank part's header.
func PartFromHeader(rank int, h *wtxt.Header) Part {
	return Part{Rank: rank, Gen: h.Gen, TS: h.TS, SHA256All: h.SHA256All, MerklePrev: h.MerklePrev, MerkleThis: h.MerkleThis, KeyID: h.KeyID}
}

// Index is one multi-rank generation.
type Index struct {
	Gen        string // DEC6
	WorldSize  int
	TS         string // latest rank ts
	Build      string
	Chain      [32]byte
	Ranks      []Part // rank order, len WorldSize
	SHA256All  [32]byte
	MerklePrev [32]byte
	MerkleThis [32]byte
	Signature  []byte // nil when unsigned
	KeyID      string
	// Signed is the text the signature covers (set by Encode and Parse).
	Signed []byte
}

// SkeletonName is the file name of rank r's skeleton beside the index.
func SkeletonName(r int) string { return fmt.Sprintf("rank-%05d.skel", r) }

// RootText is the canonical text whose SHA-256 is the generation's
// sha256_all (docs/FORMAT.md section 7).
func RootText(gen string, world int, parts []Part) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s gen=%s world_size=%d\n", RootMagic, gen, world)
	for _, p := range parts {
		fmt.Fprintf(&b, "rank=%d sha256_all=%x merkle_this=%x\n", p.Rank, p.SHA256All, p.MerkleThis)
	}
	return b.Bytes()
}

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

func short(h [32]byte) string { return hex.EncodeToString(h[:6]) }

// New builds the index of generation gen from its parts (any order; exactly
// one per rank 0..world-1), chained to prev (merkle_this of the previous
// generation, zeros for the first) and signed with key (nil: unsigned).
// Two different parts claiming one rank, a missing rank, a part of another
// generation or chain, or a world size out of range fail with an *Error
// naming the rank.
func New(gen string, world int, chain [32]byte, parts []Part, prev [32]byte, build string, key ed25519.PrivateKey) (*Index, error) {
	if world < 1 || world > MaxWorldSize {
		return nil, fail("", 0, -1, CheckWorldSize, "world size %d out of range 1..%d", world, MaxWorldSize)
	}
	if !wtxt.IsToken(build) {
		return nil, fail("", 0, -1, CheckGrammar, "build: want one or more of A-Z a-z 0-9 . _ - / : + (got %d bytes, not a token)", len(build))
	}
	if _, ok := genNumber(gen); !ok {
		return nil, fail("", 0, -1, CheckGen, "gen: want a decimal zero-padded to 6 digits (got %d bytes)", len(gen))
	}
	byRank := make([]*Part, world)
	for i := range parts {
		p := &parts[i]
		if err := CheckPart(fmt.Sprintf("part %d", i), *p, gen, world, chain); err != nil {
			return nil, err
		}
		if q := byRank[p.Rank]; q != nil {
			if q.SHA256All != p.SHA256All || q.MerkleThis != p.MerkleThis {
				return nil, fail("", 0, p.Rank, CheckRank, "claimed by two different shards (sha256_all %s and %s)", short(q.SHA256All), short(p.SHA256All))
			}
			continue
		}
		byRank[p.Rank] = p
	}
	ix := &Index{Gen: gen, WorldSize: world, Build: build, Chain: chain, MerklePrev: prev, Ranks: make([]Part, world)}
	for r, p := range byRank {
		if p == nil {
			return nil, fail("", 0, r, CheckRank, "missing: %d of %d ranks present", countNonNil(byRank), world)
		}
		if !validPartFields(*p) {
			return nil, fail("", 0, r, CheckGrammar, "skeleton name, keyid, ts or manifest digest is not canonical")
		}
		ix.Ranks[r] = *p
		if p.TS > ix.TS {
			ix.TS = p.TS
		}
	}
	ix.SHA256All = sha256.Sum256(RootText(gen, world, ix.Ranks))
	ix.MerkleThis = wtxt.Merkle(prev, ix.SHA256All, ix.TS, gen, build)
	ix.Signed = ix.encodeSigned()
	if key != nil {
		ix.Signature = ed25519.Sign(key, ix.Signed)
		ix.KeyID = keys.KeyID(key.Public().(ed25519.PublicKey))
	}
	return ix, nil
}

func countNonNil(ps []*Part) int {
	n := 0
	for _, p := range ps {
		if p != nil {
			n++
		}
	}
	return n
}

func validPartFields(p Part) bool {
	return validSkeletonName(p.Skeleton) && (p.KeyID == "" || isHex(p.KeyID, 16)) && validTS(p.TS) &&
		strings.HasPrefix(p.Manifest, "sha256:") && isHex(p.Manifest[7:], 64)
}

func validSkeletonName(s string) bool {
	if s == "" || len(s) > 255 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validTS checks the WTXT ts form YYYY-MM-DDTHH:MM:SSZ (so that the
// bytewise maximum is the latest time).
func validTS(s string) bool {
	if len(s) != 20 {
		return false
	}
	for i := 0; i < 20; i++ {
		c := s[i]
		switch i {
		case 4, 7:
			if c != '-' {
				return false
			}
		case 10:
			if c != 'T' {
				return false
			}
		case 13, 16:
			if c != ':' {
				return false
			}
		case 19:
			if c != 'Z' {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < n; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// genNumber parses a DEC6 gen (at least 6 digits, at most 18).
func genNumber(gen string) (uint64, bool) {
	if len(gen) < 6 || len(gen) > 18 {
		return 0, false
	}
	if len(gen) > 6 && gen[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(gen); i++ {
		if gen[i] < '0' || gen[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(gen, 10, 64)
	return n, err == nil && n >= 1
}

// GenNumber returns the generation number of the index.
func (ix *Index) GenNumber() uint64 { n, _ := genNumber(ix.Gen); return n }

// encodeSigned returns the text from the magic through the root line.
func (ix *Index) encodeSigned() []byte {
	var b bytes.Buffer
	b.WriteString(IndexMagic + "\n")
	fmt.Fprintf(&b, "gen gen=%s world_size=%d ts=%s build=%s chain=%x\n", ix.Gen, ix.WorldSize, ix.TS, ix.Build, ix.Chain)
	for _, p := range ix.Ranks {
		kid := p.KeyID
		if kid == "" {
			kid = "-"
		}
		fmt.Fprintf(&b, "rank rank=%d sha256_all=%x merkle_this=%x keyid=%s skeleton=%s skeleton_sha256=%x manifest=%s\n",
			p.Rank, p.SHA256All, p.MerkleThis, kid, p.Skeleton, p.SkeletonSHA256, p.Manifest)
	}
	fmt.Fprintf(&b, "root sha256_all=%x merkle_prev=%x merkle_this=%x\n", ix.SHA256All, ix.MerklePrev, ix.MerkleThis)
	return b.Bytes()
}

// Encode returns the index file's bytes.
func (ix *Index) Encode() []byte {
	b := append([]byte(nil), ix.encodeSigned()...)
	if ix.Signature != nil {
		b = fmt.Appendf(b, "sign ed25519=%s keyid=%s\n", base64.StdEncoding.EncodeToString(ix.Signature), ix.KeyID)
	}
	return append(b, "endranks\n"...)
}

// Parse parses an index file strictly. name locates errors. It checks the
// grammar, the rank order (0..W-1, each once), that sha256_all and
// merkle_this follow from the lines above them, but not the signature or
// the chain (Verify).
func Parse(b []byte, name string) (*Index, error) {
	if len(b) > MaxIndexBytes {
		return nil, fail(name, 0, -1, CheckGrammar, "%d bytes, more than the %d an index may have", len(b), MaxIndexBytes)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, fail(name, 0, -1, CheckGrammar, "does not end with a newline")
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	for i, l := range lines {
		for j := 0; j < len(l); j++ {
			if l[j] < 0x20 || l[j] > 0x7e {
				return nil, fail(name, i+1, -1, CheckGrammar, "byte %d is not printable ASCII", j+1)
			}
		}
	}
	if len(lines) < 5 || lines[0] != IndexMagic {
		return nil, fail(name, 1, -1, CheckGrammar, "not a %s file (or too short)", IndexMagic)
	}
	ix := &Index{}
	f, ok := fieldsOf(lines[1], "gen", "gen", "world_size", "ts", "build", "chain")
	if !ok {
		return nil, fail(name, 2, -1, CheckGrammar, "want: gen gen= world_size= ts= build= chain=")
	}
	ix.Gen, ix.TS, ix.Build = f[0], f[2], f[3]
	if _, ok := genNumber(ix.Gen); !ok {
		return nil, fail(name, 2, -1, CheckGrammar, "gen is not DEC6 in 1..999999999999999999")
	}
	w, err := strconv.Atoi(f[1])
	if err != nil || w < 1 || w > MaxWorldSize || strconv.Itoa(w) != f[1] {
		return nil, fail(name, 2, -1, CheckWorldSize, "world_size is not a canonical decimal in 1..%d", MaxWorldSize)
	}
	ix.WorldSize = w
	if !validTS(ix.TS) || !wtxt.IsToken(ix.Build) || !parseHex32(f[4], &ix.Chain) {
		return nil, fail(name, 2, -1, CheckGrammar, "bad ts, build or chain value")
	}
	nr := 0
	for nr+2 < len(lines) && strings.HasPrefix(lines[nr+2], "rank ") {
		nr++
	}
	if nr != w {
		return nil, fail(name, 2, -1, CheckWorldSize, "world_size is %d, but %d rank lines follow", w, nr)
	}
	// magic, gen, W ranks, root, [sign], endranks
	if n := len(lines); n != w+4 && n != w+5 {
		return nil, fail(name, 0, -1, CheckGrammar, "%d lines, world_size %d needs %d (or %d signed)", n, w, w+4, w+5)
	}
	ix.Ranks = make([]Part, w)
	for r := 0; r < w; r++ {
		ln := r + 3
		f, ok := fieldsOf(lines[ln-1], "rank", "rank", "sha256_all", "merkle_this", "keyid", "skeleton", "skeleton_sha256", "manifest")
		if !ok {
			return nil, fail(name, ln, r, CheckGrammar, "want: rank rank= sha256_all= merkle_this= keyid= skeleton= skeleton_sha256= manifest=")
		}
		if f[0] != strconv.Itoa(r) {
			return nil, fail(name, ln, r, CheckRank, "want rank=%d here; ranks must be listed 0..%d in order, once each", r, w-1)
		}
		p := Part{Rank: r, Gen: ix.Gen, MerklePrev: ix.Chain, Skeleton: f[4], Manifest: f[6]}
		if f[3] != "-" {
			p.KeyID = f[3]
		}
		if !parseHex32(f[1], &p.SHA256All) || !parseHex32(f[2], &p.MerkleThis) || !parseHex32(f[5], &p.SkeletonSHA256) ||
			!validSkeletonName(p.Skeleton) || (p.KeyID != "" && !isHex(p.KeyID, 16)) ||
			!strings.HasPrefix(p.Manifest, "sha256:") || !isHex(p.Manifest[7:], 64) {
			return nil, fail(name, ln, r, CheckGrammar, "bad hex, keyid, skeleton name or manifest digest")
		}
		ix.Ranks[r] = p
	}
	ln := w + 3
	f, ok = fieldsOf(lines[ln-1], "root", "sha256_all", "merkle_prev", "merkle_this")
	if !ok || !parseHex32(f[0], &ix.SHA256All) || !parseHex32(f[1], &ix.MerklePrev) || !parseHex32(f[2], &ix.MerkleThis) {
		return nil, fail(name, ln, -1, CheckGrammar, "want: root sha256_all=<hex64> merkle_prev=<hex64> merkle_this=<hex64>")
	}
	end := w + 4
	if len(lines) == w+5 {
		ln = w + 4
		f, ok := fieldsOf(lines[ln-1], "sign", "ed25519", "keyid")
		if !ok || len(f[0]) != 88 || !isHex(f[1], 16) {
			return nil, fail(name, ln, -1, CheckGrammar, "want: sign ed25519=<base64, 88 chars> keyid=<hex16>")
		}
		sig, err := base64.StdEncoding.Strict().DecodeString(f[0])
		if err != nil || len(sig) != ed25519.SignatureSize {
			return nil, fail(name, ln, -1, CheckGrammar, "signature is not 64 bytes of strict base64")
		}
		ix.Signature, ix.KeyID = sig, f[1]
		end = w + 5
	}
	if lines[end-1] != "endranks" {
		return nil, fail(name, end, -1, CheckGrammar, "want endranks")
	}
	ix.Signed = ix.encodeSigned()
	if !bytes.Equal(ix.Encode(), b) {
		return nil, fail(name, 0, -1, CheckGrammar, "not in canonical form")
	}
	if got := sha256.Sum256(RootText(ix.Gen, w, ix.Ranks)); got != ix.SHA256All {
		return nil, fail(name, w+3, -1, CheckSHA256All, "sha256_all %s does not follow from the rank lines (computed %s)", short(ix.SHA256All), short(got))
	}
	if got := wtxt.Merkle(ix.MerklePrev, ix.SHA256All, ix.TS, ix.Gen, ix.Build); got != ix.MerkleThis {
		return nil, fail(name, w+3, -1, CheckMerkle, "merkle_this %s does not follow from merkle_prev, sha256_all, ts, gen, build (computed %s)", short(ix.MerkleThis), short(got))
	}
	return ix, nil
}

// fieldsOf splits "kind k1=v1 k2=v2 ..." with exactly the given keys in
// order and non-empty values.
func fieldsOf(line, kind string, keys ...string) ([]string, bool) {
	parts := strings.Split(line, " ")
	if len(parts) != len(keys)+1 || parts[0] != kind {
		return nil, false
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		v, ok := strings.CutPrefix(parts[i+1], k+"=")
		if !ok || v == "" {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func parseHex32(s string, dst *[32]byte) bool {
	if !isHex(s, 64) {
		return false
	}
	_, err := hex.Decode(dst[:], []byte(s))
	return err == nil
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
