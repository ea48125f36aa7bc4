package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/gitops"
	"github.com/snapd-ml/snapd/gitops/verify/verifytest"
)

const segsDir = "snapshots/" + gitops.DirWTXTSegs

// segmentsFixture commits five generations in the segments layout with
// 4 KiB segments (embed: 16 segments, layer0.w: 6, bias: 1), a delta
// beside each (gitops.DeltaAlways), signed commits and tags.
func segmentsFixture(t *testing.T) *verifytest.Fixture {
	t.Helper()
	f := verifytest.Build(t, verifytest.Options{Layout: gitops.LayoutSegments, SegmentSize: 4096})
	names := lsTree(t, f.Dir, "snapshots", "snapshots")
	if slices.Contains(names, "snapshots/current.wtxt") || slices.Contains(names, "snapshots/current.wtxt.parts/MANIFEST") {
		t.Fatalf("not the segments layout: %v", names)
	}
	if n := len(segFiles(t, f.Dir)); n != 23 {
		t.Fatalf("%d segments, want 23", n)
	}
	return f
}

// lsTree lists the files under dir at rev (recursively).
func lsTree(t *testing.T, repo, rev, dir string) []string {
	t.Helper()
	return strings.Fields(verifytest.Git(t, repo, "ls-tree", "-r", "--name-only", rev, "--", dir))
}

// segFiles lists the segment blobs of the branch head.
func segFiles(t *testing.T, repo string) []string {
	t.Helper()
	var out []string
	for _, p := range lsTree(t, repo, "snapshots", segsDir) {
		if strings.HasSuffix(p, ".seg") {
			out = append(out, p)
		}
	}
	return out
}

func TestSegmentsLayoutHistoryVerifies(t *testing.T) {
	f := segmentsFixture(t)
	rep := run(t, f.Dir, Options{}, f.Key.Pub)
	if !rep.OK || len(rep.Generations) != 5 {
		t.Fatalf("report not OK:\n%s", dump(rep))
	}
	for i, g := range rep.Generations {
		want := f.Gens[i]
		if g.Layout != string(gitops.LayoutSegments) || g.Gen != want.Header.Root.Gen || g.WTXTBytes != int64(len(want.WTXT)) ||
			g.Signature != "verified" || g.CommitSignature != SigVerified || g.TagSignature != SigVerified || g.MerkleThis != hex.EncodeToString(want.Header.Root.MerkleThis[:]) {
			t.Fatalf("gen %d: %+v", i, g)
		}
		wantChain, wantDelta := ChainContinues, "applied" // the delta applies to the WTXT rebuilt from the previous segments
		if i == 0 {
			wantChain, wantDelta = ChainFirst, "none"
		}
		if g.Chain != wantChain || g.Delta != wantDelta {
			t.Fatalf("gen %d: chain %s delta %s\n%s", i, g.Chain, g.Delta, dump(rep))
		}
	}
	// generation.txt records the WTXT's size, not its SHA-256 (a second
	// pass over the whole file the rebuilt WTXT's own checks make moot).
	sum := string(verifytest.ReadBlob(t, f.Dir, "snapshots", "snapshots/"+gitops.FileSummary))
	if !strings.Contains(sum, "\nwtxt_bytes=") || strings.Contains(sum, "wtxt_sha256=") {
		t.Fatalf("generation.txt:\n%s", sum)
	}
	// An older generation.txt that records wtxt_sha256 (correctly) still
	// verifies: the rebuilt WTXT is hashed for it.
	head := f.Gens[4]
	repo := f.Copy(t)
	sum256 := sha256.Sum256(head.WTXT)
	verifytest.EditHead(t, repo, head.Tag, map[string][]byte{"snapshots/" + gitops.FileSummary: []byte(sum + "wtxt_sha256=" + hex.EncodeToString(sum256[:]) + "\n")}, f.Key.PrivFile)
	if rep := run(t, repo, Options{}, f.Key.Pub); !rep.OK {
		t.Fatalf("generation.txt with the right wtxt_sha256:\n%s", dump(rep))
	}
	// --sample does not apply to segments held in Git: verified in full, noted.
	rep = run(t, f.Dir, Options{Sample: 0.5, Seed: 1}, f.Key.Pub)
	if !rep.OK || !slices.ContainsFunc(rep.Generations[0].Notes, func(n string) bool { return strings.HasPrefix(n, "segments layout: verified in full") }) {
		t.Fatalf("%s", dump(rep))
	}
}

