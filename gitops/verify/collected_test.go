package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// answering is a Registry whose CheckGeneration answers err for the
// generations in gens and asks the real one for the others.
type answering struct {
	*oci.Repository
	gens map[string]error
}

func (a answering) CheckGeneration(ctx context.Context, skel []byte, name, tag string) (oci.Generation, error) {
	h, err := wtxt.ReadHeader(bytes.NewReader(bytes.TrimPrefix(skel, []byte(wtxt.SkeletonMagic+"\n"))))
	if err == nil {
		if e, ok := a.gens[h.Gen]; ok {
			return oci.Generation{}, e
		}
	}
	return a.Repository.CheckGeneration(ctx, skel, name, tag)
}

// TestVerifyAfterRetention: oci GC keeps the newest generation, the
// registry's garbage-collect frees the others' blobs; the collected
// generations pass on their skeletons (full and sampled), --require-content
// fails them, and what retention cannot explain fails.
func TestVerifyAfterRetention(t *testing.T) {
	reg, f := skeletonFixture(t) // generations 1..4
	repo := openVia(t, reg.Host)
	removed, err := repo.GC(context.Background(), 1, false)
	if err != nil || len(removed) != 3 {
		t.Fatalf("gc: %v %v", removed, err)
	}
	reg.GarbageCollect(t)
	// A segment only generation 1 had is gone from the storage.
	kept := map[[32]byte]bool{}
	for _, s := range f.Gens[3].Push.Generation.Segments {
		kept[s.Digest] = true
	}
	gone := 0
	for _, s := range f.Gens[0].Push.Generation.Segments {
		if _, err := os.Stat(registrytest.BlobPath(reg, s.Digest)); s.Size > 0 && !kept[s.Digest] && os.IsNotExist(err) {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("the registry's garbage collection freed none of generation 1's own blobs")
	}

	for _, sample := range []float64{0, 0.5} {
		rep := run(t, f.Dir, Options{Registry: repo, Sample: sample, Seed: 3}, f.Key.Pub)
		if !rep.OK || rep.ContentCollected != 3 || rep.ContentPresent != 1 {
			t.Fatalf("sample %v: want OK with 3 collected:\n%s", sample, dump(rep))
		}
		for i, g := range rep.Generations {
			collected := i < 3
			if collected && (g.Content != ContentCollected || g.Verification != VerifySkeleton || g.Segments != f.Gens[i].Push.Segments || g.SegmentsRead != 0 ||
				g.Signature != wtxt.SigVerified || g.CommitSignature != SigVerified || g.TagSignature != SigVerified) ||
				!collected && g.Content != ContentPresent {
				t.Fatalf("sample %v: gen %d: %+v", sample, i+1, g)
			}
			if i > 0 && g.Chain != ChainContinues {
				t.Fatalf("gen %d chain %s", i+1, g.Chain)
			}
		}
	}

	// --require-content: the collected ones fail, naming the manifest.
	rep := run(t, f.Dir, Options{Registry: repo, RequireContent: true}, f.Key.Pub)
	fs := wantOnly(t, rep, CheckRegistry, CheckRegistry, CheckRegistry)
	for i, fl := range fs {
		if fl.Gen != wtxt.FormatGen(uint64(i+1)) || fl.File != "snapshots/current.wtxt.skel" || !strings.Contains(fl.Message, "manifest gen-"+wtxt.FormatGen(uint64(i+1))) ||
			!strings.Contains(fl.Message, "--require-content") {
			t.Fatalf("failure %d: %v", i, fl)
		}
	}

	// The newest generation's manifest gone too: nothing later has
	// content, so it is not retention; every 404 fails.
	notFound := fmt.Errorf("oci x: manifest gen-000004: %w", oci.ErrManifestNotFound)
	rep = run(t, f.Dir, Options{Registry: answering{repo, map[string]error{"000004": notFound}}}, f.Key.Pub)
	wantOnly(t, rep, CheckRegistry, CheckRegistry, CheckRegistry, CheckRegistry)
	for _, g := range rep.Generations {
		if g.Content != ContentMissing || !strings.Contains(g.Failures[0].Message, "not retention") {
			t.Fatalf("gen %s: %+v", g.Gen, g)
		}
	}

	// Any other answer than 404 is a failure, never collected.
	rep = run(t, f.Dir, Options{Registry: answering{repo, map[string]error{"000002": errors.New("oci x: manifest gen-000002: 500 Internal Server Error")}}}, f.Key.Pub)
	fs = wantOnly(t, rep, CheckRegistry, "wtxt/"+string(wtxt.CheckBlob)) // then the assembly finds the blob gone
	if fs[0].Gen != "000002" || !strings.Contains(fs[0].Message, "500") || rep.Generations[1].Content != "" || rep.Generations[0].Content != ContentCollected {
		t.Fatalf("%s", dump(rep))
	}
}

// TestVerifyCollectedTampered: the skeleton of a collected generation is
// still checked — a malformed ch hash and a header whose signature does not
// verify fail although no tensor byte can be read.
func TestVerifyCollectedTampered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func([]byte) []byte
		check  string
	}{
		{"ch hash", func(b []byte) []byte {
			// Drop one hex digit of the first chunk's sha256: 63 digits.
			return regexp.MustCompile(`(?m)^(ch .*sha256=)[0-9a-f]`).ReplaceAllFunc(b, func(m []byte) []byte { return m[:len(m)-1] })
		}, "wtxt/" + string(wtxt.CheckGrammar)},
		{"signature", func(b []byte) []byte {
			i := bytes.Index(b, []byte("\nsign ed25519=")) + len("\nsign ed25519=")
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			return b
		}, "wtxt/" + string(wtxt.CheckSignature)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.Start(t, "", "")
			repo := openVia(t, reg.Host)
			f := verifytest.BuildSkeleton(t, repo, nil, skelSegSize)
			f.AddTampered(t, 1, tc.tamper)
			f.Extend(t, 2, 3)
			if _, err := repo.GC(context.Background(), 1, false); err != nil {
				t.Fatal(err)
			}
			reg.GarbageCollect(t)
			rep := run(t, f.Dir, Options{Registry: repo}, f.Key.Pub)
			if rep.OK || rep.Generations[0].OK() || !rep.Generations[1].OK() || !rep.Generations[2].OK() {
				t.Fatalf("want generation 1 alone to fail:\n%s", dump(rep))
			}
			found := false
			for _, fl := range rep.Generations[0].Failures {
				found = found || fl.Check == tc.check && fl.File == "snapshots/current.wtxt.skel"
			}
			if tc.check == "wtxt/"+string(wtxt.CheckSignature) && rep.Generations[0].Content != ContentCollected {
				t.Fatalf("the skeleton parses: generation 1 should be collected:\n%s", dump(rep))
			}
			if !found {
				t.Fatalf("no %s failure on the skeleton:\n%s", tc.check, dump(rep))
			}
		})
	}
}
