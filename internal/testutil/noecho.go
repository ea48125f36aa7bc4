package testutil

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// SecretMarker stands for secret bytes (a key) inside a file that a decoder
// is asked to read; decoder errors must never quote it.
const SecretMarker = "S3CRETMARKERxK9q"

// NoEcho is a fuzz property for decoders: it decodes b with SecretMarker
// inserted at the start and right after the first magicLen bytes (so that
// decoding gets past the magic) and fails if an error quotes the marker or
// either of its halves. decode returns the decoder's error.
func NoEcho(t testing.TB, decode func([]byte) error, b []byte, magicLen int) {
	t.Helper()
	variants := [][]byte{append([]byte(SecretMarker), b...)}
	if magicLen > 0 && len(b) >= magicLen {
		v := append(append(append([]byte(nil), b[:magicLen]...), SecretMarker...), b[magicLen:]...)
		variants = append(variants, v)
	}
	for _, v := range variants {
		err := decode(v)
		if err == nil {
			continue
		}
		msg := err.Error()
		for _, s := range SecretForms() {
			if strings.Contains(msg, s) {
				t.Fatalf("decoder error quotes the file's bytes: %s", msg)
			}
		}
	}
}

// SecretForms lists the ways an error could reveal SecretMarker: the
// marker and its halves as text, escaped or hex, and its 4- and 8-byte
// windows read as little- or big-endian integers (a length field printed
// in decimal reveals the bytes it was read from).
func SecretForms() []string {
	m := []byte(SecretMarker)
	forms := []string{SecretMarker, SecretMarker[:8], SecretMarker[8:], fmt.Sprintf("%x", m[:8]), fmt.Sprintf("%x", m[8:])}
	for i := 0; i+8 <= len(m); i++ {
		forms = append(forms, fmt.Sprint(binary.LittleEndian.Uint64(m[i:])), fmt.Sprint(binary.BigEndian.Uint64(m[i:])))
	}
	for i := 0; i+4 <= len(m); i++ {
		forms = append(forms, fmt.Sprint(binary.LittleEndian.Uint32(m[i:])), fmt.Sprint(binary.BigEndian.Uint32(m[i:])))
	}
	return forms
}
