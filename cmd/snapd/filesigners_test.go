package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyPubkeyAllowedSignersOptions: verify and review apply the
// options of allowed_signers lines to WTXT signatures, for namespace
// "file" at the file's meta ts: a key allowed only for "git" or only
// before the file's ts is refused, naming why; a plain line, or a window
// holding the ts (even one that has passed now), is accepted.
func TestVerifyPubkeyAllowedSignersOptions(t *testing.T) {
	k := vectorKeys(t)
	d := t.TempDir()
	p := func(n string) string { return filepath.Join(d, n) }
	file := p("g.wtxt")
	mustRun(t, "convert", filepath.Join(vectors, "v1-basic.safetensors"), file, "--gen", "1", "--ts", "2020-06-01T00:00:00Z",
		"--sign-key", filepath.Join(k, "sign_ed25519"))
	pub, err := os.ReadFile(filepath.Join(k, "sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Join(strings.Fields(string(pub))[:2], " ")
	cases := []struct {
		name, line string
		ok         bool
		msg        []string
	}{
		{"plain", "ml-bot " + key, true, nil},
		{"bare key", key, true, nil},
		{"file namespace", `ml-bot namespaces="git,file" ` + key, true, nil},
		{"window holding the ts", `ml-bot valid-after="20200101Z",valid-before="20210101Z" ` + key, true, nil},
		{"git namespace only", `ml-bot namespaces="git" ` + key, false, []string{`namespace "file"`, `namespaces="git"`, "2020-06-01T00:00:00Z"}},
		{"expired before the ts", `ml-bot valid-before="20200101Z" ` + key, false, []string{`namespace "file"`, "expired", "2020-06-01T00:00:00Z"}},
		{"signer excluded, another key allowed", `ml-bot namespaces="git" ` + key + "\nother ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", false, []string{"does not allow keyid", `namespace "file"`, `namespaces="git"`}},
		{"not yet valid at the ts", `ml-bot valid-after="20210101Z" ` + key, false, []string{`namespace "file"`, "2020-06-01T00:00:00Z"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			as := p("allowed_signers_" + string(rune('a'+i)))
			if err := os.WriteFile(as, []byte(tc.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"verify", file, "--pubkey", as},
				{"review", "--dry-run", "--base", file, "--head", file, "--pubkey", as},
			} {
				code, out, errs := snapd(t, nil, args...)
				if tc.ok {
					if code != exitOK {
						t.Fatalf("%s: exit %d\n%s%s", args[0], code, out, errs)
					}
					continue
				}
				if code != exitInvalid {
					t.Fatalf("%s: exit %d, want %d\n%s%s", args[0], code, exitInvalid, out, errs)
				}
				for _, m := range tc.msg {
					if !strings.Contains(errs, m) {
						t.Errorf("%s: stderr lacks %q:\n%s", args[0], m, errs)
					}
				}
			}
		})
	}
}
