package review

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	wranks "github.com/snapd-ml/snapd/formats/wtxt/ranks"
	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/review/reviewtest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// rankShard is rank r's shard of generation gen: one f32 array of 256x16
// whose row 100+r changes between generations, and one that never does.
func rankShard(gen uint64, r int) *snapshot.Snapshot {
	w := make([]byte, 256*16*4)
	for i := range 256 * 16 {
		v := uint32(r*100000 + i)
		if i/16 == 100+r {
			v += uint32(gen)
		}
		binary.LittleEndian.PutUint32(w[i*4:], v)
	}
	b := bytes.Repeat([]byte{byte(r), 0, 0, 0}, 16)
	m := snapshot.DefaultMeta()
	m.TS = time.Date(2026, 11, 24, 7, 0, int(gen), 0, time.UTC)
	m.Build = "test"
	return &snapshot.Snapshot{Meta: m, Arrays: []*snapshot.Array{
		{Name: fmt.Sprintf("layers.%d.w", r), DType: snapshot.F32, Shape: []int64{256, 16}, Data: snapshot.Bytes(w)},
		{Name: fmt.Sprintf("layers.%d.b", r), DType: snapshot.F32, Shape: []int64{1, 16}, Data: snapshot.Bytes(b)},
	}}
}

// rankGen encodes generation gen of a world-rank job into dir/gen-N/:
// the rank skeletons and the signed index chained to prev.
// With repo the segments are uploaded to that registry (real
// docker-registry) instead of blobs.
func rankGen(t *testing.T, dir string, gen uint64, world int, chain, prev [32]byte, key ed25519.PrivateKey, blobs blobMap, repo ...*oci.Repository) (*wranks.Index, string) {
	t.Helper()
	ctx := context.Background()
	gd := filepath.Join(dir, fmt.Sprintf("gen-%d", gen))
	if err := os.MkdirAll(gd, 0o755); err != nil {
		t.Fatal(err)
	}
	var ps []wranks.Part
	for r := range world {
		var w bytes.Buffer
		if _, err := wranks.EncodePart(ctx, &w, rankShard(gen, r), wranks.PartOptions{Gen: gen, Chain: chain, SignKey: key}); err != nil {
			t.Fatal(err)
		}
		var sp string
		if len(repo) > 0 {
			var sk bytes.Buffer
			if _, _, err := repo[0].UploadSegments(ctx, bytes.NewReader(w.Bytes()), wranks.SkeletonName(r), &sk, 4096); err != nil {
				t.Fatal(err)
			}
			sp = filepath.Join(gd, wranks.SkeletonName(r))
			if err := os.WriteFile(sp, sk.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		} else {
			sp = skeletonOf(t, gd, wranks.SkeletonName(r), w.Bytes(), blobs)
		}
		sk := mustRead(t, sp)
		h, err := wranks.SkeletonHeader(sk, sp)
		if err != nil {
			t.Fatal(err)
		}
		p := wranks.PartFromHeader(r, h)
		p.Skeleton = wranks.SkeletonName(r)
		p.SkeletonSHA256 = sha256.Sum256(sk)
		p.Manifest = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(fmt.Sprint("manifest", gen, r))))
		ps = append(ps, p)
	}
	ix, err := wranks.New(fmt.Sprintf("%06d", gen), world, chain, ps, prev, "ranks", key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gd, wranks.IndexName), ix.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	return ix, gd
}

// rankInputs are the changed files of a PR from generation base to head.
func rankInputs(t *testing.T, base, head string, world int) []FileInput {
	t.Helper()
	in := []FileInput{{Path: gitops.RanksIndexPath(""), Base: filepath.Join(base, wranks.IndexName), Head: filepath.Join(head, wranks.IndexName)}}
	for r := range world {
		b, h := filepath.Join(base, wranks.SkeletonName(r)), filepath.Join(head, wranks.SkeletonName(r))
		patch, err := LocalPatch(context.Background(), "", b, h)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, FileInput{Path: path.Join(gitops.RanksDir(""), wranks.SkeletonName(r)), Base: b, Head: h, HasPatch: true, Parsed: patch})
	}
	return in
}

