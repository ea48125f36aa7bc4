package keys

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
)

// writeFile writes data to dir/name with mode (chmod'ed explicitly so the
// umask does not matter) and returns the path.
func writeFile(t *testing.T, dir, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyPrivate copies a testdata file into a temp dir with mode 0600 (git
// does not keep file modes).
func copyPrivate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), name, b, 0o600)
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed; skipping the interoperability check with it", name)
	}
	return p
}

func run(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// sshKeygen makes a key pair with the real ssh-keygen and returns the
// private key path.
func sshKeygen(t *testing.T, dir, name, passphrase string) string {
	t.Helper()
	ssh := needTool(t, "ssh-keygen")
	p := filepath.Join(dir, name)
	run(t, nil, ssh, "-q", "-t", "ed25519", "-N", passphrase, "-C", "test@"+name, "-f", p)
	return p
}

func TestVectorKeys(t *testing.T) {
	priv, err := LoadSigner(copyPrivate(t, "sign_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := LoadPublicKeys(filepath.Join("testdata", "sign_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 1 || !bytes.Equal(pubs[0], priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("public key file does not match private key")
	}
	if got := KeyID(pubs[0]); got != "7dd3e4f0bb8cf9eb" {
		t.Fatalf("KeyID = %s, want the vectors' 7dd3e4f0bb8cf9eb", got)
	}
	want := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMqlJ2y3XCL/DzetSCy1yXiNnp4L7YsaAPbU4stA+vXm"
	if got := MarshalPublicKey(pubs[0]); got != want {
		t.Fatalf("MarshalPublicKey = %q, want %q", got, want)
	}
	h, err := LoadHMACKey(copyPrivate(t, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range h {
		if int(b) != i {
			t.Fatalf("HMAC key byte %d = %d, want %d", i, b, i)
		}
	}
}

func TestSSHKeygenInterop(t *testing.T) {
	dir := t.TempDir()
	p := sshKeygen(t, dir, "id_ed25519", "")
	priv, err := LoadSigner(p)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := LoadPublicKeys(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 1 {
		t.Fatalf("got %d public keys, want 1", len(pubs))
	}
	msg := []byte("WTXT 1.1 signed part")
	sig := ed25519.Sign(priv, msg)
	if !ed25519.Verify(pubs[0], msg, sig) {
		t.Fatal("signature made with the loaded private key does not verify with the loaded .pub")
	}
	pubLine, _ := os.ReadFile(p + ".pub")
	if f := strings.Fields(string(pubLine)); len(f) < 2 || f[0]+" "+f[1] != MarshalPublicKey(pubs[0]) {
		t.Fatalf("MarshalPublicKey = %q, ssh-keygen wrote %q", MarshalPublicKey(pubs[0]), pubLine)
	}
	// The same key also works as an age identity/recipient pair.
	ids, err := LoadAgeIdentities(p)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := LoadAgeRecipients(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	ageRoundTrip(t, rs, ids)
}

func TestAllowedSigners(t *testing.T) {
	dir := t.TempDir()
	a := sshKeygen(t, dir, "a", "")
	b := sshKeygen(t, dir, "b", "")
	c := sshKeygen(t, dir, "c", "")
	pub := func(p string) string {
		x, err := os.ReadFile(p + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(x))
	}
	content := "# trusted snapshot signers\n\n" +
		"alice@example.com " + pub(a) + "\n" +
		"  \"bob smith,carol@example.com\" namespaces=\"git,file\" " + pub(b) + "\r\n" +
		"* valid-after=\"20230101\",valid-before=\"29991231\" " + pub(c) + "\n" +
		"dave@example.com " + pub(a) + "\n" // repeated key
	as := writeFile(t, dir, "allowed_signers", []byte(content), 0o644)
	keys, err := LoadPublicKeys(as)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("got %d keys, want 3 (repeats collapsed)", len(keys))
	}
	for i, p := range []string{a, b, c} {
		priv, err := LoadSigner(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(keys[i], priv.Public().(ed25519.PublicKey)) {
			t.Fatalf("key %d does not match %s", i, p)
		}
	}
	// The file is also a valid allowed_signers file for OpenSSH itself.
	ssh := needTool(t, "ssh-keygen")
	msg := writeFile(t, dir, "msg", []byte("hello"), 0o644)
	run(t, nil, ssh, "-q", "-Y", "sign", "-f", b, "-n", "file", msg)
	sig, err := os.ReadFile(msg + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	sigPath := writeFile(t, dir, "sig", sig, 0o644)
	run(t, []byte("hello"), ssh, "-Y", "verify", "-f", as, "-I", "carol@example.com", "-n", "file", "-s", sigPath)
}

func TestPublicKeyErrors(t *testing.T) {
	const ed = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMqlJ2y3XCL/DzetSCy1yXiNnp4L7YsaAPbU4stA+vXm"
	const rsaKey = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7"
	cases := []struct {
		name, content, want string
		is                  error
	}{
		{"empty", "", "no keys found", ErrNoKeys},
		{"comments only", "# nothing\n\n", "no keys found", ErrNoKeys},
		{"rsa", "# x\n" + rsaKey + " me\n", ":2: unsupported key type: key type ssh-rsa", ErrKeyType},
		{"rsa signer", "me@x " + rsaKey + "\n", ":1: unsupported key type", ErrKeyType},
		{"cert authority", "*.example.com cert-authority " + ed + "\n", ":1: unsupported key type: option cert-authority", ErrKeyType},
		{"bad base64", "ssh-ed25519 AAAA!!!!\n", ":1: ssh-ed25519 key data is not valid base64", nil},
		{"truncated blob", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMql\n", ":1: ssh-ed25519 key data", nil},
		{"type mismatch", "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQC7\n", ":1: ssh-ed25519 key data", nil},
		{"no key", ed + "\nalice@example.com\n", ":2: no key found", nil},
		{"unterminated quote", "\"alice " + ed + "\n", ":1: unterminated double quote", nil},
		{"bad utf8", "alice\xff " + ed + "\n", ":1: line is not valid UTF-8", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "keys", []byte(c.content), 0o644)
			_, err := LoadPublicKeys(p)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), p) {
				t.Fatalf("error %q does not start with the path or lacks %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %v does not wrap %v", err, c.is)
			}
		})
	}
	if _, err := LoadPublicKeys(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestPermissions(t *testing.T) {
	vec, err := os.ReadFile(filepath.Join("testdata", "sign_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	hm, err := os.ReadFile(filepath.Join("testdata", "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	load := map[string]func(string) error{
		"signer": func(p string) error { _, err := LoadSigner(p); return err },
		"hmac":   func(p string) error { _, err := LoadHMACKey(p); return err },
		"age":    func(p string) error { _, err := LoadAgeIdentities(p); return err },
	}
	content := map[string][]byte{"signer": vec, "hmac": hm, "age": vec}
	for name, f := range load {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
			p := writeFile(t, t.TempDir(), "k", content[name], mode)
			err := f(p)
			if !errors.Is(err, ErrPermissions) {
				t.Fatalf("%s mode %04o: err = %v, want ErrPermissions", name, mode, err)
			}
			var pe *PermissionError
			if !errors.As(err, &pe) || pe.Path != p || pe.Mode != mode {
				t.Fatalf("%s mode %04o: %#v", name, mode, err)
			}
			if mode == 0o644 {
				want := "permissions 0644 for '" + p + "' are too open; run: chmod 600 " + p
				if err.Error() != want {
					t.Fatalf("message %q, want %q", err, want)
				}
			}
		}
		for _, mode := range []os.FileMode{0o600, 0o400} {
			p := writeFile(t, t.TempDir(), "k", content[name], mode)
			if err := f(p); err != nil {
				t.Fatalf("%s mode %04o: %v", name, mode, err)
			}
		}
	}
	if got := (&PermissionError{Path: "my keys/k", Mode: 0o644}).Error(); got != `permissions 0644 for 'my keys/k' are too open; run: chmod 600 'my keys/k'` {
		t.Fatalf("quoted hint: %q", got)
	}
}

func TestLoadSignerErrors(t *testing.T) {
	dir := t.TempDir()
	enc := sshKeygen(t, dir, "enc", "correct horse")
	_, err := LoadSigner(enc)
	if !errors.Is(err, ErrEncrypted) || !strings.Contains(err.Error(), "ssh-keygen -p") {
		t.Fatalf("encrypted key: %v", err)
	}
	if _, err := LoadAgeIdentities(enc); !errors.Is(err, ErrEncrypted) {
		t.Fatalf("encrypted key as age identity: %v", err)
	}

	ssh := needTool(t, "ssh-keygen")
	rsaPath := filepath.Join(dir, "rsa")
	run(t, nil, ssh, "-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", rsaPath)
	if _, err := LoadSigner(rsaPath); !errors.Is(err, ErrKeyType) || !strings.Contains(err.Error(), "RSA") {
		t.Fatalf("rsa key: %v", err)
	}

	garbage := writeFile(t, dir, "garbage", []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600)
	if _, err := LoadSigner(garbage); err == nil || !strings.HasPrefix(err.Error(), garbage+": not an OpenSSH private key") {
		t.Fatalf("garbage key: %v", err)
	}
	if _, err := LoadSigner(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := LoadSigner(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: %v", err)
	}
	big := writeFile(t, dir, "big", make([]byte, MaxKeyFileSize+1), 0o600)
	if _, err := LoadSigner(big); err == nil || !strings.Contains(err.Error(), "exceeds the key file limit") {
		t.Fatalf("big file: %v", err)
	}
}

func TestHMACKey(t *testing.T) {
	const hexKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	good := []string{hexKey, hexKey + "\n", hexKey + "\r\n", strings.ToUpper(hexKey) + "\n"}
	for _, g := range good {
		k, err := ParseHMACKey([]byte(g))
		if err != nil {
			t.Fatalf("%q: %v", g, err)
		}
		if len(k) != 32 || k[31] != 0x1f {
			t.Fatalf("%q: got %x", g, k)
		}
	}
	bad := map[string]string{
		"":                              "0 hex digits, want 64",
		hexKey[:62] + "\n":              "62 hex digits, want 64",
		hexKey + "00\n":                 "66 hex digits, want 64",
		hexKey + "\n\n":                 "byte 64 is not a hex digit",
		" " + hexKey:                    "byte 0 is not a hex digit",
		hexKey[:10] + "g" + hexKey[11:]: "byte 10 is not a hex digit",
	}
	for in, want := range bad {
		_, err := ParseHMACKey([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: err %v, want %q", in, err, want)
		}
	}
	p := writeFile(t, t.TempDir(), "hmac.key", []byte("zz\n"), 0o600)
	if _, err := LoadHMACKey(p); err == nil || !strings.HasPrefix(err.Error(), p+": HMAC key: byte 0") {
		t.Fatalf("LoadHMACKey error: %v", err)
	}
}

func ageRoundTrip(t *testing.T, rs []age.Recipient, ids []age.Identity) {
	t.Helper()
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, rs...)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "plaintext")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := age.Decrypt(&buf, ids...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil || string(out) != "plaintext" {
		t.Fatalf("decrypted %q, %v", out, err)
	}
}

func TestAgeFiles(t *testing.T) {
	id1, _ := age.GenerateX25519Identity()
	id2, _ := age.GenerateX25519Identity()
	dir := t.TempDir()
	idPath := writeFile(t, dir, "ids", []byte("# created: now\n# public key: "+id1.Recipient().String()+"\n"+id1.String()+"\n\n"+id2.String()+"\n"), 0o600)
	ids, err := LoadAgeIdentities(idPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("%d identities, want 2", len(ids))
	}
	rPath := writeFile(t, dir, "rs", []byte("# team\n"+id2.Recipient().String()+"\n"), 0o644)
	rs, err := LoadAgeRecipients(rPath)
	if err != nil {
		t.Fatal(err)
	}
	ageRoundTrip(t, rs, ids)

	badIDs := map[string]string{
		"# only comments\n":                       "no age identities",
		id1.String() + "\nAGE-PLUGIN-YUBIKEY-1\n": ":2: age plugin identities are not supported",
		id1.Recipient().String() + "\n":           ":1: this is a recipient",
		"AGE-SECRET-KEY-1QQQ\n":                   ":1: ",
		"hello\n":                                 ":1: unknown identity type",
	}
	for content, want := range badIDs {
		p := writeFile(t, t.TempDir(), "ids", []byte(content), 0o600)
		_, err := LoadAgeIdentities(p)
		if err == nil || !strings.HasPrefix(err.Error(), p) || !strings.Contains(err.Error(), want) {
			t.Fatalf("identities %q: err %v, want %q", content, err, want)
		}
		if strings.Contains(err.Error(), "AGE-SECRET-KEY-1QQQ") {
			t.Fatalf("error quotes secret material: %v", err)
		}
	}
	badRs := map[string]string{
		"":                    "no age recipients",
		id1.String() + "\n":   ":1: this is a secret identity",
		"age1xyz\n":           ":1: ",
		"# x\nssh-dss AAAA\n": ":2: ",
		"bogus\n":             ":1: unknown recipient type",
	}
	for content, want := range badRs {
		p := writeFile(t, t.TempDir(), "rs", []byte(content), 0o644)
		_, err := LoadAgeRecipients(p)
		if err == nil || !strings.HasPrefix(err.Error(), p) || !strings.Contains(err.Error(), want) {
			t.Fatalf("recipients %q: err %v, want %q", content, err, want)
		}
		if strings.Contains(err.Error(), "AGE-SECRET") {
			t.Fatalf("error quotes secret material: %v", err)
		}
	}
}

func TestGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "keys")
	g, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode: %v %v", st.Mode(), err)
	}
	modes := map[string]os.FileMode{g.SignKey: 0o600, g.SignPub: 0o644, g.HMACKey: 0o600, g.AgeKey: 0o600, g.AgePub: 0o644}
	for p, m := range modes {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != m {
			t.Fatalf("%s: mode %04o, want %04o", p, st.Mode().Perm(), m)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 5 {
		t.Fatalf("%d entries in dir (temp files left?), want 5", len(ents))
	}

	priv, err := LoadSigner(g.SignKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(priv.Public().(ed25519.PublicKey), g.PublicKey) {
		t.Fatal("private key does not match Generated.PublicKey")
	}
	pubs, err := LoadPublicKeys(g.SignPub)
	if err != nil || len(pubs) != 1 || !bytes.Equal(pubs[0], g.PublicKey) {
		t.Fatalf("pub file: %v %v", pubs, err)
	}
	pubLine, _ := os.ReadFile(g.SignPub)
	if string(pubLine) != MarshalPublicKey(g.PublicKey)+" snapd\n" {
		t.Fatalf("pub file content %q", pubLine)
	}
	hk, _ := os.ReadFile(g.HMACKey)
	if len(hk) != 65 || hk[64] != '\n' || strings.ToLower(string(hk)) != string(hk) {
		t.Fatalf("hmac.key content %q", hk)
	}
	if _, err := LoadHMACKey(g.HMACKey); err != nil {
		t.Fatal(err)
	}
	ids, err := LoadAgeIdentities(g.AgeKey)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := LoadAgeRecipients(g.AgePub)
	if err != nil {
		t.Fatal(err)
	}
	ageRoundTrip(t, rs, ids)
	ak, _ := os.ReadFile(g.AgeKey)
	al := strings.Split(string(ak), "\n")
	if len(al) != 4 || !strings.HasPrefix(al[0], "# created: ") || al[1] != "# public key: "+g.AgeRecipient ||
		!strings.HasPrefix(al[2], "AGE-SECRET-KEY-1") || al[3] != "" {
		t.Fatalf("age.key layout: %q", ak)
	}
	ap, _ := os.ReadFile(g.AgePub)
	if string(ap) != g.AgeRecipient+"\n" {
		t.Fatalf("age.pub %q", ap)
	}

	// Overwrite refused, files unchanged.
	before, _ := os.ReadFile(g.SignKey)
	if _, err := Generate(dir); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("second Generate: %v", err)
	}
	after, _ := os.ReadFile(g.SignKey)
	if !bytes.Equal(before, after) {
		t.Fatal("second Generate changed the key")
	}
	// Any one existing file blocks all writes.
	dir2 := t.TempDir()
	writeFile(t, dir2, AgePubFile, []byte("x"), 0o644)
	if _, err := Generate(dir2); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Generate with existing age.pub: %v", err)
	}
	if ents, _ := os.ReadDir(dir2); len(ents) != 1 {
		t.Fatalf("Generate wrote files although it refused: %d entries", len(ents))
	}
}

func TestGenerateSSHKeygen(t *testing.T) {
	ssh := needTool(t, "ssh-keygen")
	g, err := Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, nil, ssh, "-y", "-f", g.SignKey)
	if got := strings.Fields(string(out)); len(got) < 2 || got[0]+" "+got[1] != MarshalPublicKey(g.PublicKey) {
		t.Fatalf("ssh-keygen -y gives %q, want %q", out, MarshalPublicKey(g.PublicKey))
	}
}

func TestGenerateAgeKeygen(t *testing.T) {
	ak := needTool(t, "age-keygen")
	g, err := Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, nil, ak, "-y", g.AgeKey)
	if strings.TrimSpace(string(out)) != g.AgeRecipient {
		t.Fatalf("age-keygen -y gives %q, want %q", out, g.AgeRecipient)
	}
}
