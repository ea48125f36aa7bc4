package verify

import (
	"fmt"
	"strings"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/where"
)

// Failure is one failed check, naming where it happened.
type Failure struct {
	Commit  string `json:"commit"`
	Gen     string `json:"gen,omitempty"`
	File    string `json:"file,omitempty"` // path in the repository
	Line    int    `json:"line,omitempty"`
	Check   string `json:"check"`
	Message string `json:"message"`
}

func (f Failure) Error() string {
	var b strings.Builder
	c := f.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	fmt.Fprintf(&b, "commit %s", c)
	if f.Gen != "" {
		fmt.Fprintf(&b, " gen %s", f.Gen)
	}
	if f.File != "" {
		fmt.Fprintf(&b, " %s", f.File)
		if f.Line > 0 {
			fmt.Fprintf(&b, ":%d", f.Line)
		}
	}
	fmt.Fprintf(&b, ": %s: %s", f.Check, f.Message)
	return b.String()
}

// Unwrap returns wtxt.ErrChain for the chain check (the one chain check
// of the project; also a sub-format's, "ranks/chain"), nil otherwise.
func (f Failure) Unwrap() error {
	if f.Check == CheckChain || strings.HasSuffix(f.Check, "/"+CheckChain) {
		return wtxt.ErrChain
	}
	return nil
}

// Where locates the failure (internal/where): the file in the repository
// and its line, the part "commit <hash>", and the check in its namespace:
// "wtxt/<check>" and "seal/<check>" as they are, the ledger's own checks
// (CheckObject, ..., CheckSize, CheckResume, CheckRegistry) as
// "ledger/<check>".
func (f Failure) Where() where.Where {
	w := where.None()
	w.File, w.Line = f.File, f.Line
	if f.Commit != "" {
		w.Part = "commit " + f.Commit
	}
	w.Check = f.Check
	if !strings.Contains(f.Check, "/") {
		w.Check = where.Check(where.Ledger, f.Check)
	}
	return w
}

// Generation is what was established about one commit of the branch.
type Generation struct {
	Commit     string `json:"commit"`
	Gen        string `json:"gen"`
	Tag        string `json:"tag,omitempty"`
	TS         string `json:"ts,omitempty"`
	Layout     string `json:"layout,omitempty"` // single, split, segments or skeleton, as stored
	Encrypted  bool   `json:"encrypted"`
	WTXTBytes  int64  `json:"wtxt_bytes"`
	SHA256All  string `json:"sha256_all,omitempty"`
	MerklePrev string `json:"merkle_prev,omitempty"`
	MerkleThis string `json:"merkle_this,omitempty"`
	// Signature is the WTXT's (or, encrypted, the seal's) Ed25519
	// signature: wtxt.SigVerified, SigAbsent, SigFailed, ...
	Signature string `json:"signature"`
	KeyID     string `json:"keyid,omitempty"`
	// CommitSignature and TagSignature: SigVerified, SigAbsent or SigFailed.
	CommitSignature string `json:"commit_signature"`
	TagSignature    string `json:"tag_signature"`
	Signer          string `json:"signer,omitempty"` // SHA256 fingerprint of the commit's key
	Chain           string `json:"chain"`
	// Delta: "none", "applied", "skipped" (see Notes) or "failed".
	Delta string `json:"delta"`
	// Content says whether the generation's tensor bytes are there:
	// ContentPresent, ContentCollected or ContentMissing ("" when it was
	// not established: an untrusted commit, no registry given, a
	// skeleton that does not parse).
	Content string `json:"content,omitempty"`
	// Skeleton layout: Verification is VerifyFull, VerifySample or, for
	// a collected generation, VerifySkeleton; Segments the skeleton's
	// segment count, SegmentsRead the blobs read (and checked),
	// SampledSegments their indexes in file order when sampled, BlobBytes
	// the raw bytes read from the registry.
	Verification    string    `json:"verification,omitempty"`
	Segments        int       `json:"segments,omitempty"`
	SegmentsRead    int       `json:"segments_read,omitempty"`
	SampledSegments []int     `json:"sampled_segments,omitempty"`
	BlobBytes       int64     `json:"blob_bytes,omitempty"`
	Notes           []string  `json:"notes,omitempty"`
	Failures        []Failure `json:"failures"`
	// Abandoned: a later resume record abandons this generation (the run
	// restarted from an earlier one); it was verified all the same.
	Abandoned bool `json:"abandoned,omitempty"`
	// Resume is set on a resume record's entry (resume.go).
	Resume *ResumeInfo `json:"resume,omitempty"`

	// collected is the registry's answer for a ContentCollected
	// generation and the skeleton's path, for the failure should no later
	// generation's content be present (collected.go).
	collected *collectedInfo
}

// OK reports whether every check of the generation passed.
func (g *Generation) OK() bool { return len(g.Failures) == 0 }

// Gap is a jump in generation numbers between consecutive commits.
type Gap struct {
	After   string `json:"after"`
	Before  string `json:"before"`
	Missing uint64 `json:"missing"`
}

// Report is the outcome of Verify.
type Report struct {
	Branch      string        `json:"branch"`
	Path        string        `json:"path"`
	Head        string        `json:"head"`
	Since       string        `json:"since,omitempty"`
	Generations []*Generation `json:"generations"`
	// Gaps in generation numbers: reported, not failures (see doc.go).
	Gaps     []Gap `json:"gaps"`
	Failures int   `json:"failures"`
	OK       bool  `json:"ok"`
	// ContentPresent and ContentCollected count the generations of each
	// Generation.Content (collected.go).
	ContentPresent   int `json:"content_present"`
	ContentCollected int `json:"content_collected"`
}

// AllFailures returns the failures of every generation, oldest first.
func (r *Report) AllFailures() []Failure {
	var out []Failure
	for _, g := range r.Generations {
		out = append(out, g.Failures...)
	}
	return out
}
