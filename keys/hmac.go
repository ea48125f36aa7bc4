package keys

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// HMACKeySize is the size of an HMAC key in bytes (64 hex digits on disk).
const HMACKeySize = 32

// LoadHMACKey reads an HMAC key file: exactly 64 hex digits (either case)
// encoding 32 bytes, optionally followed by one LF or CRLF. The file must
// not be accessible to group or others (ErrPermissions). Errors say what
// is wrong without quoting the key.
func LoadHMACKey(path string) ([]byte, error) {
	b, err := readKeyFile(path, true)
	if err != nil {
		return nil, err
	}
	k, err := ParseHMACKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseHMACKey parses the content of an HMAC key file (see LoadHMACKey).
func ParseHMACKey(b []byte) ([]byte, error) {
	n := len(b)
	switch {
	case n >= 2 && b[n-2] == '\r' && b[n-1] == '\n':
		b = b[:n-2]
	case n >= 1 && b[n-1] == '\n':
		b = b[:n-1]
	}
	for i, c := range b {
		if !isHex(c) {
			return nil, fmt.Errorf("HMAC key: byte %d is not a hex digit; want %d hex digits and an optional newline", i, 2*HMACKeySize)
		}
	}
	if len(b) != 2*HMACKeySize {
		return nil, fmt.Errorf("HMAC key: %d hex digits, want %d (%d bytes)", len(b), 2*HMACKeySize, HMACKeySize)
	}
	k := make([]byte, HMACKeySize)
	if _, err := hex.Decode(k, b); err != nil {
		return nil, errors.New("HMAC key: not hex")
	}
	return k, nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
