package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/snapd-ml/snapd/formats/wtxt"
	"github.com/snapd-ml/snapd/formats/wtxt/armor"
	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/keys"
	"golang.org/x/crypto/ssh"
)

// loadFileSigners reads the --pubkey files of verify and review as one
// signing policy (loadSigners: bare public keys, trusted for everything,
// and allowed_signers lines with their options: namespaces, valid-after,
// valid-before, cert-authority) and returns the Ed25519 keys it allows to
// sign WTXT files: the plain-key lines that permit namespace "file"
// (sshsig.NamespaceFile) at the time of the snapshot.
//
// That time is the meta ts of the WTXT file at path, as git and
// verify-repo use a commit's own time; it is now when path is "" (a head
// read from Git or GitHub), the file is sealed (its header is encrypted),
// or its header or ts does not parse (the verifier then reports the
// header). The ts is covered by the signature, so only a key's own holder
// can choose it.
//
// No paths: nil, no signature check. When paths are given, it fails (exit
// 1) naming the namespace, the time and why each line is left out if the
// policy allows no key at that time (an empty list would leave the
// signature unchecked), or if the file is signed by a key the policy
// lists but does not allow then.
func loadFileSigners(paths []string, path string) ([]ed25519.PublicKey, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	signers, err := loadSigners(paths)
	if err != nil {
		return nil, err
	}
	at, keyID := time.Now(), ""
	if h := readWTXTHeader(path); h != nil {
		keyID = h.KeyID
		if t, err := wtxt.ParseTS(h.TS); err == nil {
			at = t
		}
	}
	ns, when := sshsig.NamespaceFile, at.UTC().Format(time.RFC3339)
	trusted := signers.Ed25519Keys(ns, at)
	if len(trusted) == 0 {
		return nil, fmt.Errorf("--pubkey: allowed_signers allows no key to sign WTXT files (namespace %q) at %s: %s",
			ns, when, strings.Join(signers.Excluded(ns, at), "; "))
	}
	if keyID == "" {
		return trusted, nil
	}
	for _, k := range trusted {
		if keys.KeyID(k) == keyID {
			return trusted, nil
		}
	}
	// The signer is not allowed: say why when the policy lists its key.
	var why []string
	for _, l := range signers.Lines {
		ck, ok := l.Key.(ssh.CryptoPublicKey)
		if !ok {
			continue
		}
		if ed, ok := ck.CryptoPublicKey().(ed25519.PublicKey); ok && keys.KeyID(ed) == keyID {
			why = append(why, (&sshsig.AllowedSigners{Lines: []sshsig.AllowedSigner{l}}).Excluded(ns, at)...)
		}
	}
	if len(why) > 0 {
		return nil, fmt.Errorf("--pubkey: allowed_signers does not allow keyid %s, which signed %s, to sign WTXT files (namespace %q) at %s: %s",
			keyID, path, ns, when, strings.Join(why, "; "))
	}
	return trusted, nil
}

// readWTXTHeader returns the header of the plain WTXT file at path, or nil
// when path is "", unreadable, sealed or not a WTXT file.
func readWTXTHeader(path string) *wtxt.Header {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	br := bufio.NewReader(io.LimitReader(f, 64<<10))
	head, _ := br.Peek(64)
	if armor.IsArmored(head) || !bytes.HasPrefix(head, []byte("WTXT ")) {
		return nil
	}
	h, err := wtxt.ReadHeader(br)
	if err != nil {
		return nil
	}
	return h
}
