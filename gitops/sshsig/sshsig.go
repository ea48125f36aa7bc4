// Package sshsig creates and verifies OpenSSH "SSHSIG" signatures
// (OpenSSH PROTOCOL.sshsig), the format `ssh-keygen -Y sign` writes and that
// git uses for commits and tags when gpg.format=ssh.
//
// Signature blob (all strings are uint32 length + bytes, SSH wire format):
//
//	"SSHSIG" (6 bytes, no length)
//	uint32   version = 1
//	string   public key (wire encoding, e.g. "ssh-ed25519" + 32 bytes)
//	string   namespace ("git" for git objects)
//	string   reserved ("")
//	string   hash algorithm ("sha512" or "sha256")
//	string   signature (SSH signature encoding: string format, string blob)
//
// The signature is made over
//
//	"SSHSIG" || string(namespace) || string(reserved) || string(hash_alg) || string(H(message))
//
// and the blob is armored as base64 wrapped at 70 columns between
// "-----BEGIN SSH SIGNATURE-----" and "-----END SSH SIGNATURE-----" lines.
package sshsig

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

const (
	magic      = "SSHSIG"
	version    = 1
	beginArmor = "-----BEGIN SSH SIGNATURE-----"
	endArmor   = "-----END SSH SIGNATURE-----"
	// HashSHA512 is the hash algorithm Sign uses (as ssh-keygen does).
	HashSHA512 = "sha512"
	// HashSHA256 is the other hash algorithm the protocol allows.
	HashSHA256 = "sha256"
	// NamespaceGit is the namespace git uses for commit and tag signatures.
	NamespaceGit = "git"
)

// Errors returned by Verify and Parse; test with errors.Is.
var (
	// ErrMalformed means the armor or blob does not follow PROTOCOL.sshsig.
	ErrMalformed = errors.New("sshsig: malformed signature")
	// ErrNamespace means the signature was made for another namespace.
	ErrNamespace = errors.New("sshsig: namespace mismatch")
	// ErrWrongKey means the signature names a public key other than the expected one.
	ErrWrongKey = errors.New("sshsig: signed by a different key")
	// ErrBadSignature means the cryptographic check failed.
	ErrBadSignature = errors.New("sshsig: signature does not verify")
)

// Signature is a parsed SSHSIG blob.
type Signature struct {
	PublicKey ssh.PublicKey
	Namespace string
	HashAlg   string
	Sig       *ssh.Signature
}

type wireSig struct {
	Version   uint32
	PublicKey []byte
	Namespace string
	Reserved  string
	HashAlg   string
	Signature []byte
}

type signedData struct {
	Namespace string
	Reserved  string
	HashAlg   string
	Hash      []byte
}

func newHash(alg string) (hash.Hash, error) {
	switch alg {
	case HashSHA512:
		return sha512.New(), nil
	case HashSHA256:
		return sha256.New(), nil
	}
	return nil, fmt.Errorf("%w: unsupported hash algorithm (%d bytes): want %s or %s", ErrMalformed, len(alg), HashSHA512, HashSHA256)
}

func toSign(namespace, alg string, message io.Reader) ([]byte, error) {
	h, err := newHash(alg)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(h, message); err != nil {
		return nil, fmt.Errorf("sshsig: read message: %w", err)
	}
	return append([]byte(magic), ssh.Marshal(signedData{Namespace: namespace, HashAlg: alg, Hash: h.Sum(nil)})...), nil
}

// Sign signs message with an Ed25519 key for namespace (which must not be
// empty) and returns the armored signature, ending in LF, byte-identical in
// structure to `ssh-keygen -Y sign -n namespace` output.
func Sign(key ed25519.PrivateKey, namespace string, message io.Reader) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("sshsig: invalid ed25519 private key")
	}
	signer, err := ssh.NewSignerFromSigner(key)
	if err != nil {
		return nil, fmt.Errorf("sshsig: %w", err)
	}
	return SignWith(signer, namespace, message)
}

// SignWith is Sign for any ssh.Signer (e.g. an agent key).
func SignWith(signer ssh.Signer, namespace string, message io.Reader) ([]byte, error) {
	if namespace == "" {
		return nil, errors.New("sshsig: empty namespace")
	}
	data, err := toSign(namespace, HashSHA512, message)
	if err != nil {
		return nil, err
	}
	sig, err := signer.Sign(rand.Reader, data)
	if err != nil {
		return nil, fmt.Errorf("sshsig: sign: %w", err)
	}
	blob := append([]byte(magic), ssh.Marshal(wireSig{
		Version:   version,
		PublicKey: signer.PublicKey().Marshal(),
		Namespace: namespace,
		HashAlg:   HashSHA512,
		Signature: ssh.Marshal(sig),
	})...)
	return armor(blob), nil
}

func armor(blob []byte) []byte {
	enc := base64.StdEncoding.EncodeToString(blob)
	var b bytes.Buffer
	b.WriteString(beginArmor + "\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n" + endArmor + "\n")
	return b.Bytes()
}

// Parse decodes an armored SSHSIG signature without checking it.
func Parse(armored []byte) (*Signature, error) {
	s := strings.TrimSpace(string(armored))
	if len(s) < len(beginArmor)+len(endArmor) || !strings.HasPrefix(s, beginArmor) || !strings.HasSuffix(s, endArmor) {
		return nil, fmt.Errorf("%w: missing armor lines", ErrMalformed)
	}
	body := strings.Join(strings.Fields(s[len(beginArmor):len(s)-len(endArmor)]), "")
	blob, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("%w: base64: %v", ErrMalformed, err)
	}
	if !bytes.HasPrefix(blob, []byte(magic)) {
		return nil, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	var w wireSig
	if err := ssh.Unmarshal(blob[len(magic):], &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.Version != version {
		return nil, fmt.Errorf("%w: version: want %d", ErrMalformed, version)
	}
	pub, err := ssh.ParsePublicKey(w.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: public key: not a supported SSH public key (%d bytes)", ErrMalformed, len(w.PublicKey))
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(w.Signature, sig); err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	if _, err := newHash(w.HashAlg); err != nil {
		return nil, err
	}
	return &Signature{PublicKey: pub, Namespace: w.Namespace, HashAlg: w.HashAlg, Sig: sig}, nil
}

// Verify checks that armoredSig is a valid SSHSIG signature by pub over
// message in namespace. pub may be an ed25519.PublicKey or an ssh.PublicKey.
func Verify(pub crypto.PublicKey, namespace string, message io.Reader, armoredSig []byte) error {
	var want ssh.PublicKey
	switch k := pub.(type) {
	case ssh.PublicKey:
		want = k
	default:
		var err error
		if want, err = ssh.NewPublicKey(k); err != nil {
			return fmt.Errorf("sshsig: expected key: %w", err)
		}
	}
	sig, err := Parse(armoredSig)
	if err != nil {
		return err
	}
	if sig.Namespace != namespace {
		return fmt.Errorf("%w: signature is for another namespace (%d bytes), want %q", ErrNamespace, len(sig.Namespace), namespace)
	}
	if !bytes.Equal(sig.PublicKey.Marshal(), want.Marshal()) {
		return fmt.Errorf("%w: %s", ErrWrongKey, ssh.FingerprintSHA256(sig.PublicKey))
	}
	data, err := toSign(namespace, sig.HashAlg, message)
	if err != nil {
		return err
	}
	if err := want.Verify(data, sig.Sig); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return nil
}
