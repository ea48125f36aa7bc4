package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/gitops/layout/oci"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestOCIPushStreamed: `oci push` of a streamed WTXT without its WSUM is
// refused (exit 2, naming the WSUM it looked for) and publishes nothing;
// with its WSUM (--wsum, or beside it by name) the WTXT is verified and
// the manifest carries the WSUM's sha256_all and merkle_this; a WSUM of
// another generation is refused (exit 1). --stream and --encrypt-to,
// which oci push does not honour, are not among its flags.
func TestOCIPushStreamed(t *testing.T) {
	d := t.TempDir()
	m := prevModel(t, d, 1)
	in := filepath.Join(d, "s.wtxt")
	mustRun(t, "convert", m, in, "--gen", "1", "--stream", filepath.Join(d, "elsewhere.wsum"))
	other := filepath.Join(d, "other.wtxt")
	mustRun(t, "convert", prevModel(t, d, 2), other, "--gen", "1", "--stream", filepath.Join(d, "other.wsum"))
	reg := registrytest.Start(t, "", "")
	repoRef := reg.Host + "/snapd/streamed"
	repo, err := oci.Open(repoRef, oci.Options{DockerConfig: filepath.Join(d, "none.json")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	push := func(extra ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"oci", "push", in, "--oci-repository", repoRef, "--segment-size", "262144"}, extra...), &out, &errb)
		return code, errb.String()
	}

	// No WSUM beside it (s.wsum): refused, nothing published.
	code, errs := push()
	if code != 2 || !strings.Contains(errs, "streamed") || !strings.Contains(errs, filepath.Join(d, "s.wsum")) || !strings.Contains(errs, "--wsum") {
		t.Fatalf("push without the WSUM: exit %d\n%s", code, errs)
	}
	if tags, err := repo.Tags(ctx); err != nil || len(tags) != 0 {
		t.Fatalf("tags after the refused push: %v %v", tags, err)
	}
	// Another generation's WSUM: the WTXT does not verify with it.
	if code, errs := push("--wsum", filepath.Join(d, "other.wsum")); code != 1 || !strings.Contains(errs, "does not verify") {
		t.Fatalf("push with a foreign WSUM: exit %d\n%s", code, errs)
	}
	if tags, _ := repo.Tags(ctx); len(tags) != 0 {
		t.Fatalf("tags after the foreign WSUM: %v", tags)
	}
	// Its own WSUM, by flag and then by name beside it.
	wb, _ := os.ReadFile(filepath.Join(d, "elsewhere.wsum"))
	w, err := wtxt.ParseWSUM(wb)
	if err != nil {
		t.Fatal(err)
	}
	if code, errs := push("--wsum", filepath.Join(d, "elsewhere.wsum")); code != 0 {
		t.Fatalf("push with --wsum: exit %d\n%s", code, errs)
	}
	os.WriteFile(filepath.Join(d, "s.wsum"), wb, 0o644)
	if code, errs := push(); code != 0 {
		t.Fatalf("push with the WSUM beside it: exit %d\n%s", code, errs)
	}
	_, man, _, err := repo.FetchManifest(ctx, "gen-000001")
	if err != nil {
		t.Fatal(err)
	}
	if man.Annotations[oci.AnnSHA256All] != hex.EncodeToString(w.SHA256All[:]) || man.Annotations[oci.AnnMerkleThis] != hex.EncodeToString(w.MerkleThis[:]) {
		t.Fatalf("manifest annotations %v, want the WSUM's", man.Annotations)
	}
	asm := filepath.Join(d, "asm.wtxt")
	mustRun(t, "assemble", "--oci-repository", repoRef, in+".skel", asm)
	a, _ := os.ReadFile(asm)
	b, _ := os.ReadFile(in)
	if !bytes.Equal(a, b) {
		t.Fatal("assembled WTXT differs")
	}

	// --help lists only flags push honours; a checkpoint with --stream is
	// an unknown flag, not a silently ignored one.
	var out, errb bytes.Buffer
	run(ctx, []string{"oci", "push", "--help"}, &out, &errb)
	for _, f := range []string{"--stream", "--encrypt-to"} {
		if strings.Contains(out.String(), f+" ") {
			t.Errorf("oci push --help lists %s", f)
		}
	}
	if !strings.Contains(out.String(), "--wsum") {
		t.Error("oci push --help does not list --wsum")
	}
	errb.Reset()
	if code := run(ctx, []string{"oci", "push", m, "--oci-repository", repoRef, "--stream", filepath.Join(d, "x.wsum")}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown flag: --stream") {
		t.Fatalf("oci push CHECKPOINT --stream: exit %d\n%s", code, errb.String())
	}
}
