package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapd-ml/snapd/internal/registrytest"
)

// TestOCIPushAssemble: `snapd oci push` then `snapd assemble
// --oci-repository` reproduce the conformance vector byte for byte against
// a real registry with basic auth; the result verifies with the vector's
// key; a damaged skeleton fails with exit 1 and leaves no output.
func TestOCIPushAssemble(t *testing.T) {
	const user, pass = "ci", "pw-for-the-cli-test"
	reg := registrytest.Start(t, user, pass)
	env := map[string]string{"SNAPD_OCI_USERNAME": user, "SNAPD_OCI_PASSWORD": pass, "HOME": t.TempDir()}
	d := t.TempDir()
	in := filepath.Join(d, "g.wtxt")
	want, err := os.ReadFile(filepath.Join(vectors, "v2-ext-signed.wtxt"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, want, 0o644)
	repoRef := reg.Host + "/snapd/cli"

	code, out, errs := snapd(t, env, "oci", "push", in, "--oci-repository", repoRef, "--segment-size", "65536", "--json")
	if code != 0 {
		t.Fatalf("push: exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(out+errs, pass) {
		t.Fatal("password in output")
	}
	var res struct {
		Tag      string `json:"tag"`
		Segments int    `json:"segments"`
		Uploaded int    `json:"uploaded"`
		Skeleton string `json:"skeleton"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Skeleton != in+".skel" || res.Segments < 2 || res.Uploaded < 1 || !strings.HasPrefix(res.Tag, "gen-") {
		t.Fatalf("push result %s", out)
	}
	// Again: nothing to upload.
	code, out, _ = snapd(t, env, "oci", "push", in, "--oci-repository", repoRef, "--segment-size", "65536", "--json")
	if code != 0 || !strings.Contains(out, `"uploaded": 0`) {
		t.Fatalf("re-push: exit %d %s", code, out)
	}

	asm := filepath.Join(d, "out.wtxt")
	code, out, errs = snapd(t, env, "assemble", "--oci-repository", repoRef, res.Skeleton, asm)
	if code != 0 {
		t.Fatalf("assemble: exit %d\n%s%s", code, out, errs)
	}
	got, _ := os.ReadFile(asm)
	if !bytes.Equal(got, want) {
		t.Fatal("assembled WTXT differs from the pushed one")
	}
	k := vectorKeys(t)
	mustRun(t, "verify", asm, "--pubkey", filepath.Join(k, "sign_ed25519.pub"))

	// A skeleton whose seg line disagrees with its ch lines.
	skel, _ := os.ReadFile(res.Skeleton)
	bad := bytes.Replace(skel, []byte("seg chunks=1 "), []byte("seg chunks=2 "), 1)
	if bytes.Equal(bad, skel) {
		t.Fatal("no single-chunk segment to damage")
	}
	badPath := filepath.Join(d, "bad.skel")
	os.WriteFile(badPath, bad, 0o644)
	out2 := filepath.Join(d, "out2.wtxt")
	code, _, errs = snapd(t, env, "assemble", "--oci-repository", repoRef, badPath, out2)
	if code != 1 || !strings.Contains(errs, "bad.skel:") || !strings.Contains(errs, "skeleton") {
		t.Fatalf("damaged skeleton: exit %d %s", code, errs)
	}
	if _, err := os.Stat(out2); err == nil {
		t.Fatal("output left behind")
	}

	// No registry at that address: an I/O error (exit 2), nothing written.
	if code, _, errs := snapd(t, env, "assemble", "--oci-repository", "127.0.0.1:1/none/here", res.Skeleton, out2); code != 2 {
		t.Fatalf("unreachable registry: exit %d %s", code, errs)
	}
	if _, err := os.Stat(out2); err == nil {
		t.Fatal("output left behind")
	}

	// Wrong credentials: a failure, no secret in the message.
	env["SNAPD_OCI_PASSWORD"] = "not-the-password-777"
	code, _, errs = snapd(t, env, "assemble", "--oci-repository", repoRef, res.Skeleton, out2)
	if code == 0 || strings.Contains(errs, "not-the-password-777") {
		t.Fatalf("wrong password: exit %d %s", code, errs)
	}
	if _, err := os.Stat(out2); err == nil {
		t.Fatal("output left behind")
	}

	// gc --remote: push gen 123 as well, keep 1 (gen 124 stays).
	env["SNAPD_OCI_PASSWORD"] = pass
	in2 := filepath.Join(d, "g123.wtxt")
	b123, _ := os.ReadFile(filepath.Join(vectors, "v1-basic-signed.wtxt"))
	os.WriteFile(in2, b123, 0o644)
	if code, out, errs := snapd(t, env, "oci", "push", in2, "--oci-repository", repoRef); code != 0 {
		t.Fatalf("push 123: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = snapd(t, env, "gc", "--remote", "--keep", "1", "--oci-repository", repoRef, "--json")
	if code != 0 {
		t.Fatalf("gc --remote: exit %d\n%s%s", code, out, errs)
	}
	// v2-ext-signed is gen 7, v1-basic-signed gen 124: gen 7 goes.
	if !strings.Contains(compactJSON(out), `"removed":["gen-000007"]`) {
		t.Fatalf("gc --remote: %s", out)
	}
	if code, _, _ := snapd(t, env, "gc", "--remote", "--keep", "0", "--oci-repository", repoRef); code != 2 {
		t.Fatalf("--keep 0 with --remote: exit %d, want 2", code)
	}
}
