package verify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
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
// payload as git verify-commit / verify-tag do with gpg.format=ssh: the
// allowed_signers policy (principals, namespaces, valid-after,
// valid-before, cert-authority) is applied at the time of the object's
// committer (header "committer") or tagger (header "tagger") line, as
// git passes it to ssh-keygen (-Overify-time); without that line, now.
// It returns the SHA-256 fingerprint of the signing key when known.
func checkObjectSignature(payload, armored []byte, signers *sshsig.AllowedSigners, header string, now time.Time) (string, error) {
	if !bytes.HasPrefix(armored, []byte("-----BEGIN SSH SIGNATURE-----")) {
		return "", fmt.Errorf("signature is not an SSH signature (gpg.format=ssh): starts %q", firstLine(armored))
	}
	at, ok := identTime(payload, header)
	if !ok {
		at = now
	}
	res, err := signers.Verify(sshsig.NamespaceGit, bytes.NewReader(payload), armored, at)
	fp := ""
	if res != nil {
		fp = res.Fingerprint
	}
	if err != nil {
		return fp, err
	}
	return fp, nil
}

// identTime reads the time of the first header line named header
// ("committer" or "tagger": "NAME <EMAIL> UNIX-SECONDS TZ") in the
// header part of a raw commit or tag, as git's parse_payload_metadata.
func identTime(payload []byte, header string) (time.Time, bool) {
	for _, l := range bytes.Split(payload, []byte("\n")) {
		if len(l) == 0 {
			break // end of the headers
		}
		rest, ok := bytes.CutPrefix(l, []byte(header+" "))
		if !ok {
			continue
		}
		gt := bytes.LastIndexByte(rest, '>')
		if gt < 0 {
			return time.Time{}, false
		}
		f := strings.Fields(string(rest[gt+1:]))
		if len(f) == 0 {
			return time.Time{}, false
		}
		sec, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || sec <= 0 {
			return time.Time{}, false
		}
		return time.Unix(sec, 0), true
	}
	return time.Time{}, false
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
