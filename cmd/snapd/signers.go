package main

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// AllowedSignersFile is written beside the generated keys: the signing
// key's public half as a git/OpenSSH allowed_signers entry, for
// `git -c gpg.ssh.allowedSignersFile=... verify-commit`, ssh-keygen -Y
// verify and snapd verify --pubkey.
const AllowedSignersFile = "allowed_signers"

var principalRE = regexp.MustCompile(`^[A-Za-z0-9._@+-]{1,128}$`)

// defaultPrincipal is snapd@HOST (HOST from os.Hostname, "localhost"
// when unknown or not a plain name).
func defaultPrincipal() string {
	h, err := os.Hostname()
	if err != nil || !principalRE.MatchString(h) {
		h = "localhost"
	}
	return "snapd@" + h
}

// checkPrincipal validates an allowed_signers principal given by a user.
func checkPrincipal(flag, p string) error {
	if !principalRE.MatchString(p) {
		return usageError{fmt.Errorf("%s %q: want 1..128 of A-Z a-z 0-9 . _ @ + - (an email-like name, e.g. snapd@trainer-01)", flag, p)}
	}
	return nil
}

// allowedSignersLine is "PRINCIPAL namespaces=\"git,file\" ssh-ed25519 AAAA... snapd".
// Both namespaces: git signs commits and tags with "git"; ssh-keygen -Y sign
// uses "file" by default.
func allowedSignersLine(principal string, pubLine []byte) ([]byte, error) {
	f := strings.Fields(string(pubLine))
	if len(f) < 2 || f[0] != "ssh-ed25519" {
		return nil, errors.New("public key file is not an ssh-ed25519 line")
	}
	return fmt.Appendf(nil, "%s namespaces=\"git,file\" %s %s\n", principal, f[0], f[1]), nil
}

// writeAllowedSigners writes keyDir/allowed_signers for pub (atomically,
// 0644). It leaves an identical file
// alone and replaces one naming another principal or key (the file is
// derived, never edited by hand: edit principals with --principal).
func writeAllowedSigners(keyDir, principal string, pub ed25519.PublicKey) (string, error) {
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	line, err := allowedSignersLine(principal, ssh.MarshalAuthorizedKey(sp))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(keyDir, AllowedSignersFile)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, line) {
		return p, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return p, atomicfile.WriteFile(p, line, 0o644)
}

// shellQuote quotes s for a POSIX shell when it needs quoting, so printed
// commands can be pasted as they are.
func shellQuote(s string) string {
	if s != "" && regexp.MustCompile(`^[A-Za-z0-9._/@:+=,-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
