package keys

import (
	"crypto/ed25519"
	"encoding/hex"

	"lukechampine.com/blake3"
)

// KeyID returns the WTXT key id of an Ed25519 public key: the first 8 bytes
// of BLAKE3-256 of the 32-byte key, as 16 lowercase hex digits.
func KeyID(pub ed25519.PublicKey) string {
	sum := blake3.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}
