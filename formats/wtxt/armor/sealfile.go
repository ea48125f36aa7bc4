package armor

import (
	"crypto/ed25519"
	"fmt"
	"os"

	"github.com/snapd-ml/snapd/internal/atomicfile"
)

// SealFile builds the seal of the armored file at path: it scans the file
// (Scan: armor grammar, size, SHA-256), copies the generation values
// (Kind, Gen, TS, Build, SHA256All, MerklePrev, MerkleThis) from values and
// signs the result when signKey is not nil. Bytes, SHA256, KeyID and Sig of
// values are ignored.
func SealFile(path string, values Seal, signKey ed25519.PrivateKey) (*Seal, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	d, err := Scan(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := values
	s.Bytes, s.SHA256, s.KeyID, s.Sig = d.Bytes, d.SHA256, "", nil
	if signKey != nil {
		if len(signKey) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("seal %s: sign key is not an Ed25519 private key", path)
		}
		s.Sign(signKey)
	}
	return &s, nil
}

// WriteSeal builds the seal of the armored file at path (see SealFile) and
// writes it atomically to SealPath(path) (mode perm). It returns the seal.
func WriteSeal(path string, values Seal, signKey ed25519.PrivateKey, perm os.FileMode) (*Seal, error) {
	s, err := SealFile(path, values, signKey)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(SealPath(path), s.Marshal(), perm); err != nil {
		return nil, fmt.Errorf("write seal: %w", err)
	}
	return s, nil
}
