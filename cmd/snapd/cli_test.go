package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const vectors = "../../../shared/spec/vectors"

// snapd runs the CLI in-process and returns exit code, stdout and stderr.
func snapd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.getenv = func(k string) string { return env[k] }
	root := newRootCommand(e)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	code := exitCode(err)
	if err != nil {
		errb.WriteString("snapd: error: " + err.Error() + "\n")
	}
	return code, out.String(), errb.String()
}

// vectorKeys copies the published test keys into a temp dir with 0600.
func vectorKeys(t *testing.T) string {
	dir := t.TempDir()
	for _, n := range []string{"sign_ed25519", "sign_ed25519.pub", "hmac.key"} {
		b, err := os.ReadFile(filepath.Join(vectors, "keys", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n), b, 0o600)
	}
	return dir
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := snapd(t, nil, args...)
	if code != 0 {
		t.Fatalf("snapd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// TestConvertReproducesVectors runs the conformance vectors' parameters
// through `snapd convert` and compares bytes; then verifies them.
func TestConvertReproducesVectors(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	v := func(n string) string { return filepath.Join(vectors, n) }
	sk, hk, pub := filepath.Join(k, "sign_ed25519"), filepath.Join(k, "hmac.key"), filepath.Join(k, "sign_ed25519.pub")
	mustRun(t, "convert", v("v1-basic.safetensors"), p("a.wtxt"), "--gen", "123", "--ts", "2025-10-09T03:12:45Z", "--build", "abc123")
	mustRun(t, "convert", v("v1-basic.safetensors"), p("b.wtxt"), "--gen", "124", "--ts", "2025-10-09T05:01:23Z", "--build", "def456", "--sign-key", sk, "--hmac-key", hk, "--prev", p("a.wtxt"))
	mustRun(t, "convert", v("v2-ext.safetensors"), p("c.wtxt"), "--gen", "7", "--ts", "2026-01-01T00:00:00Z", "--build", "ext", "--sign-key", sk, "--hmac-key", hk)
	mustRun(t, "convert", v("v2-ext.safetensors"), p("d.wtxt"), "--gen", "8", "--ts", "2026-01-01T00:00:01Z", "--build", "ext", "--sign-key", sk, "--hmac-key", hk, "--prev", p("c.wtxt"), "--rows-per-chunk", "3", "--stream", p("d.wsum"))
	for got, want := range map[string]string{"a.wtxt": "v1-basic-unsigned.wtxt", "b.wtxt": "v1-basic-signed.wtxt", "c.wtxt": "v2-ext-signed.wtxt", "d.wtxt": "v3-stream.wtxt", "d.wsum": "v3-stream.wsum"} {
		g, _ := os.ReadFile(p(got))
		w, _ := os.ReadFile(v(want))
		if !bytes.Equal(g, w) {
			t.Errorf("%s differs from the vector %s", got, want)
		}
	}
	out := mustRun(t, "verify", p("b.wtxt"), "--pubkey", pub, "--hmac-key", hk, "--prev", p("a.wtxt"), "--require-signature")
	if !strings.Contains(out, "result:      OK") || !strings.Contains(out, "verified (keyid 7dd3e4f0bb8cf9eb)") {
		t.Fatalf("verify output:\n%s", out)
	}
	out = mustRun(t, "verify", p("d.wtxt"), "--pubkey", pub, "--require-signature", "--json")
	var j verifyJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || !j.OK || j.Report.Signature != "verified" {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	// SOURCE_DATE_EPOCH sets ts.
	code, _, errs := snapd(t, map[string]string{"SOURCE_DATE_EPOCH": "1760000000"}, "convert", v("v1-basic.safetensors"), p("e.wtxt"))
	if code != 0 {
		t.Fatal(errs)
	}
	if b, _ := os.ReadFile(p("e.wtxt")); !bytes.Contains(b, []byte("ts=2025-10-09T08:53:20Z")) {
		t.Fatal("SOURCE_DATE_EPOCH not honoured")
	}
	// WTXT back to safetensors reproduces every tensor: diff says equal.
	mustRun(t, "convert", p("c.wtxt"), p("back.safetensors"))
	if out := mustRun(t, "diff", p("back.safetensors"), v("v2-ext.safetensors")); !strings.Contains(out, "0 of 6 arrays changed") {
		t.Fatalf("diff: %s", out)
	}
}

func TestVerifyExitCodes(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	good, _ := os.ReadFile(filepath.Join(vectors, "v1-basic-signed.wtxt"))
	bad := bytes.Replace(good, []byte("arr name=R dtype=f64"), []byte("arr name=R dtype=f32"), 1)
	os.WriteFile(filepath.Join(d, "good.wtxt"), good, 0o644)
	os.WriteFile(filepath.Join(d, "bad.wtxt"), bad, 0o644)
	pub := filepath.Join(k, "sign_ed25519.pub")
	if code, out, _ := snapd(t, nil, "verify", filepath.Join(d, "good.wtxt"), "--pubkey", pub, "--require-signature"); code != 0 {
		t.Fatalf("good: %d %s", code, out)
	}
	code, out, errs := snapd(t, nil, "verify", filepath.Join(d, "bad.wtxt"), "--pubkey", pub)
	if code != exitInvalid || !strings.Contains(out, "FAIL") || !strings.Contains(errs, "bad.wtxt:6:") {
		t.Fatalf("bad: exit %d\n%s%s", code, out, errs)
	}
	if code, _, _ := snapd(t, nil, "verify", filepath.Join(d, "missing.wtxt")); code != exitUsage {
		t.Fatalf("missing file: exit %d", code)
	}
	if code, _, _ := snapd(t, nil, "verify"); code != exitUsage {
		t.Fatalf("no args: exit %d", code)
	}
	if code, _, _ := snapd(t, nil, "verify", "--bogus", "x"); code != exitUsage {
		t.Fatalf("bad flag: exit %d", code)
	}
	// Unsigned file with --require-signature fails.
	unsigned := filepath.Join(vectors, "v1-basic-unsigned.wtxt")
	if code, _, _ := snapd(t, nil, "verify", unsigned, "--require-signature"); code != exitInvalid {
		t.Fatalf("unsigned + require: exit %d", code)
	}
	// A group-readable private key is refused with chmod advice.
	os.Chmod(filepath.Join(k, "hmac.key"), 0o644)
	code, _, errs = snapd(t, nil, "verify", unsigned, "--hmac-key", filepath.Join(k, "hmac.key"))
	if code == 0 || !strings.Contains(errs, "chmod 600") {
		t.Fatalf("0644 key: exit %d %s", code, errs)
	}
}

func TestInspect(t *testing.T) {
	out := mustRun(t, "inspect", filepath.Join(vectors, "v2-ext-signed.wtxt"))
	for _, w := range []string{"model.embed.weight", "bf16", "(40×16)", "keyid:", "7dd3e4f0bb8cf9eb", "merkle_this:"} {
		if !strings.Contains(out, w) {
			t.Fatalf("inspect lacks %q:\n%s", w, out)
		}
	}
	out = mustRun(t, "inspect", filepath.Join(vectors, "v2-ext.safetensors"), "--json")
	var j inspectJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Format != "safetensors" || len(j.Arrays) != 6 {
		t.Fatalf("inspect --json: %v %s", err, out)
	}
}

// TestDeltaCLI: delta make/apply reproduce the target byte for byte; a
// wrong base fails and leaves no output.
func TestDeltaCLI(t *testing.T) {
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	a, b := filepath.Join(vectors, "v2-ext-signed.wtxt"), filepath.Join(vectors, "v1-basic-signed.wtxt")
	out := mustRun(t, "delta", "make", a, b, p("x.wtxtdelta"))
	if !strings.Contains(out, "removed") {
		t.Fatalf("make: %s", out)
	}
	mustRun(t, "delta", "apply", a, p("x.wtxtdelta"), p("y.wtxt"))
	got, _ := os.ReadFile(p("y.wtxt"))
	want, _ := os.ReadFile(b)
	if !bytes.Equal(got, want) {
		t.Fatal("delta apply does not reproduce the target")
	}
	code, _, errs := snapd(t, nil, "delta", "apply", b, p("x.wtxtdelta"), p("z.wtxt"))
	if code != exitInvalid || !strings.Contains(errs, "base_sha256_all") {
		t.Fatalf("wrong base: %d %s", code, errs)
	}
	if _, err := os.Stat(p("z.wtxt")); !os.IsNotExist(err) {
		t.Fatal("failed apply left an output file")
	}
	if ents, _ := os.ReadDir(d); len(ents) != 2 {
		t.Fatalf("temp files left: %v", ents)
	}
}

// TestEncryptVerifyOnly: convert --encrypt-to writes armor the real age
// CLI decrypts and a seal that `verify` checks with public keys only;
// with --identity the plaintext is verified too; a file `age -a` made is
// decrypted by `snapd decrypt`.
func TestEncryptVerifyOnly(t *testing.T) {
	if _, err := exec.LookPath("age"); err != nil {
		t.Skip("age CLI not installed (scripts/test.sh installs it)")
	}
	k := t.TempDir() + "/k"
	mustRun(t, "keygen", k)
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	v1 := filepath.Join(vectors, "v1-basic.safetensors")
	mustRun(t, "convert", v1, p("g1.wtxt"), "--gen", "1", "--ts", "2026-01-01T00:00:00Z", "--sign-key", k+"/sign_ed25519", "--hmac-key", k+"/hmac.key")
	mustRun(t, "convert", v1, p("g2.wtxt.age"), "--gen", "2", "--ts", "2026-01-01T00:00:01Z", "--sign-key", k+"/sign_ed25519", "--prev", p("g1.wtxt"), "--encrypt-to", k+"/age.pub")
	armored, _ := os.ReadFile(p("g2.wtxt.age"))
	if !bytes.HasPrefix(armored, []byte("-----BEGIN AGE ENCRYPTED FILE-----\n")) {
		t.Fatal("not armored")
	}
	out := mustRun(t, "verify", p("g2.wtxt.age"), "--pubkey", k+"/sign_ed25519.pub", "--prev", p("g1.wtxt"))
	if !strings.Contains(out, "result:      OK") || !strings.Contains(out, "decrypted:   no") {
		t.Fatalf("verify-only:\n%s", out)
	}
	out = mustRun(t, "verify", p("g2.wtxt.age"), "--pubkey", k+"/sign_ed25519.pub", "--identity", k+"/age.key")
	if !strings.Contains(out, "decrypted:   yes") {
		t.Fatalf("verify --identity:\n%s", out)
	}
	// The real age CLI decrypts it to the plaintext snapd decrypts.
	plain, err := exec.Command("age", "-d", "-i", k+"/age.key", p("g2.wtxt.age")).Output()
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "decrypt", p("g2.wtxt.age"), p("g2.wtxt"), "--identity", k+"/age.key")
	mine, _ := os.ReadFile(p("g2.wtxt"))
	if !bytes.Equal(plain, mine) || !bytes.HasPrefix(mine, []byte("WTXT 1\n")) {
		t.Fatal("age -d and snapd decrypt disagree")
	}
	// Tampering with the armored file or the seal is caught without keys.
	os.WriteFile(p("t.wtxt.age"), bytes.Replace(armored, []byte("\n"), []byte("\n\n"), 1), 0o644)
	seal, _ := os.ReadFile(p("g2.wtxt.age.wseal"))
	os.WriteFile(p("t.wtxt.age.wseal"), seal, 0o644)
	if code, _, _ := snapd(t, nil, "verify", p("t.wtxt.age"), "--pubkey", k+"/sign_ed25519.pub"); code != exitInvalid {
		t.Fatalf("tampered armor: exit %d", code)
	}
	other := t.TempDir() + "/o"
	mustRun(t, "keygen", other)
	if code, _, errs := snapd(t, nil, "verify", p("g2.wtxt.age"), "--pubkey", other+"/sign_ed25519.pub"); code != exitInvalid || !strings.Contains(errs, "not among") {
		t.Fatalf("unknown signer: exit %d %s", code, errs)
	}
	if code, _, _ := snapd(t, nil, "decrypt", p("g2.wtxt.age"), p("w.wtxt"), "--identity", other+"/age.key"); code != exitInvalid {
		t.Fatalf("wrong identity: exit %d", code)
	}
	if _, err := os.Stat(p("w.wtxt")); !os.IsNotExist(err) {
		t.Fatal("failed decrypt left output")
	}
	// age -a output is decrypted by snapd.
	cmd := exec.Command("age", "-a", "-R", k+"/age.pub", "-o", p("from-age.age"))
	cmd.Stdin = bytes.NewReader(mine)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "decrypt", p("from-age.age"), p("from-age.wtxt"), "--identity", k+"/age.key")
	if b, _ := os.ReadFile(p("from-age.wtxt")); !bytes.Equal(b, mine) {
		t.Fatal("snapd decrypt of age -a output differs")
	}
	// Encrypted delta with seal.
	mustRun(t, "delta", "make", p("g1.wtxt"), p("g2.wtxt"), p("g.wtxtdelta.age"), "--encrypt-to", k+"/age.pub", "--sign-key", k+"/sign_ed25519")
	if out := mustRun(t, "verify", p("g.wtxtdelta.age"), "--pubkey", k+"/sign_ed25519.pub", "--identity", k+"/age.key"); !strings.Contains(out, "delta") {
		t.Fatalf("delta seal verify:\n%s", out)
	}
	mustRun(t, "delta", "apply", p("g1.wtxt"), p("g.wtxtdelta.age"), p("g2b.wtxt"), "--identity", k+"/age.key")
	if b, _ := os.ReadFile(p("g2b.wtxt")); !bytes.Equal(b, mine) {
		t.Fatal("encrypted delta apply differs")
	}
}

// TestDemo runs the newcomer's first command end to end (the run
// TestDemoPrintedCommandsWork shares: shared.demo).
func TestDemo(t *testing.T) {
	t.Parallel()
	out, dir := shared.demo(t)
	if strings.Count(out, "OK (signature, HMAC, chain)") != 3 || strings.Contains(out, "FAILED") {
		t.Fatalf("demo output:\n%s", out)
	}
	if !strings.Contains(out, "embed.weight:") || !strings.Contains(out, "rows") {
		t.Fatalf("demo shows no row-blocked diff:\n%s", out)
	}
	if py, _ := shared.torchPython(); (py != "") != strings.Contains(out, "  torch  ") {
		t.Fatalf("torch importable: %v, but the demo output says otherwise:\n%s", py != "", out)
	}
	// What it left verifies with the CLI.
	mustRun(t, "verify", filepath.Join(dir, "ring/gen-000003.wtxt"), "--pubkey", filepath.Join(dir, "keys/sign_ed25519.pub"),
		"--prev", filepath.Join(dir, "ring/gen-000002.wtxt"), "--require-signature")
	mustRun(t, "delta", "apply", filepath.Join(dir, "ring/gen-000002.wtxt"), filepath.Join(dir, "ring/gen-000003.wtxtdelta"), filepath.Join(t.TempDir(), "x.wtxt"))
}