// TestBuildRanksGeneration: a PR from multi-rank generation 1 to 2 (3
// ranks, real rank parts, index and skeletons) is reviewed as `ranks
// verify-repo` checks the index (signature, chain, each skeleton against
// its line) and per rank from the ch lines: exactly row 100+r of rank r's
// weight changed, comments on the rank skeletons' ch lines. A broken chain,
// an untrusted signer and a skeleton that is not the index's are
// problems.
func TestBuildRanksGeneration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	pub := key.Public().(ed25519.PublicKey)
	chain := wranks.ChainID("review-job")
	const world = 3
	blobs := blobMap{}
	ix1, g1 := rankGen(t, dir, 1, world, chain, [32]byte{}, key, blobs)
	_, g2 := rankGen(t, dir, 2, world, chain, ix1.MerkleThis, key, blobs)
	opts := Options{TrustedKeys: []ed25519.PublicKey{pub}}
	rv, err := Build(ctx, rankInputs(t, g1, g2, world), opts)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventComment || len(rv.Files) != world+1 {
		t.Fatalf("event %s, %d files\n%s", rv.Event, len(rv.Files), rv.Body)
	}
	for _, fr := range rv.Files {
		if len(fr.Problems) != 0 {
			t.Fatalf("%s: problems %v", fr.Path, fr.Problems)
		}
		if fr.Path == gitops.RanksIndexPath("") {
			if !strings.Contains(strings.Join(fr.Notes, "\n"), "multi-rank generation 000002, world size 3, chain continues from base 000001") {
				t.Fatalf("index notes %v", fr.Notes)
			}
			continue
		}
		var r int
		fmt.Sscanf(path.Base(fr.Path), "rank-%05d.skel", &r)
		want := fmt.Sprintf("layers.%d.w", r)
		if len(fr.Chunks) == 0 {
			t.Fatalf("%s: no changed chunk", fr.Path)
		}
		for _, c := range fr.Chunks {
			if c.Array != want || c.FirstRow > int64(100+r) || c.EndRow <= int64(100+r) {
				t.Fatalf("%s: changed chunk %+v, want %s around row %d", fr.Path, c, want, 100+r)
			}
		}
		if fr.Report == nil || fr.Report.Signature != wtxt.SigVerified || fr.Report.Chain != "continues" {
			t.Fatalf("%s: report %+v", fr.Path, fr.Report)
		}
	}
	byPath := map[string][]string{}
	for _, c := range rv.Comments {
		if c.Chunk < 0 {
			continue
		}
		if byPath[c.Path] == nil {
			byPath[c.Path] = strings.Split(string(mustRead(t, filepath.Join(g2, path.Base(c.Path)))), "\n")
		}
		if l := byPath[c.Path][c.Line-1]; !strings.HasPrefix(l, "ch ") {
			t.Fatalf("comment on %s line %d %q", c.Path, c.Line, l)
		}
	}
	if len(byPath) != world {
		t.Fatalf("chunk comments on %d rank skeletons, want %d", len(byPath), world)
	}

	// With the registry: the rank parts are assembled and reviewed in
	// full, with the element numbers: one row of 16 elements per rank.
	ropts := opts
	ropts.Registry = blobs
	rv, err = Build(ctx, rankInputs(t, g1, g2, world), ropts)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventComment {
		t.Fatalf("with the registry: event %s\n%s", rv.Event, rv.Body)
	}
	for _, fr := range rv.Files[1:] {
		var changed int64
		for _, c := range fr.Chunks {
			if c.Stats != nil {
				changed += c.Stats.ChangedElements
			}
		}
		if len(fr.Problems) != 0 || changed != 16 {
			t.Fatalf("with the registry: %s: problems %v, %d changed elements, want 16", fr.Path, fr.Problems, changed)
		}
	}

	problems := func(in []FileInput, opts Options) string {
		t.Helper()
		rv, err := Build(ctx, in, opts)
		if err != nil {
			t.Fatal(err)
		}
		if rv.Event != EventRequestChanges {
			t.Fatalf("event %s\n%s", rv.Event, rv.Body)
		}
		return rv.Files[0].Path + ": " + strings.Join(rv.Files[0].Problems, "\n")
	}
	// Generation 2 not chained to generation 1.
	_, g2b := rankGen(t, filepath.Join(dir, "unchained"), 2, world, chain, [32]byte{}, key, blobs)
	if p := problems(rankInputs(t, g1, g2b, world), opts); !strings.Contains(p, "merkle_prev") || !strings.Contains(p, gitops.RanksIndexPath("")) {
		t.Fatalf("unchained: %s", p)
	}
	// Signed by a key that is not trusted.
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	_, g2c := rankGen(t, filepath.Join(dir, "other"), 2, world, chain, ix1.MerkleThis, other, blobs)
	if p := problems(rankInputs(t, g1, g2c, world), opts); !strings.Contains(p, "not a trusted key") {
		t.Fatalf("untrusted: %s", p)
	}
	// A PR from generation 1 to 3: no chain verdict from two files, a note.
	ix2, _ := rankGen(t, filepath.Join(dir, "g2again"), 2, world, chain, ix1.MerkleThis, key, blobMap{})
	_, g3 := rankGen(t, dir, 3, world, chain, ix2.MerkleThis, key, blobMap{})
	rv, err = Build(ctx, rankInputs(t, g1, g3, world), opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(rv.Files[0].Notes, "\n"); rv.Event != EventComment || len(rv.Files[0].Problems) != 0 || !strings.Contains(n, "same chain id as base 000001") || !strings.Contains(n, "checked commit by commit") {
		t.Fatalf("gen 1 -> 3: event %s, problems %v, notes %s", rv.Event, rv.Files[0].Problems, n)
	}

	// Generation 2 of another job (chain id): the index and every rank
	// part are refused, with and without the registry.
	_, g2d := rankGen(t, filepath.Join(dir, "otherjob"), 2, world, wranks.ChainID("other-job"), ix1.MerkleThis, key, blobs)
	for _, o := range []Options{opts, ropts} {
		rv, err := Build(ctx, rankInputs(t, g1, g2d, world), o)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range rv.Files {
			if p := strings.Join(fr.Problems, "\n"); !strings.Contains(p, "chain") {
				t.Fatalf("other job (registry %v): %s: problems %q", o.Registry != nil, fr.Path, p)
			}
		}
	}
	// Rank 1's skeleton replaced by another generation's.
	in := rankInputs(t, g1, g2, world)
	in[2].Head = in[2].Base
	if p := problems(in, opts); !strings.Contains(p, "rank 1") || !strings.Contains(p, "skeleton_sha256") {
		t.Fatalf("swapped skeleton: %s", p)
	}
}