// TestSegmentsLayoutDamage commits damaged segments directories (signed by
// the trusted key, so only the content checks can catch them) and expects
// one located failure each.
func TestSegmentsLayoutDamage(t *testing.T) {
	f := segmentsFixture(t)
	head := f.Gens[4]
	segs := segFiles(t, f.Dir)
	manifest := verifytest.ReadBlob(t, f.Dir, "snapshots", segsDir+"/MANIFEST")
	var piece string // a piece holding ch lines of embed
	for _, p := range lsTree(t, f.Dir, "snapshots", segsDir) {
		if strings.HasPrefix(path.Base(p), "embed.") && strings.Contains(p, ".s000000.part") {
			piece = p
		}
	}
	if piece == "" {
		t.Fatal("no embed segment piece")
	}
	flip := func(b []byte, at int) []byte {
		b = bytes.Clone(b)
		b[at] ^= 0x01
		return b
	}
	for _, tc := range []struct {
		name  string
		edits func() map[string][]byte
		file  string // the failure's file
		line  int
		check string
		msg   string
	}{
		{"tampered segment", func() map[string][]byte {
			b := verifytest.ReadBlob(t, f.Dir, "snapshots", segs[3])
			return map[string][]byte{segs[3]: flip(b, len(b)/2)}
		}, segs[3], 0, CheckParts, "chunk-sha256"},
		{"missing segment", func() map[string][]byte { return map[string][]byte{segs[5]: nil} }, segs[5], 0, CheckParts, "missing"},
		{"short segment", func() map[string][]byte {
			b := verifytest.ReadBlob(t, f.Dir, "snapshots", segs[7])
			return map[string][]byte{segs[7]: b[:len(b)-1]}
		}, segs[7], 0, CheckParts, "the seg line says"},
		{"tampered piece", func() map[string][]byte {
			b := verifytest.ReadBlob(t, f.Dir, "snapshots", piece)
			i := bytes.Index(b, []byte("\nch ")) + 1 + len("ch ix=")
			return map[string][]byte{piece: flip(b, i)}
		}, piece, 0, CheckParts, "sha256"},
		{"MANIFEST naming a path outside the directory", func() map[string][]byte {
			name := strings.TrimPrefix(piece, segsDir+"/")
			return map[string][]byte{segsDir + "/MANIFEST": bytes.Replace(manifest, []byte(name), []byte("../"+name), 1)}
		}, segsDir + "/MANIFEST", 0, CheckLayout, "bad part name"},
		{"generation.txt with a wrong wtxt_sha256", func() map[string][]byte {
			sum := verifytest.ReadBlob(t, f.Dir, "snapshots", "snapshots/"+gitops.FileSummary)
			return map[string][]byte{"snapshots/" + gitops.FileSummary: append(sum, []byte("wtxt_sha256="+strings.Repeat("0", 64)+"\n")...)}
		}, "snapshots/" + gitops.FileSummary, 0, CheckSummary, "wtxt_sha256=0000"},
		{"MANIFEST missing", func() map[string][]byte { return map[string][]byte{segsDir + "/MANIFEST": nil} }, segsDir + "/MANIFEST", 0, CheckLayout, "missing"},
		{"both current.wtxt and current.wtxt.segs", func() map[string][]byte {
			return map[string][]byte{"snapshots/current.wtxt": head.WTXT}
		}, segsDir, 0, CheckLayout, "both current.wtxt and current.wtxt.segs/ present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := f.Copy(t)
			commit := verifytest.EditHead(t, repo, head.Tag, tc.edits(), f.Key.PrivFile)
			rep := run(t, repo, Options{}, f.Key.Pub)
			fs := wantOnly(t, rep, tc.check)
			got := fs[0]
			if got.Commit != commit || got.Gen != head.Header.Root.Gen || got.File != tc.file || got.Line != tc.line || !strings.Contains(got.Message, tc.msg) {
				t.Fatalf("failure %v, want %s:%d %s ...%s...\n%s", got, tc.file, tc.line, tc.check, tc.msg, dump(rep))
			}
			// The earlier generations are untouched and verified.
			for _, g := range rep.Generations[:4] {
				if !g.OK() {
					t.Fatalf("%s", dump(rep))
				}
			}
			t.Logf("%v", got)
		})
	}

	// A file the MANIFEST and the skeleton do not name: reported, the
	// WTXT (sound without it) still fully verified.
	repo := f.Copy(t)
	extra := segsDir + "/seg/00/stray.seg"
	verifytest.EditHead(t, repo, head.Tag, map[string][]byte{extra: []byte("x")}, f.Key.PrivFile)
	rep := run(t, repo, Options{}, f.Key.Pub)
	fs := wantOnly(t, rep, CheckLayout)
	if fs[0].File != extra || rep.Generations[4].Signature != "verified" || rep.Generations[4].Delta != "applied" {
		t.Fatalf("%s", dump(rep))
	}
}
