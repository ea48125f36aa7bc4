package verify

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"

	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// Signature states of a commit or tag.
const (
	SigVerified = "verified"
	SigAbsent   = "absent"
	SigFailed   = "failed"
)

// maxObjectHeader bounds the raw commit and tag objects this package reads
// (snapd's are well under 2 KiB; a commit is only metadata).
const maxObjectHeader = 1 << 20

// errUnsigned is returned by the splitters for an object without signature.
var errUnsigned = errors.New("no signature")

// readRaw returns the raw content of a commit or tag object (the bytes git
// hashes after the "<type> <size>\0" header), at most maxObjectHeader bytes.
func readRaw(st storer.EncodedObjectStorer, t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	o, err := st.EncodedObject(t, h)
	if err != nil {
		return nil, err
	}
	if o.Size() > maxObjectHeader {
		return nil, fmt.Errorf("%s object %s is %d bytes, limit %d", t, h, o.Size(), maxObjectHeader)
	}
	rd, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(io.LimitReader(rd, maxObjectHeader))
}

// splitCommitSignature separates a raw commit into the payload git signs
// (the object without its gpgsig / gpgsig-sha256 headers and their
// continuation lines) and the armored signature of the "gpgsig" header, as
// git's parse_buffer_signed_by_header does for a SHA-1 repository.
func splitCommitSignature(raw []byte) (payload, sig []byte, err error) {
	var p, s bytes.Buffer
	rest := raw
	inHeader, inSig, skipping, found := true, false, false, false
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		line := rest
		if i >= 0 {
			line = rest[:i+1]
		}
		rest = rest[len(line):]
		if !inHeader {
			p.Write(line)
			continue
		}
		switch {
		case len(line) == 1 && line[0] == '\n':
			inHeader, inSig, skipping = false, false, false
			p.Write(line)
		case (inSig || skipping) && line[0] == ' ':
			if inSig {
				s.Write(line[1:])
			}
		case bytes.HasPrefix(line, []byte("gpgsig ")):
			if found {
				return nil, nil, errors.New("two gpgsig headers")
			}
			inSig, skipping, found = true, false, true
			s.Write(line[len("gpgsig "):])
		case bytes.HasPrefix(line, []byte("gpgsig-sha256 ")):
			inSig, skipping = false, true
		default:
			inSig, skipping = false, false
			p.Write(line)
		}
	}
	if !found {
		return raw, nil, errUnsigned
	}
	return p.Bytes(), s.Bytes(), nil
}

// sigMarkers start a signature inside a tag object (git's gpg-interface.c).
var sigMarkers = [][]byte{
	[]byte("-----BEGIN PGP SIGNATURE-----"),
	[]byte("-----BEGIN PGP MESSAGE-----"),
	[]byte("-----BEGIN SIGNED MESSAGE-----"),
	[]byte("-----BEGIN SSH SIGNATURE-----"),
}

// splitTagSignature separates a raw tag into payload and signature: the
// signature starts at the last line that begins with a signature marker,
// as git's parse_signed_buffer decides.
func splitTagSignature(raw []byte) (payload, sig []byte, err error) {
	match := len(raw)
	for off := 0; off < len(raw); {
		for _, m := range sigMarkers {
			if bytes.HasPrefix(raw[off:], m) {
				match = off
			}
		}
		i := bytes.IndexByte(raw[off:], '\n')
		if i < 0 {
			break
		}
		off += i + 1
	}
	if match == len(raw) {
		return raw, nil, errUnsigned
	}
	return raw[:match], raw[match:], nil
}

// checkObjectSignature verifies an armored SSHSIG (namespace "git") over
// payload with one of the trusted keys. It returns the SHA-256 fingerprint
// of the signing key when verified.
func checkObjectSignature(payload, armored []byte, trusted []ed25519.PublicKey) (string, error) {
	if !bytes.HasPrefix(armored, []byte("-----BEGIN SSH SIGNATURE-----")) {
		return "", fmt.Errorf("signature is not an SSH signature (gpg.format=ssh): starts %q", firstLine(armored))
	}
	sig, err := sshsig.Parse(armored)
	if err != nil {
		return "", err
	}
	fp := ssh.FingerprintSHA256(sig.PublicKey)
	var key ed25519.PublicKey
	for _, k := range trusted {
		pk, err := ssh.NewPublicKey(k)
		if err == nil && bytes.Equal(pk.Marshal(), sig.PublicKey.Marshal()) {
			key = k
			break
		}
	}
	if key == nil {
		return fp, fmt.Errorf("signed by %s key %s, which is not among the %d trusted key(s)", sig.PublicKey.Type(), fp, len(trusted))
	}
	if err := sshsig.Verify(key, sshsig.NamespaceGit, bytes.NewReader(payload), armored); err != nil {
		return fp, fmt.Errorf("key %s: %w", fp, err)
	}
	return fp, nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
