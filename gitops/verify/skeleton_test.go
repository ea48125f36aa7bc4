package verify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// skelSegSize cuts verifytest.Snapshot into about a dozen segments.
const skelSegSize = 8 << 10

func skeletonFixture(t *testing.T) (*registrytest.Registry, *verifytest.SkeletonFixture) {
	t.Helper()
	reg := registrytest.Start(t, "", "")
	repo, err := oci.Open(reg.Host+"/snapd/model", oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return reg, verifytest.BuildSkeleton(t, repo, []uint64{1, 2, 3, 4}, skelSegSize)
}

// openVia opens the fixture's OCI repository through host (the registry
// or a proxy), anonymously.
func openVia(t *testing.T, host string) *oci.Repository {
	t.Helper()
	r, err := oci.Open(host+"/snapd/model", oci.Options{DockerConfig: filepath.Join(t.TempDir(), "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSkeletonLayoutFull(t *testing.T) {
	reg, f := skeletonFixture(t)
	if f.Gens[0].Push.Segments < 8 {
		t.Fatalf("fixture has %d segments per generation, want several", f.Gens[0].Push.Segments)
	}
	proxy := registrytest.StartProxy(t, reg.Host)
	rep := run(t, f.Dir, Options{Registry: openVia(t, proxy.Host)}, f.Key.Pub)
	if !rep.OK || len(rep.Generations) != 4 {
		t.Fatalf("report not OK:\n%s", dump(rep))
	}
	for i, g := range rep.Generations {
		sg := f.Gens[i]
		nonEmpty := 0
		for _, s := range sg.Push.Generation.Segments {
			if s.Size > 0 {
				nonEmpty++
			}
		}
		if g.Layout != string(layout.Skeleton) || g.Verification != VerifyFull || g.Segments != sg.Push.Segments || g.SegmentsRead != g.Segments ||
			g.WTXTBytes != int64(len(sg.WTXT)) || g.Signature != wtxt.SigVerified || g.CommitSignature != SigVerified || g.TagSignature != SigVerified {
			t.Fatalf("gen %d: %+v", i+1, g)
		}
		if i > 0 && g.Chain != ChainContinues || i == 0 && g.Chain != ChainFirst {
			t.Fatalf("gen %d chain %s", i+1, g.Chain)
		}
	}
	// Read only: the verifier sent no PUT, POST, PATCH or DELETE.
	for m := range proxy.Methods() {
		if m != "GET" && m != "HEAD" {
			t.Fatalf("verify sent %s requests: %v", m, proxy.Methods())
		}
	}
	// The full WTXT never touches the disk: while blobs are being read, the
	// verifier's temp dir holds only the skeleton's working copy.
	spy := &tempSpy{Repository: openVia(t, reg.Host), dir: t.TempDir()}
	r, err := git.PlainOpen(f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(context.Background(), r, Options{Registry: spy, TempDir: spy.dir, TrustedKeys: []ed25519.PublicKey{f.Key.Pub}})
	if err != nil || !rep.OK || spy.opens == 0 {
		t.Fatalf("%v, %d blobs opened:\n%s", err, spy.opens, dump(rep))
	}
	if wtxtLen := int64(len(f.Gens[3].WTXT)); spy.max <= 0 || spy.max > int64(len(f.Gens[3].Skeleton))+4096 || spy.max*4 > wtxtLen {
		t.Fatalf("temp dir held up to %d bytes while verifying (skeleton %d, WTXT %d)", spy.max, len(f.Gens[3].Skeleton), wtxtLen)
	}
}

// tempSpy records, each time a blob is opened, how many bytes the files
// under dir hold.
type tempSpy struct {
	*oci.Repository
	dir   string
	max   int64
	opens int
}

func (s *tempSpy) OpenBlob(ctx context.Context, seg wtxt.Segment) (io.ReadCloser, error) {
	s.opens++
	var n int64
	filepath.WalkDir(s.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	s.max = max(s.max, n)
	return s.Repository.OpenBlob(ctx, seg)
}

func TestSkeletonLayoutSample(t *testing.T) {
	reg, f := skeletonFixture(t)
	repo := openVia(t, reg.Host)
	rep := run(t, f.Dir, Options{Registry: repo, Sample: 0.25, Seed: 7}, f.Key.Pub)
	if !rep.OK {
		t.Fatalf("report not OK:\n%s", dump(rep))
	}
	again := run(t, f.Dir, Options{Registry: repo, Sample: 0.25, Seed: 7}, f.Key.Pub)
	other := run(t, f.Dir, Options{Registry: repo, Sample: 0.25, Seed: 8}, f.Key.Pub)
	differ := false
	for i, g := range rep.Generations {
		want := int(math.Ceil(0.25 * float64(g.Segments)))
		if g.Verification != VerifySample || len(g.SampledSegments) != want || g.SegmentsRead != want || g.Signature != wtxt.SigVerified {
			t.Fatalf("gen %d: %+v", i+1, g)
		}
		if !slices.Equal(g.SampledSegments, again.Generations[i].SampledSegments) {
			t.Fatalf("gen %d: seed 7 picked %v, then %v", i+1, g.SampledSegments, again.Generations[i].SampledSegments)
		}
		differ = differ || !slices.Equal(g.SampledSegments, other.Generations[i].SampledSegments)
	}
	if !differ {
		t.Fatal("seeds 7 and 8 picked the same segments in every generation")
	}
	// A damaged blob outside the sample passes; inside it, fails located.
	g3 := rep.Generations[2]
	segs := f.Gens[2].Push.Generation.Segments
	in, out := segs[g3.SampledSegments[0]], wtxt.Segment{}
	for i, s := range segs {
		if !slices.Contains(g3.SampledSegments, i) && s.Size > 0 && s.Digest != in.Digest {
			out = s
			break
		}
	}
	proxy := registrytest.StartProxy(t, reg.Host)
	proxy.Damage(out.DigestString(), registrytest.FlipByte)
	if r := run(t, f.Dir, Options{Registry: openVia(t, proxy.Host), Sample: 0.25, Seed: 7}, f.Key.Pub); !r.OK {
		t.Fatalf("a damaged blob outside the sample failed the sample:\n%s", dump(r))
	}
	proxy.Damage(in.DigestString(), registrytest.FlipByte)
	r := run(t, f.Dir, Options{Registry: openVia(t, proxy.Host), Sample: 0.25, Seed: 7}, f.Key.Pub)
	fs := wantOnly(t, r, "wtxt/"+string(wtxt.CheckChunkSHA))
	if fs[0].Gen != "000003" || fs[0].Line == 0 || !strings.Contains(fs[0].Message, in.DigestString()) || !strings.Contains(fs[0].Message, "array "+in.Array) {
		t.Fatalf("not located: %v", fs[0])
	}
}

// TestSkeletonLayoutBadRegistry: a registry answering wrong bytes, a
// truncated blob, a missing blob; a skeleton whose seg line disagrees with
// its ch lines; no registry at all. Each is a located failure of the
// generation concerned, and the others still pass.
func TestSkeletonLayoutBadRegistry(t *testing.T) {
	reg, f := skeletonFixture(t)
	seg := f.Gens[1].Push.Generation.Segments[3]
	for _, tc := range []struct {
		name   string
		damage registrytest.Damage
		checks []string
	}{
		{"flipped byte", registrytest.FlipByte, []string{"wtxt/" + string(wtxt.CheckChunkSHA)}},
		{"truncated", registrytest.Truncate, []string{"wtxt/" + string(wtxt.CheckBlob)}},
		{"missing", registrytest.Missing, []string{"wtxt/" + string(wtxt.CheckBlob)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := registrytest.StartProxy(t, reg.Host)
			proxy.Damage(seg.DigestString(), tc.damage)
			rep := run(t, f.Dir, Options{Registry: openVia(t, proxy.Host)}, f.Key.Pub)
			// Every generation holding the segment fails; name the first.
			var first *Failure
			for _, g := range rep.Generations {
				for i := range g.Failures {
					if first == nil {
						first = &g.Failures[i]
					}
				}
			}
			if rep.OK || first == nil || proxy.Damaged() == 0 || !slices.Contains(tc.checks, first.Check) {
				t.Fatalf("want %v:\n%s", tc.checks, dump(rep))
			}
			if first.File != "snapshots/"+layout.FileSkeleton || first.Line == 0 || !strings.Contains(first.Message, seg.DigestString()) ||
				!strings.Contains(first.Message, "array "+seg.Array) || !strings.Contains(first.Message, "chunk ") {
				t.Fatalf("not located: %v", *first)
			}
		})
	}

	t.Run("missing blob in the registry", func(t *testing.T) {
		// Remove a blob only generation 4 uses from the registry's storage:
		// the manifest check names it, so does the assembly.
		used := map[[32]byte]bool{}
		for _, g := range f.Gens[:3] {
			for _, s := range g.Push.Generation.Segments {
				used[s.Digest] = true
			}
		}
		var only wtxt.Segment
		for _, s := range f.Gens[3].Push.Generation.Segments {
			if !used[s.Digest] && s.Size > 0 {
				only = s
			}
		}
		if only.Size == 0 {
			t.Fatal("fixture: generation 4 has no segment of its own")
		}
		p := registrytest.BlobPath(reg, only.Digest)
		saved, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(p)
		defer os.WriteFile(p, saved, 0o644)
		rep := run(t, f.Dir, Options{Registry: openVia(t, reg.Host)}, f.Key.Pub)
		fs := wantOnly(t, rep, CheckRegistry, "wtxt/"+string(wtxt.CheckBlob))
		for _, fl := range fs {
			if fl.Gen != "000004" || !strings.Contains(fl.Message, only.DigestString()) {
				t.Fatalf("not located: %v", fl)
			}
		}
		if !strings.Contains(fs[0].Message, "gen-000004") {
			t.Fatalf("registry failure does not name the manifest: %v", fs[0])
		}
	})

	t.Run("seg line disagrees with ch lines", func(t *testing.T) {
		g := f.Gens[3]
		bad := bytes.Replace(g.Skeleton, []byte("seg chunks=4 "), []byte("seg chunks=3 "), 1)
		if bytes.Equal(bad, g.Skeleton) {
			t.Fatalf("fixture: no seg chunks=4 line:\n%.2000s", g.Skeleton)
		}
		f.CommitSkeleton(t, 5, bad, g.WTXT, g.Result) // gen 5's commit carries a broken copy of gen 4's skeleton
		defer func() {
			verifytest.Git(t, f.Dir, "reset", "-q", "--hard", "HEAD~1")
			verifytest.Git(t, f.Dir, "tag", "-d", "gen-000005")
		}()
		rep := run(t, f.Dir, Options{Registry: openVia(t, reg.Host)}, f.Key.Pub)
		var got []Failure
		for _, fl := range rep.Generations[4].Failures {
			if strings.HasPrefix(fl.Check, "wtxt/") || fl.Check == CheckRegistry {
				got = append(got, fl)
			}
		}
		if len(got) != 1 || got[0].Check != "wtxt/"+string(wtxt.CheckSkeleton) || got[0].Line == 0 || !strings.Contains(got[0].Message, "declares") {
			t.Fatalf("want one located skeleton failure:\n%s", dump(rep))
		}
		t.Logf("%v", got[0])
	})

	t.Run("no registry", func(t *testing.T) {
		rep := run(t, f.Dir, Options{}, f.Key.Pub)
		if rep.OK || len(rep.Generations) != 4 {
			t.Fatalf("%s", dump(rep))
		}
		for _, g := range rep.Generations {
			if len(g.Failures) != 1 || g.Failures[0].Check != CheckRegistry || g.Signature != wtxt.SigVerified || g.Chain == ChainBroken {
				t.Fatalf("gen %s: %+v", g.Gen, g)
			}
		}
	})
}

func TestSampleSegments(t *testing.T) {
	segs := make([]wtxt.Segment, 100)
	for i := range segs {
		segs[i].Size = int64(i % 10) // every tenth is empty
	}
	a := SampleSegments(segs, 0.1, 1, 3)
	if len(a) != 9 || !slices.IsSorted(a) {
		t.Fatalf("%v", a)
	}
	for _, i := range a {
		if segs[i].Size == 0 {
			t.Fatalf("picked the empty segment %d", i)
		}
	}
	if b := SampleSegments(segs, 0.1, 1, 3); !slices.Equal(a, b) {
		t.Fatal("not reproducible")
	}
	if all := SampleSegments(segs, 1, 0, 0); len(all) != 90 {
		t.Fatalf("fraction 1: %d", len(all))
	}
	if one := SampleSegments(segs, 1e-9, 0, 0); len(one) != 1 {
		t.Fatalf("tiny fraction: %v", one)
	}
	if none := SampleSegments(segs[:1], 0.5, 0, 0); len(none) != 0 {
		t.Fatalf("only an empty segment: %v", none)
	}
}
