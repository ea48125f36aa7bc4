package keys

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"filippo.io/age"
	"filippo.io/age/agessh"
)

// LoadAgeIdentities reads age identities from path, which is either an
// age-keygen file (AGE-SECRET-KEY-1... or AGE-SECRET-KEY-PQ-1... lines,
// blank lines and # comments) or an unencrypted OpenSSH private key
// (Ed25519 or RSA, used through filippo.io/age/agessh). The file must not
// be accessible to group or others (ErrPermissions).
func LoadAgeIdentities(path string) ([]age.Identity, error) {
	b, err := readKeyFile(path, true)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN")) {
		id, err := agessh.ParseIdentity(b)
		if err != nil {
			if _, perr := ParseSigner(b); errors.Is(perr, ErrEncrypted) {
				return nil, fmt.Errorf("%s: %w; snapd cannot prompt for it", path, ErrEncrypted)
			}
			return nil, fmt.Errorf("%s: SSH identity: %v", path, err)
		}
		return []age.Identity{id}, nil
	}
	var ids []age.Identity
	for i, l := range lines(b) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		// Don't quote the line in errors: it may hold a secret key.
		var id age.Identity
		var err error
		switch {
		case strings.HasPrefix(t, "AGE-SECRET-KEY-PQ-1"):
			id, err = age.ParseHybridIdentity(t)
		case strings.HasPrefix(t, "AGE-SECRET-KEY-1"):
			id, err = age.ParseX25519Identity(t)
		case strings.HasPrefix(t, "AGE-PLUGIN-"):
			err = errors.New("age plugin identities are not supported")
		case strings.HasPrefix(t, "age1"):
			err = errors.New("this is a recipient (public key), not an identity")
		default:
			err = errors.New("unknown identity type: want AGE-SECRET-KEY-1... (age-keygen) or an OpenSSH private key file")
		}
		if err != nil && strings.HasPrefix(t, "AGE-SECRET-KEY-") {
			// The library's message may carry part of the key (a bech32
			// checksum computed from it): never pass it on.
			err = errors.New("malformed age secret key (bad encoding, length or checksum)")
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: %w: no age identities", path, ErrNoKeys)
	}
	return ids, nil
}

// LoadAgeRecipients reads age recipients from path: one per line, either
// age1... (X25519, or age1pq1... hybrid) or an OpenSSH public key line
// (ssh-ed25519 or ssh-rsa, through agessh); blank lines and # comments
// are skipped. Errors name file:line.
func LoadAgeRecipients(path string) ([]age.Recipient, error) {
	b, err := readKeyFile(path, false)
	if err != nil {
		return nil, err
	}
	var rs []age.Recipient
	for i, l := range lines(b) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		r, err := ParseAgeRecipient(t)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s: %w: no age recipients", path, ErrNoKeys)
	}
	return rs, nil
}

// ParseAgeRecipient parses one recipient: age1... or an OpenSSH public key
// line (ssh-ed25519, ssh-rsa).
func ParseAgeRecipient(s string) (age.Recipient, error) {
	if !utf8.ValidString(s) {
		return nil, errors.New("recipient is not valid UTF-8")
	}
	switch {
	// The libraries' errors quote the line; they are replaced, so a
	// secret given where a recipient was expected never reaches a log.
	case strings.HasPrefix(s, "age1pq1"):
		r, err := age.ParseHybridRecipient(s)
		if err != nil {
			return nil, errors.New("malformed age1pq1 recipient (bad encoding, length or checksum)")
		}
		return r, nil
	case strings.HasPrefix(s, "age1"):
		r, err := age.ParseX25519Recipient(s)
		if err != nil {
			return nil, errors.New("malformed age1 recipient (bad encoding, length or checksum)")
		}
		return r, nil
	case strings.HasPrefix(s, "ssh-"):
		r, err := agessh.ParseRecipient(s)
		if err != nil {
			return nil, errors.New("malformed or unsupported SSH recipient: want ssh-ed25519 or ssh-rsa followed by base64 key data")
		}
		return r, nil
	case strings.HasPrefix(s, "AGE-SECRET-KEY-"):
		return nil, errors.New("this is a secret identity, not a recipient: use `age-keygen -y` to get the public key")
	}
	return nil, errors.New("unknown recipient type: want age1... or ssh-ed25519 AAAA...")
}
