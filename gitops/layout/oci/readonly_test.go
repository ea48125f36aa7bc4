package oci

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestPullOnlyToken: with a token that grants only "pull" (Docker token
// auth, credentials from a Docker config.json as CI would have them),
// everything verification needs works — the manifest check, a sampled
// and a full read of every blob — and a push with the same credentials
// is refused by the registry.
func TestPullOnlyToken(t *testing.T) {
	const writer, wpass, reader, rpass = "ci-writer", "writer-pass-1", "ci-reader", "reader-pass-2"
	wts, bundle := newTokenServer(t, writer, wpass, "snapd-registry", "snapd-test-issuer")
	reg := registrytest.StartToken(t, wts.srv.URL+"/token", "snapd-registry", "snapd-test-issuer", bundle)
	ctx := context.Background()
	w, err := Open(reg.Host+"/snapd/ro", Options{Username: writer, Password: wpass})
	if err != nil {
		t.Fatal(err)
	}
	g1 := genWTXT(t, 1, 0, 0)
	_, skel := pushBytes(t, w, g1, 256<<10)

	// The reader's token server: same signing key, pull only.
	wts.user, wts.pass, wts.pullOnly = reader, rpass, true
	cfg := filepath.Join(t.TempDir(), "config.json")
	dc, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(reader + ":" + rpass))}}})
	if err := os.WriteFile(cfg, dc, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(reg.Host+"/snapd/ro", Options{DockerConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CheckGeneration(ctx, skel, "g1.skel", ""); err != nil {
		t.Fatalf("check with a pull-only token: %v", err)
	}
	segs, info, err := wtxt.CheckSkeletonSample(ctx, bytes.NewReader(skel), "g1.skel", r, func(i int, _ wtxt.Segment) bool { return i%3 == 0 })
	if err != nil || info.Bytes == 0 || len(segs) < 3 {
		t.Fatalf("sampled read with a pull-only token: %v", err)
	}
	got, err := assembleFrom(t, r, skel)
	if err != nil || !bytes.Equal(got, g1) {
		t.Fatalf("full read with a pull-only token: %v", err)
	}
	issued := wts.issued.Load()
	if _, err := r.PushWTXT(ctx, bytes.NewReader(genWTXT(t, 2, 0, 50)), "g2.wtxt", &bytes.Buffer{}, 256<<10); err == nil {
		t.Fatal("a push with a pull-only token succeeded")
	}
	if wts.issued.Load() == issued {
		t.Fatal("the push never asked for a token")
	}
	if gens, err := r.Generations(ctx); err != nil || len(gens) != 1 {
		t.Fatalf("generations after the refused push: %v %v", gens, err)
	}
}
