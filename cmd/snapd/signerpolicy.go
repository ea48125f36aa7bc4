package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/snapd-ml/snapd/gitops/sshsig"
	"github.com/snapd-ml/snapd/keys"
)

// loadSigners reads --pubkey files as one signing policy: .pub files
// (bare key lines: trusted for everything) and allowed_signers files
// (applied as ssh-keygen and git apply them: principals, namespaces,
// valid-after, valid-before, cert-authority). A private key file among paths is refused as such (keys.ErrPrivateKey).
func loadSigners(paths []string) (*sshsig.AllowedSigners, error) {
	for _, p := range paths {
		if err := keys.CheckPublicKeyFile(p); err != nil {
			return nil, usageError{err}
		}
	}
	s, err := sshsig.LoadAllowedSigners(paths...)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return nil, ioError{err}
	case err != nil:
		return nil, usageError{err}
	}
	return s, nil
}

// allowedSignersFile returns one allowed_signers file holding the lines
// of paths, for git's gpg.ssh.allowedSignersFile: the file itself when
// there is one, else their concatenation in a temporary file that done
// removes.
func allowedSignersFile(paths []string) (file string, done func(), err error) {
	if len(paths) == 1 {
		p, err := filepath.Abs(paths[0])
		return p, func() {}, err
	}
	f, err := os.CreateTemp("", "snapd-allowed-signers-")
	if err != nil {
		return "", nil, err
	}
	done = func() { os.Remove(f.Name()) }
	for _, p := range paths {
		b, rerr := os.ReadFile(p)
		if rerr == nil {
			if len(b) > 0 && b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			_, rerr = f.Write(b)
		}
		if rerr != nil {
			f.Close()
			done()
			return "", nil, rerr
		}
	}
	if err := f.Close(); err != nil {
		done()
		return "", nil, err
	}
	return f.Name(), done, nil
}
