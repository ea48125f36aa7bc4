package verify

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
	"github.com/snapd-ml/snapd/snapshot"
)

// replaceTrailer returns a reword function that replaces old by new in
// the message, failing the test when old is not there.
func replaceTrailer(t *testing.T, old, new string) func(string) string {
	return func(msg string) string {
		if !strings.Contains(msg, old) {
			t.Fatalf("the message lacks %q:\n%s", old, msg)
		}
		return strings.Replace(msg, old, new, 1)
	}
}

// wantMetaFailure asserts the report's only failure is generation gen's
// CheckTrailer naming keys, and quoting none of the values.
func wantMetaFailure(t *testing.T, rep *Report, gen, keys string, values ...string) {
	t.Helper()
	fs := wantOnly(t, rep, CheckTrailer)
	if fs[0].Gen != gen || !strings.Contains(fs[0].Message, "trailer "+gitops.TrailerMeta+" disagrees with ") || !strings.HasSuffix(fs[0].Message, "(keys "+keys+")") {
		t.Fatalf("want gen %s's %s failure naming keys %s: %v", gen, gitops.TrailerMeta, keys, fs[0])
	}
	for _, v := range values {
		if strings.Contains(fs[0].Message, v) {
			t.Fatalf("the failure quotes the value %q: %v", v, fs[0])
		}
	}
}

// TestVerifyMetaTrailer: the Snapd-Meta trailer of a plaintext generation,
// stored as one file or in the segments layout, is checked against the
// metadata inside the verified WTXT: a trailer rewritten (commit and tag
// re-signed by the trusted key) or removed fails naming the keys only.
func TestVerifyMetaTrailer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout gitops.Layout
	}{{"single", gitops.LayoutSingle}, {"segments", gitops.LayoutSegments}} {
		t.Run(tc.name, func(t *testing.T) {
			f := verifytest.Build(t, verifytest.Options{Layout: tc.layout, SegmentSize: 4096, Gens: []uint64{1, 2, 3}, Meta: verifytest.StepMeta})
			rep := run(t, f.Dir, Options{}, f.Key.Pub)
			if !rep.OK || rep.Generations[2].Layout != string(tc.layout) {
				t.Fatalf("report not OK:\n%s", dump(rep))
			}
			if got := verifytest.Git(t, f.Dir, "log", "-1", "--format=%(trailers:key="+gitops.TrailerMeta+",valueonly)", "snapshots"); !strings.Contains(got, "step=300") {
				t.Fatalf("the head commit's trailer: %q", got)
			}
			work := f.Copy(t)
			verifytest.RewordHead(t, work, f.Gens[2].Tag, replaceTrailer(t, "step=300", "step=301"), f.Key.PrivFile)
			wantMetaFailure(t, run(t, work, Options{}, f.Key.Pub), "000003", "step", "300", "301")

			verifytest.RewordHead(t, work, f.Gens[2].Tag, func(msg string) string {
				var kept []string
				for _, l := range strings.SplitAfter(msg, "\n") {
					if !strings.HasPrefix(l, gitops.TrailerMeta+": ") {
						kept = append(kept, l)
					}
				}
				return strings.Join(kept, "")
			}, f.Key.PrivFile)
			wantMetaFailure(t, run(t, work, Options{}, f.Key.Pub), "000003", "loss, opt, step", "adamw")
		})
	}
}

