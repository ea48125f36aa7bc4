package verifytest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/snapshot"
)

// SkelGen is one skeleton-layout generation as built.
type SkelGen struct {
	Number   uint64
	WTXT     []byte // the full WTXT (never committed)
	Skeleton []byte // what was committed as current.wtxt.skel
	Result   *wtxt.Result
	Push     *oci.PushResult
	Commit   string
	Tag      string
}

// SkeletonFixture is a Git repository (with a work tree, branch
// "snapshots") of skeleton-layout generations whose segment blobs are in
// an OCI repository.
type SkeletonFixture struct {
	Dir  string
	Key  *Key
	Repo *oci.Repository
	Gens []*SkelGen
	// Meta, when set, gives generation n's metadata (snapshot.UserMeta)
	// for the generations Extend and AddTampered encode; CommitSkeleton
	// commits the metadata inside the WTXT as the Snapd-Meta trailer.
	Meta func(n uint64) snapshot.UserMeta
	seg  int64
}

// BuildSkeleton encodes generations gens (Snapshot(n), signed and chained),
// pushes each to repo with PushWTXT at segment size segSize and commits
// its skeleton as snapshots/current.wtxt.skel with generation.txt and
// snapd's trailers (Snapd-Layout: skeleton), the commit and its annotated
// tag SSH-signed by a fresh key with the git CLI.
func BuildSkeleton(t testing.TB, repo *oci.Repository, gens []uint64, segSize int64) *SkeletonFixture {
	t.Helper()
	f := &SkeletonFixture{Dir: filepath.Join(t.TempDir(), "work"), Key: NewKey(t), Repo: repo, seg: segSize}
	if err := os.MkdirAll(filepath.Join(f.Dir, gitops.DefaultPath), 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, f.Dir, "init", "-q", "-b", gitops.DefaultBranch)
	f.Extend(t, gens...)
	return f
}

// Add pushes data (generation n, whose encoding result is res) and commits
// its skeleton on top of the branch.
func (f *SkeletonFixture) Add(t testing.TB, n uint64, data []byte, res *wtxt.Result) *SkelGen {
	t.Helper()
	var skel bytes.Buffer
	pr, err := f.Repo.PushWTXT(context.Background(), bytes.NewReader(data), gitops.FileWTXT, &skel, f.seg)
	if err != nil {
		t.Fatalf("push gen %d: %v", n, err)
	}
	g := &SkelGen{Number: n, WTXT: data, Skeleton: skel.Bytes(), Result: res, Push: pr}
	g.Commit, g.Tag = f.CommitSkeleton(t, n, g.Skeleton, data, res)
	f.Gens = append(f.Gens, g)
	return g
}

// CommitSkeleton commits skel (possibly tampered with) as generation n's
// skeleton, with generation.txt describing data and res, signed.
func (f *SkeletonFixture) CommitSkeleton(t testing.TB, n uint64, skel, data []byte, res *wtxt.Result) (commit, tag string) {
	t.Helper()
	s := Snapshot(n)
	genText, ts := wtxt.FormatGen(n), wtxt.FormatTS(s.Meta.TS)
	hx := func(b [32]byte) string { return hex.EncodeToString(b[:]) }
	ws, ss := sha256.Sum256(data), sha256.Sum256(skel)
	summary := fmt.Sprintf("gen=%s\nts=%s\nbuild=%s\nsha256_all=%s\nmerkle_prev=%s\nmerkle_this=%s\nlayout=%s\nwtxt_bytes=%d\nwtxt_sha256=%s\nskel_bytes=%d\nskel_sha256=%s\n",
		genText, ts, s.Meta.Build, hx(res.SHA256All), hx(res.MerklePrev), hx(res.MerkleThis), layout.Skeleton, len(data), hx(ws), len(skel), hx(ss))
	dir := filepath.Join(f.Dir, gitops.DefaultPath)
	WriteFile(t, filepath.Join(dir, layout.FileSkeleton), skel)
	WriteFile(t, filepath.Join(dir, gitops.FileSummary), []byte(summary))
	msg := fmt.Sprintf("snapd: generation %s\n\n%s: %s\n%s: %s\n%s: %s\n%s: %s\n%s: %s\n%s: %s\n%s: %s\n",
		genText, gitops.TrailerGen, genText, gitops.TrailerTS, ts, gitops.TrailerBuild, s.Meta.Build,
		gitops.TrailerSHA256All, hx(res.SHA256All), gitops.TrailerMerklePrev, hx(res.MerklePrev), gitops.TrailerMerkleThis, hx(res.MerkleThis),
		gitops.TrailerLayout, layout.Skeleton)
	// The metadata inside the WTXT, as gitops commits it.
	meta, err := wtxt.ReadUserMeta(context.Background(), "data", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("gen %d: metadata: %v", n, err)
	}
	if len(meta) > 0 {
		msg += gitops.TrailerMeta + ": " + meta.String() + "\n"
	}
	msgFile := WriteFile(t, filepath.Join(t.TempDir(), "msg"), []byte(msg))
	Git(t, f.Dir, "add", "-A")
	Git(t, f.Dir, append(signArgs(f.Key.PrivFile), "commit", "-q", "-S", "--cleanup=verbatim", "-F", msgFile)...)
	commit = strings.TrimSpace(Git(t, f.Dir, "rev-parse", "HEAD"))
	tag = gitops.DefaultTagPrefix + genText
	Git(t, f.Dir, append(signArgs(f.Key.PrivFile), "tag", "-f", "-s", "-a", "--cleanup=verbatim", "-F", msgFile, tag, commit)...)
	return commit, tag
}

// AddTampered is Add with the committed skeleton replaced by
// tamper(skeleton): the registry gets the true segments and manifest,
// Git a skeleton changed by a trusted signer (the commit and tag are
// signed as usual).
func (f *SkeletonFixture) AddTampered(t testing.TB, n uint64, tamper func([]byte) []byte) *SkelGen {
	t.Helper()
	var pm [32]byte
	if len(f.Gens) > 0 {
		pm = f.Gens[len(f.Gens)-1].Result.MerkleThis
	}
	data, res := Encode(t, SnapshotWith(n, f.Meta), f.Key.Priv, pm)
	var skel bytes.Buffer
	pr, err := f.Repo.PushWTXT(context.Background(), bytes.NewReader(data), gitops.FileWTXT, &skel, f.seg)
	if err != nil {
		t.Fatalf("push gen %d: %v", n, err)
	}
	bad := tamper(bytes.Clone(skel.Bytes()))
	if bytes.Equal(bad, skel.Bytes()) {
		t.Fatalf("gen %d: the tamper function changed nothing", n)
	}
	g := &SkelGen{Number: n, WTXT: data, Skeleton: bad, Result: res, Push: pr}
	g.Commit, g.Tag = f.CommitSkeleton(t, n, bad, data, res)
	f.Gens = append(f.Gens, g)
	return g
}

// Extend adds generations gens (Snapshot(n), signed, chained to the last
// one) as BuildSkeleton does.
func (f *SkeletonFixture) Extend(t testing.TB, gens ...uint64) {
	t.Helper()
	for _, n := range gens {
		var pm [32]byte
		if len(f.Gens) > 0 {
			pm = f.Gens[len(f.Gens)-1].Result.MerkleThis
		}
		data, res := Encode(t, SnapshotWith(n, f.Meta), f.Key.Priv, pm)
		f.Add(t, n, data, res)
	}
}
