package review

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// *oci.Repository tells collected content from damage.
var _ Retention = (*oci.Repository)(nil)

// collectedFixture pushes generations 1..4 (with metadata) to a real
// registry, deletes the manifests of all but the newest two as `snapd gc
// --remote --keep 2` does and runs the registry's garbage collection:
// generations 1 and 2 are collected, 3 and 4 present. It returns the
// registry, the fixture, the repository and the generations' skeletons as
// local files.
func collectedFixture(t *testing.T) (*registrytest.Registry, *verifytest.SkeletonFixture, *oci.Repository, []string) {
	t.Helper()
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	f := verifytest.BuildSkeleton(t, repo, nil, 8<<10)
	// Generation 1 carries generation 4's metadata: its document's blob
	// is then 4's and survives retention.
	f.Meta = func(n uint64) snapshot.UserMeta {
		if n == 1 {
			n = 4
		}
		return verifytest.StepMeta(n)
	}
	f.Extend(t, 1, 2, 3, 4)
	if removed, err := repo.GC(context.Background(), 2, false); err != nil || len(removed) != 2 {
		t.Fatalf("gc: %v %v", removed, err)
	}
	reg.GarbageCollect(t)
	dir := t.TempDir()
	var skels []string
	for i, g := range f.Gens {
		skels = append(skels, verifytest.WriteFile(t, filepath.Join(dir, fmt.Sprintf("g%d.wtxt.skel", i+1)), g.Skeleton))
	}
	return reg, f, repo, skels
}

// TestReviewCollected: a review whose base or head generation retention
// collected says, per array, that the rows cannot be compared, keeps the
// checks the skeletons and the surviving bytes allow (the head's
// signature, Merkle value and chain; the head's full verification when it
// is present; the metadata table), and is a COMMENT saying why — never
// "blob not found", a request for changes or an approval.
func TestReviewCollected(t *testing.T) {
	reg, f, repo, skels := collectedFixture(t)
	ctx := context.Background()
	opts := Options{TrustedKeys: []ed25519.PublicKey{f.Key.Pub}, Registry: repo, Approve: true, HeadSHA: "abc"}
	for _, tc := range []struct {
		name             string
		base, head       int // generation numbers
		collected        []string
		chain            string
		headFull         bool // the head was verified in full (it is present)
		baseMeta, headMt bool
	}{
		{"base collected", 1, 3, []string{"000001"}, "unchecked", true, true, true},
		{"both collected", 1, 2, []string{"000001", "000002"}, "continues", false, true, false},
		{"head collected", 3, 2, []string{"000002"}, "unchecked", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := FileInput{Path: "snapshots/current.wtxt.skel", Base: skels[tc.base-1], Head: skels[tc.head-1]}
			patch, err := LocalPatch(ctx, "", in.Base, in.Head)
			if err != nil {
				t.Fatal(err)
			}
			in.HasPatch, in.Parsed = true, patch
			rv, err := Build(ctx, []FileInput{in}, opts)
			if err != nil {
				t.Fatal(err)
			}
			fr := rv.Files[0]
			t.Logf("event %s\nproblems %q\nnotes %q\n%s", rv.Event, fr.Problems, fr.Notes, rv.Body)
			if rv.Event != EventComment || len(fr.Problems) != 0 {
				t.Fatalf("event %s, problems %q", rv.Event, fr.Problems)
			}
			if strings.Contains(rv.Body, "blob not found") || strings.Contains(rv.Body, "does not assemble") {
				t.Fatalf("the body reports the collection as a failure:\n%s", rv.Body)
			}
			if !strings.Contains(rv.Body, "was collected by retention") || !strings.Contains(rv.Body, "A comment, neither an approval nor a request for changes") ||
				strings.Join(fr.Collected, ",") != strings.Join(tc.collected, ",") {
				t.Fatalf("collected %v, want %v; the body:\n%s", fr.Collected, tc.collected, rv.Body)
			}
			for _, g := range tc.collected {
				if !strings.Contains(rv.Body, "generation "+g+" (") {
					t.Fatalf("the body does not say generation %s was collected:\n%s", g, rv.Body)
				}
			}
			if fr.Report == nil || fr.Report.Signature != "verified" || fr.Report.Chain != tc.chain {
				t.Fatalf("report %+v", fr.Report)
			}
			if got := fr.Report.Arrays != nil; got != tc.headFull {
				t.Fatalf("head verified in full: %v, want %v", got, tc.headFull)
			}
			if (fr.BaseMeta != nil) != tc.baseMeta || (fr.HeadMeta != nil) != tc.headMt {
				t.Fatalf("metadata base %v head %v", fr.BaseMeta, fr.HeadMeta)
			}
			// The metadata table when both are known: generation 1's
			// document survived as generation 4's.
			if table := strings.Contains(rv.Body, "| metadata | old | new |"); table != (tc.baseMeta && tc.headMt) ||
				table && !strings.Contains(rv.Body, "| **`step`** | `400` | `300` |") {
				t.Fatalf("metadata table %v:\n%s", table, rv.Body)
			}
			// Per array: the body lists every changed array as not
			// compared, and every changed chunk says why.
			if len(fr.Chunks) == 0 || !strings.Contains(rv.Body, "- Rows not compared (the content of generation "+strings.Join(tc.collected, ", ")+" was collected) in ") {
				t.Fatalf("no per-array list of what was not compared:\n%s", rv.Body)
			}
			for _, c := range fr.Chunks {
				if !strings.Contains(rv.Body, "\n  - `"+c.Array+"`: ") {
					t.Fatalf("the body does not list array %s:\n%s", c.Array, rv.Body)
				}
				if c.Chunk >= 0 && (c.Stats != nil || !strings.Contains(c.NoStats, "was collected by retention, so the rows cannot be compared")) {
					t.Fatalf("chunk %s/%d: stats %v, %q", c.Array, c.Chunk, c.Stats, c.NoStats)
				}
			}
		})
	}

	// Damage, not retention: one of generation 4's own blobs deleted.
	kept := map[[32]byte]bool{}
	for _, s := range f.Gens[2].Push.Generation.Segments {
		kept[s.Digest] = true
	}
	for _, s := range f.Gens[3].Push.Generation.Segments {
		if s.Size > 0 && !kept[s.Digest] {
			reg.DeleteBlob(t, "snapd/model", s.DigestString())
			break
		}
	}
	rv, err := Build(ctx, []FileInput{{Path: "snapshots/current.wtxt.skel", Base: skels[2], Head: skels[3]}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fr := rv.Files[0]; rv.Event != EventRequestChanges || len(fr.Collected) != 0 || !strings.Contains(strings.Join(fr.Problems, "\n"), "head skeleton does not assemble from the registry") {
		t.Fatalf("a missing blob under a present manifest: event %s, collected %v, problems %q", rv.Event, fr.Collected, fr.Problems)
	}
}
