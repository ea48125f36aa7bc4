package gitops

import (
	"crypto/ed25519"
	"fmt"
	"io"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/snapd-ml/snapd/gitops/sshsig"
)

// Signer signs Git objects with an SSHSIG signature (namespace "git") made
// with an Ed25519 key. It implements go-git's Signer interface, so it can be
// passed as CommitOptions.Signer or CreateTagOptions.Signer; Repo uses the
// same signature format.
type Signer struct {
	Key ed25519.PrivateKey
}

// Sign returns the armored SSHSIG signature of message.
func (s Signer) Sign(message io.Reader) ([]byte, error) {
	return sshsig.Sign(s.Key, sshsig.NamespaceGit, message)
}

var _ git.Signer = Signer{}

// signObject returns the SSHSIG (namespace "git") over the object encoded
// without signature, as git stores it in the gpgsig header / tag body.
func signObject(key ed25519.PrivateKey, encode func(plumbing.EncodedObject) error) (string, error) {
	o := &plumbing.MemoryObject{}
	if err := encode(o); err != nil {
		return "", fmt.Errorf("gitops: encode for signing: %w", err)
	}
	rd, err := o.Reader()
	if err != nil {
		return "", err
	}
	defer rd.Close()
	sig, err := Signer{Key: key}.Sign(rd)
	if err != nil {
		return "", fmt.Errorf("gitops: sign: %w", err)
	}
	return string(sig), nil
}
