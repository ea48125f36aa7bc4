package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestOCIPushEditedPrevSkeleton: a --prev-skeleton whose seg line names
// another blob of the registry with the same size (one sha256= edited)
// does not make `oci push` publish a generation that does not assemble:
// the registry's previous manifest does not confirm that segment, so it
// is read and checked ("unproven" 1), and the gen-000002 manifest is the
// one a push without --prev-skeleton publishes; it assembles byte for
// byte.
func TestOCIPushEditedPrevSkeleton(t *testing.T) {
	d := t.TempDir()
	g1, g2 := prevGens(t)
	want, err := os.ReadFile(g2)
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, "", "")
	push := func(repo, in, skel string, extra ...string) map[string]any {
		t.Helper()
		args := append([]string{"oci", "push", in, "--oci-repository", reg.Host + "/" + repo, "--segment-size", "262144", "--skeleton", skel, "--json"}, extra...)
		code, out, errs := snapd(t, nil, args...)
		if code != 0 {
			t.Fatalf("oci push %v: exit %d\n%s%s", extra, code, out, errs)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	s1 := filepath.Join(d, "g1.skel")
	push("snapd/edited", g1, s1)
	full := push("snapd/reference", g2, filepath.Join(d, "ref.skel"))

	// Segments: b's, then w's 16 (the change is in w's 4th). w's 2nd seg
	// line gets w's 3rd's sha256: a blob the registry has, same size.
	skel1, _ := os.ReadFile(s1)
	lines := bytes.SplitAfter(skel1, []byte("\n"))
	var segs []int
	for i, l := range lines {
		if bytes.HasPrefix(l, []byte("seg ")) {
			segs = append(segs, i)
		}
	}
	if len(segs) != 17 {
		t.Fatalf("%d seg lines, want 17", len(segs))
	}
	sum := func(l []byte) []byte { return l[bytes.Index(l, []byte("sha256=")):] }
	a, b := lines[segs[2]], lines[segs[3]]
	if bytes.Equal(sum(a), sum(b)) || len(a) != len(b) {
		t.Fatal("test data: w's 2nd and 3rd segments should differ, with one size")
	}
	lines[segs[2]] = append(bytes.Clone(a[:bytes.Index(a, []byte("sha256="))]), sum(b)...)
	edited := filepath.Join(d, "edited.skel")
	os.WriteFile(edited, bytes.Join(lines, nil), 0o644)

	s2 := filepath.Join(d, "g2.skel")
	r2 := push("snapd/edited", g2, s2, "--prev-skeleton", edited)
	num := func(k string) float64 { f, _ := r2[k].(float64); return f }
	if num("unproven") != 1 || num("reused") != 15 || r2["manifest"] != full["manifest"] {
		t.Fatalf("push with an edited --prev-skeleton: %v (a push without it: %v)", r2, full)
	}
	asm := filepath.Join(d, "asm.wtxt")
	mustRun(t, "assemble", "--oci-repository", reg.Host+"/snapd/edited", s2, asm)
	if got, _ := os.ReadFile(asm); !bytes.Equal(got, want) {
		t.Fatal("assembled WTXT differs")
	}
}
