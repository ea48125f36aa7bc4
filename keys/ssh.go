package keys

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// Errors callers may branch on (besides ErrPermissions).
var (
	// ErrEncrypted means a private key is protected by a passphrase, which
	// snapd, running unattended, cannot ask for.
	ErrEncrypted = errors.New("private key is encrypted with a passphrase")
	// ErrKeyType means a key is not of the supported type (Ed25519).
	ErrKeyType = errors.New("unsupported key type")
	// ErrNoKeys means a public key or recipients file holds no key.
	ErrNoKeys = errors.New("no keys found")
	// ErrPrivateKey means a private key file was given where a public
	// key (or allowed_signers) file belongs.
	ErrPrivateKey = errors.New("private key given where a public key belongs")
)

// privateKeyMarkers start the private key files a user may confuse with
// their .pub file, and name their kind; only the kind is ever reported,
// never the content.
var privateKeyMarkers = []struct{ marker, kind string }{
	{"-----BEGIN OPENSSH PRIVATE KEY-----", "an OpenSSH private key"},
	{"-----BEGIN PRIVATE KEY-----", "a PKCS#8 private key"},
	{"-----BEGIN RSA PRIVATE KEY-----", "an RSA private key"},
	{"-----BEGIN EC PRIVATE KEY-----", "an EC private key"},
}

// privateKeyErr is ErrPrivateKey naming the file.
type privateKeyErr struct{ path, kind string }

func (e *privateKeyErr) Error() string {
	return fmt.Sprintf("%s is %s; give the public key (%s.pub) or an allowed_signers file", e.path, e.kind, e.path)
}

func (e *privateKeyErr) Is(target error) bool { return target == ErrPrivateKey }

// privateKeyError returns an error matching ErrPrivateKey if b holds a
// private key, naming path and the public files to give instead; nil
// otherwise. The message never quotes b.
func privateKeyError(path string, b []byte) error {
	for _, m := range privateKeyMarkers {
		if bytes.Contains(b, []byte(m.marker)) {
			return &privateKeyErr{path, m.kind}
		}
	}
	return nil
}

// CheckPublicKeyFile returns an error wrapping ErrPrivateKey when the file
// at path is a private key (see privateKeyError), for readers of public
// key files other than LoadPublicKeys; any other problem (a missing file,
// a bad line) is left to the reader and yields nil here.
func CheckPublicKeyFile(path string) error {
	b, err := readKeyFile(path, false)
	if err != nil {
		return nil
	}
	return privateKeyError(path, b)
}

// LoadSigner reads an unencrypted OpenSSH Ed25519 private key file (the
// format `ssh-keygen -t ed25519 -N ”` writes; PEM "OPENSSH PRIVATE KEY").
// The file must not be accessible to group or others (ErrPermissions).
func LoadSigner(path string) (ed25519.PrivateKey, error) {
	b, err := readKeyFile(path, true)
	if err != nil {
		return nil, err
	}
	k, err := ParseSigner(b)
	if err != nil {
		if errors.Is(err, ErrEncrypted) {
			return nil, fmt.Errorf("%s: %w; snapd cannot prompt for it: remove it with `ssh-keygen -p -N '' -f %s` (and keep the file mode 0600)", path, err, shellQuote(path))
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseSigner parses the bytes of an unencrypted OpenSSH Ed25519 private
// key file.
func ParseSigner(pemBytes []byte) (ed25519.PrivateKey, error) {
	raw, err := ssh.ParseRawPrivateKey(pemBytes)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, ErrEncrypted
		}
		return nil, fmt.Errorf("not an OpenSSH private key: %v", err)
	}
	switch k := raw.(type) {
	case *ed25519.PrivateKey:
		return checkPrivate(*k)
	case ed25519.PrivateKey:
		return checkPrivate(k)
	}
	return nil, fmt.Errorf("%w: private key is %s, need Ed25519", ErrKeyType, keyTypeName(raw))
}

func checkPrivate(k ed25519.PrivateKey) (ed25519.PrivateKey, error) {
	if len(k) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("Ed25519 private key has %d bytes, want %d", len(k), ed25519.PrivateKeySize)
	}
	// The OpenSSH format stores the public key twice and the seed once;
	// make sure they agree so a corrupted file cannot sign under another
	// key id than the one it claims.
	if !bytes.Equal(ed25519.NewKeyFromSeed(k.Seed())[32:], k[32:]) {
		return nil, errors.New("Ed25519 private key is inconsistent: its public half does not match its seed")
	}
	return k, nil
}

func keyTypeName(k any) string {
	t := fmt.Sprintf("%T", k)
	t = strings.TrimPrefix(t, "*")
	switch t {
	case "rsa.PrivateKey":
		return "RSA"
	case "ecdsa.PrivateKey":
		return "ECDSA"
	case "dsa.PrivateKey":
		return "DSA"
	}
	return t
}

