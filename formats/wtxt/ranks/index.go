package ranks

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
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

// MaxSkeletonBytes bounds one rank part's skeleton read from Git or a
// registry (a whole 70B model's skeleton is about 360 MB, README scale
// table).
const MaxSkeletonBytes = 512 << 20

// Names of a multi-rank generation in a ledger's tree: the directory
// DirName (under the ledger's snapshot path) holds the index IndexName and
// the W skeletons SkeletonName(r), nothing else.
const (
	DirName   = "ranks"
	IndexName = "index.ranks"
)

// MaxIndexBytes bounds an index file read from Git or disk: one rank line
// is at most ~420 bytes, so 2^16 ranks fit in 32 MiB.
const MaxIndexBytes = 32 << 20

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

// ParseGen parses a DEC6 gen (at least 6 digits, zero-padded to 6, at
// most 18; 1..10^18-1); ok is false for anything else.
func ParseGen(gen string) (n uint64, ok bool) { return genNumber(gen) }

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