// TestReviewPullRequestRanks: a pull request (fake GitHub, real git
// repository) that moves the ledger from multi-rank generation 1 to 2 is
// reviewed and posted: the index checked, each rank skeleton reviewed,
// line comments only on the changed ch lines of the rank skeletons.
func TestReviewPullRequestRanks(t *testing.T) {
	dir := t.TempDir()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	chain := wranks.ChainID("review-job")
	const world = 2
	ix1, g1 := rankGen(t, dir, 1, world, chain, [32]byte{}, key, blobMap{})
	_, g2 := rankGen(t, dir, 2, world, chain, ix1.MerkleThis, key, blobMap{})
	names := []string{wranks.IndexName}
	for r := range world {
		names = append(names, wranks.SkeletonName(r))
	}
	tree := func(g string) map[string][]byte {
		m := map[string][]byte{}
		for _, n := range names {
			m[path.Join(gitops.RanksDir(""), n)] = mustRead(t, filepath.Join(g, n))
		}
		return m
	}
	repo := reviewtest.NewRepo(t)
	base := repo.Commit(tree(g1), "gen 1")
	head := repo.Commit(tree(g2), "gen 2")
	s := reviewtest.New(t, "acme", "weights", 7)
	s.Token = testToken
	s.HeadSHA, s.BaseSHA = head, base
	for _, n := range names {
		p := path.Join(gitops.RanksDir(""), n)
		s.Files = append(s.Files, reviewtest.File{Filename: p, Status: "modified", Patch: repo.Patch(base, head, p)})
	}
	c := newTestClient(t, s, newFakeClock(), nil)
	res, err := c.ReviewPullRequest(context.Background(), Request{Owner: "acme", Repo: "weights", Number: 7, Fetch: GitFetcher{Dir: repo.Dir},
		Options: Options{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Review.Event != EventComment || len(res.Review.Files) != world+1 {
		t.Fatalf("event %s, %d files\n%s", res.Review.Event, len(res.Review.Files), res.Review.Body)
	}
	rs, cs := s.ReviewList(), s.CommentList()
	if len(rs) != 1 || !strings.Contains(rs[0].Body, "multi-rank generation 000002, world size 2") {
		t.Fatalf("reviews %+v", rs)
	}
	seen := map[string]bool{}
	for _, cm := range cs {
		lines := strings.Split(string(tree(g2)[cm.Path]), "\n")
		if !IsRankSkeleton(cm.Path) || cm.Line < 1 || cm.Line > len(lines) || !strings.HasPrefix(lines[cm.Line-1], "ch ") {
			t.Fatalf("comment on %s line %d", cm.Path, cm.Line)
		}
		seen[cm.Path] = true
	}
	if len(seen) != world {
		t.Fatalf("comments on %v, want every rank skeleton", seen)
	}
}

// TestBuildRanksGenerationRegistry: with --oci-repository's registry (a
// real docker-registry) every rank part is assembled from its blobs and
// reviewed in full: 16 changed elements (one row) per rank, no problem.
func TestBuildRanksGenerationRegistry(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/ranks-review", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	chain := wranks.ChainID("review-job")
	const world = 2
	ix1, g1 := rankGen(t, dir, 1, world, chain, [32]byte{}, key, nil, repo)
	_, g2 := rankGen(t, dir, 2, world, chain, ix1.MerkleThis, key, nil, repo)
	rv, err := Build(context.Background(), rankInputs(t, g1, g2, world), Options{TrustedKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, Registry: repo})
	if err != nil {
		t.Fatal(err)
	}
	if rv.Event != EventComment || len(rv.Files) != world+1 {
		t.Fatalf("event %s, %d files\n%s", rv.Event, len(rv.Files), rv.Body)
	}
	for _, fr := range rv.Files[1:] {
		var changed int64
		for _, c := range fr.Chunks {
			if c.Stats != nil {
				changed += c.Stats.ChangedElements
			}
		}
		if len(fr.Problems) != 0 || changed != 16 || fr.Report == nil || fr.Report.Chain != "continues" {
			t.Fatalf("%s: problems %v, %d changed elements, want 16, report %+v", fr.Path, fr.Problems, changed, fr.Report)
		}
	}
}