// sshKeyTypes are the key type names OpenSSH writes before a base64 key
// blob; recognizing them tells a .pub line from an allowed_signers line.
var sshKeyTypes = map[string]bool{
	ssh.KeyAlgoED25519:                            true,
	ssh.KeyAlgoRSA:                                true,
	ssh.KeyAlgoDSA:                                true, //nolint:staticcheck // recognized only to reject it clearly
	ssh.KeyAlgoECDSA256:                           true,
	ssh.KeyAlgoECDSA384:                           true,
	ssh.KeyAlgoECDSA521:                           true,
	ssh.KeyAlgoSKED25519:                          true,
	ssh.KeyAlgoSKECDSA256:                         true,
	ssh.CertAlgoED25519v01:                        true,
	ssh.CertAlgoRSAv01:                            true,
	ssh.CertAlgoDSAv01:                            true, //nolint:staticcheck // recognized only to reject it clearly
	ssh.CertAlgoECDSA256v01:                       true,
	ssh.CertAlgoECDSA384v01:                       true,
	ssh.CertAlgoECDSA521v01:                       true,
	ssh.CertAlgoSKED25519v01:                      true,
	ssh.CertAlgoSKECDSA256v01:                     true,
	"rsa-sha2-256":                                true,
	"rsa-sha2-512":                                true,
	"webauthn-sk-ecdsa-sha2-nistp256@openssh.com": true,
}

// ParsePublicKey parses one line holding an Ed25519 public key, in either
// of two forms:
//
//	ssh-ed25519 AAAA... [comment]                        (.pub, authorized_keys)
//	principal[,principal...] [options] ssh-ed25519 AAAA... [comment]   (allowed_signers)
//
// Principals and options may be double-quoted and then contain spaces.
// The option cert-authority is refused (snapd does not verify
// certificates); other options are ignored.
func ParsePublicKey(line string) (ed25519.PublicKey, error) {
	if !utf8.ValidString(line) {
		return nil, errors.New("line is not valid UTF-8")
	}
	toks, err := tokenize(line)
	if err != nil {
		return nil, err
	}
	var typ, blob string
	switch {
	case len(toks) == 0:
		return nil, errors.New("empty line")
	case sshKeyTypes[toks[0]]:
		if len(toks) < 2 {
			return nil, fmt.Errorf("key type %s without key data", toks[0])
		}
		typ, blob = toks[0], toks[1]
	case len(toks) >= 3 && sshKeyTypes[toks[1]]:
		typ, blob = toks[1], toks[2]
	case len(toks) >= 4 && sshKeyTypes[toks[2]]:
		if hasOption(toks[1], "cert-authority") {
			return nil, fmt.Errorf("%w: option cert-authority (SSH certificates are not supported; list the signing keys themselves)", ErrKeyType)
		}
		typ, blob = toks[2], toks[3]
	default:
		return nil, errors.New("no key found: want `ssh-ed25519 AAAA...` or `principals [options] ssh-ed25519 AAAA...`")
	}
	if typ != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("%w: key type %s, need ssh-ed25519", ErrKeyType, typ)
	}
	raw, err := base64.StdEncoding.DecodeString(blob)
	if err != nil {
		return nil, fmt.Errorf("ssh-ed25519 key data is not valid base64: %v", err)
	}
	pk, err := ssh.ParsePublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("ssh-ed25519 key data: %v", err)
	}
	if pk.Type() != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("key data holds a %s key although the line says ssh-ed25519", pk.Type())
	}
	ck, ok := pk.(ssh.CryptoPublicKey)
	if !ok {
		return nil, errors.New("ssh-ed25519 key data cannot be converted")
	}
	ed, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
	if !ok || len(ed) != ed25519.PublicKeySize {
		return nil, errors.New("ssh-ed25519 key data is not a 32-byte Ed25519 key")
	}
	return ed, nil
}

// hasOption reports whether the comma-separated allowed_signers options
// token holds name (case-insensitive, as OpenSSH compares them).
func hasOption(opts, name string) bool {
	for _, o := range strings.Split(opts, ",") {
		k, _, _ := strings.Cut(o, "=")
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// tokenize splits a line at runs of blanks, keeping double-quoted spans
// (which may contain blanks) inside their token. Quotes stay in the token.
func tokenize(s string) ([]string, error) {
	var toks []string
	var cur strings.Builder
	inQuote, inTok := false, false
	for _, c := range s {
		switch {
		case c == '"':
			inQuote = !inQuote
			inTok = true
			cur.WriteRune(c)
		case (c == ' ' || c == '\t') && !inQuote:
			if inTok {
				toks = append(toks, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			inTok = true
			cur.WriteRune(c)
		}
	}
	if inQuote {
		return nil, errors.New("unterminated double quote")
	}
	if inTok {
		toks = append(toks, cur.String())
	}
	return toks, nil
}

// LoadPublicKeys reads Ed25519 public keys from a file of `.pub` lines or
// an allowed_signers file (see ParsePublicKey); blank lines and lines
// starting with # are skipped. Errors name file:line. A file without any
// key fails with ErrNoKeys, a private key file with ErrPrivateKey. Keys listed more than once are returned once,
// in order of first appearance.
func LoadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	b, err := readKeyFile(path, false)
	if err != nil {
		return nil, err
	}
	if err := privateKeyError(path, b); err != nil {
		return nil, err
	}
	var out []ed25519.PublicKey
	seen := map[string]bool{}
	for i, l := range lines(b) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, err := ParsePublicKey(t)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w (want ssh-ed25519 lines or allowed_signers entries)", path, ErrNoKeys)
	}
	return out, nil
}

// MarshalPublicKey returns the OpenSSH one-line form of pub,
// "ssh-ed25519 AAAA..." (no comment, no newline). It panics if pub is not
// 32 bytes long.
func MarshalPublicKey(pub ed25519.PublicKey) string {
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic("keys: MarshalPublicKey: " + err.Error())
	}
	return pk.Type() + " " + base64.StdEncoding.EncodeToString(pk.Marshal())
}
