package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagTypoSuggestsNearest(t *testing.T) {
	for _, c := range []struct {
		args      []string
		bad, hint string
	}{
		{[]string{"status", "--stat-dir", "x"}, "--stat-dir", "snapd: hint: did you mean --state-dir?"}, // inherited (root) flag
		{[]string{"verify", "x.wtxt", "--pubky", "k"}, "--pubky", "snapd: hint: did you mean --pubkey?"},
		{[]string{"status", "--jsno"}, "--jsno", "snapd: hint: did you mean --json?"},
		{[]string{"status", "--zzzzzzzz"}, "--zzzzzzzz", ""},
	} {
		code, _, errs := runCLI(c.args...)
		if code != exitUsage || !strings.Contains(errs, "snapd: error: unknown flag: "+c.bad) {
			t.Errorf("snapd %s: exit %d\n%s", strings.Join(c.args, " "), code, errs)
		}
		if c.hint == "" && strings.Contains(errs, "did you mean") || !strings.Contains(errs, c.hint) {
			t.Errorf("snapd %s: want hint %q\n%s", strings.Join(c.args, " "), c.hint, errs)
		}
	}
}

// TestPubkeyPrivateKeyFile: every --pubkey refuses a private key file as
// such, naming the .pub to give instead, without echoing the key.
func TestPubkeyPrivateKeyFile(t *testing.T) {
	k := vectorKeys(t)
	priv := filepath.Join(k, "sign_ed25519")
	want := "snapd: error: " + priv + " is an OpenSSH private key; give the public key (" + priv + ".pub) or an allowed_signers file"
	d := t.TempDir()
	for _, args := range [][]string{
		{"verify", filepath.Join(d, "x.wtxt"), "--pubkey", priv},
		{"review", "--dry-run", "--base", filepath.Join(d, "a.wtxt"), "--head", filepath.Join(d, "b.wtxt"), "--pubkey", priv},
		{"verify-repo", d, "--pubkey", priv},
		{"ranks", "verify-repo", d, "--oci-repository", "127.0.0.1:1/x", "--pubkey", priv},
	} {
		code, _, errs := runCLI(args...)
		if code != exitUsage || !strings.Contains(errs, want) || strings.Contains(errs, "PRIVATE KEY-----") {
			t.Errorf("snapd %s: exit %d\n%s", strings.Join(args, " "), code, errs)
		}
	}
}

// TestVerifySummary: a passing verify ends with one summary line that
// separates what was verified from what was not checked (the HMAC without
// --hmac-key), with no per-array alarm wording.
func TestVerifySummary(t *testing.T) {
	k := vectorKeys(t)
	sk, hk, pub := filepath.Join(k, "sign_ed25519"), filepath.Join(k, "hmac.key"), filepath.Join(k, "sign_ed25519.pub")
	d := t.TempDir()
	signed, plain := filepath.Join(d, "s.wtxt"), filepath.Join(d, "p.wtxt")
	mustRun(t, "convert", filepath.Join(vectors, "v1-basic.safetensors"), signed, "--gen", "1", "--sign-key", sk, "--hmac-key", hk)
	mustRun(t, "convert", filepath.Join(vectors, "v1-basic.safetensors"), plain, "--gen", "1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", signed, "--pubkey", pub}, "OK: signature verified (keyid 7dd3e4f0bb8cf9eb); arrays: 4 checked (CRC32C/SHA-256); HMAC not checked (no --hmac-key)\n"},
		{[]string{"verify", signed, "--pubkey", pub, "--hmac-key", hk}, "OK: signature verified (keyid 7dd3e4f0bb8cf9eb); arrays: 4 checked (CRC32C/SHA-256); HMAC verified\n"},
		{[]string{"verify", signed}, "OK: signature not checked (keyid 7dd3e4f0bb8cf9eb; no --pubkey); arrays: 4 checked (CRC32C/SHA-256); HMAC not checked (no --hmac-key)\n"},
		{[]string{"verify", plain}, "OK: unsigned; arrays: 4 checked (CRC32C/SHA-256); HMAC absent (the file carries none)\n"},
	} {
		out := mustRun(t, c.args...)
		if !strings.HasSuffix(out, c.want) || strings.Contains(strings.ToLower(out), "unauthenticated") {
			t.Errorf("snapd %s:\n%s\nwant last line %q", strings.Join(c.args, " "), out, c.want)
		}
	}
}

// TestRootHelpListsFormats: snapd --help names every format snapd reads.
func TestRootHelpListsFormats(t *testing.T) {
	out := mustRun(t, "--help")
	for _, f := range []string{"PyTorch .pt", "safetensors", "NumPy .npy/.npz", "DCP directories", "checkpoint directories", "Hugging Face sharded", "Trainer", "zTensor", "FOLD", "AERO", "STB"} {
		if !strings.Contains(out, f) {
			t.Errorf("snapd --help does not name %q:\n%s", f, out)
		}
	}
}

// TestGCFlagsAndWording: gc offers only the registry flags it honours, and
// says "would delete N generation manifests" in plain word order.
func TestGCFlagsAndWording(t *testing.T) {
	help := mustRun(t, "gc", "--help")
	for _, f := range []string{"--oci-jobs", "--oci-mount-from"} {
		if strings.Contains(help, f) {
			t.Errorf("gc --help offers the upload-only flag %s", f)
		}
	}
	for _, f := range []string{"--oci-repository", "--oci-username", "--oci-password-file", "--oci-timeout"} {
		if !strings.Contains(help, f) {
			t.Errorf("gc --help lacks %s", f)
		}
	}
	if code, _, errs := runCLI("gc", "--remote", "--keep", "1", "--oci-jobs", "2"); code != exitUsage || !strings.Contains(errs, "unknown flag: --oci-jobs") {
		t.Errorf("gc --oci-jobs: exit %d\n%s", code, errs)
	}
	if got := "would delete " + plural(2, "generation manifest"); got != "would delete 2 generation manifests" {
		t.Errorf("%q", got)
	}
	if got := "deleted " + plural(1, "generation manifest"); got != "deleted 1 generation manifest" {
		t.Errorf("%q", got)
	}
}

// TestPublicURL: the startup log's remote never carries credentials.
func TestPublicURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:tok-123@github.com/acme/w.git?token=x#f": "https://github.com/acme/w.git",
		"https://x-access-token@github.com/acme/w.git":         "https://github.com/acme/w.git",
		"git@github.com:acme/w.git":                            "git@github.com:acme/w.git",
		"/srv/git/w.git":                                       "/srv/git/w.git",
		"ssh://git@host:22/w.git":                              "ssh://host:22/w.git",
		"https://u:p%zz@host/w.git":                            "https://host/w.git",
	} {
		if got := publicURL(in); got != want {
			t.Errorf("publicURL(%q) = %q, want %q", in, got, want)
		}
	}
}
