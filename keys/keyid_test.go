package keys

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

// The conformance vectors' public key and the keyid their sign lines carry.
func TestKeyIDVector(t *testing.T) {
	line := "AAAAC3NzaC1lZDI1NTE5AAAAIMqlJ2y3XCL/DzetSCy1yXiNnp4L7YsaAPbU4stA+vXm"
	blob, err := base64.StdEncoding.DecodeString(line)
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.PublicKey(blob[len(blob)-32:])
	if got := KeyID(pub); got != "7dd3e4f0bb8cf9eb" {
		t.Fatalf("KeyID = %s", got)
	}
	if strings.ToLower(KeyID(pub)) != KeyID(pub) {
		t.Fatal("not lowercase")
	}
}
