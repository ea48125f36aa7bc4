package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// The file names Generate writes inside its directory.
const (
	SignKeyFile = "sign_ed25519"     // OpenSSH Ed25519 private key, 0600
	SignPubFile = "sign_ed25519.pub" // "ssh-ed25519 AAAA... snapd", 0644
	HMACKeyFile = "hmac.key"         // 64 lowercase hex digits + LF, 0600
	AgeKeyFile  = "age.key"          // age-keygen format, 0600
	AgePubFile  = "age.pub"          // "age1..." + LF, 0644
)

// KeyComment is the comment Generate puts in the OpenSSH key files.
const KeyComment = "snapd"

// Generated describes the files Generate wrote.
type Generated struct {
	Dir string
	// Paths of the written files, in the order written: SignKey, SignPub,
	// HMACKey, AgeKey, AgePub.
	SignKey, SignPub, HMACKey, AgeKey, AgePub string
	// PublicKey is the Ed25519 public key (KeyID(PublicKey) is the WTXT
	// key id).
	PublicKey ed25519.PublicKey
	// AgeRecipient is the age1... recipient of the age identity.
	AgeRecipient string
}

// Paths returns the written files in the order Generate writes them.
func (g *Generated) Paths() []string {
	return []string{g.SignKey, g.SignPub, g.HMACKey, g.AgeKey, g.AgePub}
}

// Generate creates dir (mode 0700) if it does not exist and writes a fresh
// key set into it: SignKeyFile, SignPubFile, HMACKeyFile, AgeKeyFile and
// AgePubFile (see the constants for formats and modes). It refuses, with
// an error wrapping fs.ErrExist and before writing anything, when any of
// the five files already exists. Each file is written atomically; if one
// fails, the ones already written are removed again.
func Generate(dir string) (*Generated, error) {
	g := &Generated{
		Dir:     dir,
		SignKey: filepath.Join(dir, SignKeyFile),
		SignPub: filepath.Join(dir, SignPubFile),
		HMACKey: filepath.Join(dir, HMACKeyFile),
		AgeKey:  filepath.Join(dir, AgeKeyFile),
		AgePub:  filepath.Join(dir, AgePubFile),
	}
	for _, p := range g.Paths() {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s: %w; refusing to overwrite a key file (move it away or pick another directory)", p, fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate Ed25519 key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, KeyComment)
	if err != nil {
		return nil, fmt.Errorf("encode Ed25519 key: %w", err)
	}
	hmacKey := make([]byte, HMACKeySize)
	if _, err := rand.Read(hmacKey); err != nil {
		return nil, fmt.Errorf("generate HMAC key: %w", err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generate age identity: %w", err)
	}
	g.PublicKey = pub
	g.AgeRecipient = id.Recipient().String()

	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{g.SignKey, pem.EncodeToMemory(block), 0o600},
		{g.SignPub, []byte(MarshalPublicKey(pub) + " " + KeyComment + "\n"), 0o644},
		{g.HMACKey, []byte(hex.EncodeToString(hmacKey) + "\n"), 0o600},
		{g.AgeKey, []byte(fmt.Sprintf("# created: %s\n# public key: %s\n%s\n",
			time.Now().Format(time.RFC3339), g.AgeRecipient, id.String())), 0o600},
		{g.AgePub, []byte(g.AgeRecipient + "\n"), 0o644},
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for i, f := range files {
		if err := atomicfile.WriteFile(f.path, f.data, f.mode); err != nil {
			for _, done := range files[:i] {
				os.Remove(done.path)
			}
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return g, nil
}