// TestVerifySkeletonMetaTrailer: a skeleton-layout generation's trailer
// is checked against the metadata read through its skeleton from the
// registry, fully verified or sampled; a rewritten trailer fails.
func TestVerifySkeletonMetaTrailer(t *testing.T) {
	reg := registrytest.Start(t, "", "")
	repo := openVia(t, reg.Host)
	f := verifytest.BuildSkeleton(t, repo, nil, skelSegSize)
	f.Meta = verifytest.StepMeta
	f.Extend(t, 1, 2, 3)
	for _, sample := range []float64{0, 0.3} {
		if rep := run(t, f.Dir, Options{Registry: repo, Sample: sample, Seed: 1}, f.Key.Pub); !rep.OK {
			t.Fatalf("sample %v: report not OK:\n%s", sample, dump(rep))
		}
	}
	verifytest.RewordHead(t, f.Dir, f.Gens[2].Tag, replaceTrailer(t, "step=300", "step=301"), f.Key.PrivFile)
	for _, sample := range []float64{0, 0.3} {
		rep := run(t, f.Dir, Options{Registry: repo, Sample: sample, Seed: 1}, f.Key.Pub)
		wantMetaFailure(t, rep, "000003", "step", "300", "301")
		if g := rep.Generations[2]; g.Content != ContentPresent || g.Signature != "verified" {
			t.Fatalf("sample %v: %+v", sample, g)
		}
	}
}

// TestVerifyCollectedMetaTrailer: after retention, a collected
// generation's trailer is checked where what survives proves the
// metadata — a skeleton without an attributes document proves there is
// none, and a document blob another generation shares is still in the
// registry — and is noted as not checked where the document's blob was
// collected; never a failure for that alone.
func TestVerifyCollectedMetaTrailer(t *testing.T) {
	same := func(uint64) snapshot.UserMeta { return verifytest.StepMeta(7) }
	for _, tc := range []struct {
		name   string
		meta   func(uint64) snapshot.UserMeta
		reword func(*testing.T) func(string) string
		keys   string // "": the trailer is not checked
	}{
		{"document collected", verifytest.StepMeta, func(t *testing.T) func(string) string { return replaceTrailer(t, "step=100", "step=101") }, ""},
		{"document shared", same, func(t *testing.T) func(string) string { return replaceTrailer(t, "step=700", "step=701") }, "step"},
		{"no document", nil, func(*testing.T) func(string) string {
			return func(msg string) string { return msg + gitops.TrailerMeta + ": step=100\n" }
		}, "step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.Start(t, "", "")
			repo := openVia(t, reg.Host)
			f := verifytest.BuildSkeleton(t, repo, nil, skelSegSize)
			f.Meta = tc.meta
			f.Extend(t, 1)
			verifytest.RewordHead(t, f.Dir, f.Gens[0].Tag, tc.reword(t), f.Key.PrivFile)
			f.Extend(t, 2, 3)
			if _, err := repo.GC(context.Background(), 1, false); err != nil {
				t.Fatal(err)
			}
			reg.GarbageCollect(t)
			for _, sample := range []float64{0, 0.5} {
				rep := run(t, f.Dir, Options{Registry: repo, Sample: sample, Seed: 2}, f.Key.Pub)
				if rep.ContentCollected != 2 || rep.Generations[0].Content != ContentCollected {
					t.Fatalf("sample %v: want generations 1 and 2 collected:\n%s", sample, dump(rep))
				}
				if tc.keys != "" {
					wantMetaFailure(t, rep, "000001", tc.keys, "100", "101", "700", "701")
					continue
				}
				if !rep.OK {
					t.Fatalf("sample %v: want OK:\n%s", sample, dump(rep))
				}
				for _, g := range rep.Generations[:2] {
					noted := false
					for _, n := range g.Notes {
						noted = noted || strings.HasPrefix(n, "metadata not checked (content collected)")
					}
					if !noted {
						t.Fatalf("sample %v: gen %s: no note that the metadata was not checked:\n%s", sample, g.Gen, dump(rep))
					}
				}
			}
			// The premise: generation 1's document blob was freed, or
			// survives as generation 3's.
			for _, sg := range f.Gens[0].Push.Generation.Segments {
				if sg.Array != snapshot.AttrsArrayName {
					continue
				}
				_, err := os.Stat(registrytest.BlobPath(reg, sg.Digest))
				if kept := tc.name == "document shared"; kept != (err == nil) {
					t.Fatalf("the document's blob kept: %v, want %v", err == nil, kept)
				}
			}
		})
	}
}
